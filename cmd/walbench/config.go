package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults, named so that --help and docs/benchmarks.md agree with the code.
const (
	DefaultRows            = 1_000_000
	DefaultRowsPerTx       = 1
	DefaultPayloadBytes    = 430
	DefaultRuns            = 3
	DefaultHugeRows        = 1_000_000
	DefaultHugeRuns        = 3
	DefaultLatencyLoads    = "1000x1,10000x1,10000x10"
	DefaultLatencyDuration = 30 * time.Second
	DefaultLatencyWarmup   = 20 * time.Second // the broker's JIT compiles walstream's paths meanwhile (docs/benchmarks.md)
	DefaultLatencyRuns     = 3
	DefaultLatencyWriters  = 4
	DefaultScenarios       = "backlog,huge,latency"
	DefaultPGBin           = "/usr/lib/postgresql/15/bin"
	DefaultOutDir          = "bench/results"
	DefaultMaxLoad         = 0.5
	DefaultQuietTimeout    = 15 * time.Minute
	DefaultDrainTimeout    = 15 * time.Minute
	DefaultPartitions      = 3
	DefaultForeignRows     = 2_000_000
	DefaultForeignRuns     = 20
	DefaultDebeziumRows    = 1_000_000
	DefaultDebeziumRuns    = 3
	DefaultDebeziumModes   = "standalone,distributed"
	DefaultReemitRows      = 1_000_000
	DefaultReemitLoad      = "1000x1"
	DefaultReemitRuns      = 1
	DefaultFleetStreams    = 10
	DefaultFleetLoad       = "100x1"
	DefaultFleetRuns       = 1
	DefaultBrokerWarmUp    = 30 * time.Second
)

// Scenario names for --scenarios.
const (
	ScenarioBacklog = "backlog"
	ScenarioHuge    = "huge"
	ScenarioLatency = "latency"
	// ScenarioForeign is large transactions on a table outside the
	// publication, each followed by one outbox row; it runs with
	// streaming of in-progress transactions off, then on.
	ScenarioForeign = "foreign"
	// ScenarioDebezium is Debezium's Postgres connector with the outbox
	// router in Kafka Connect, the peer: the same backlog drain and live
	// loads, walstream and Debezium alternating (debezium.go).
	ScenarioDebezium = "debezium"
	// ScenarioReemit re-emits a backlog of outbox rows with walstream
	// reemit while a live load runs (reemit.go).
	ScenarioReemit = "reemit"
	// ScenarioFleet is many streams in one process, each under a live
	// load, beside one of them alone (fleet.go).
	ScenarioFleet = "fleet"
)

// Config is everything walbench is told.
type Config struct {
	Rows           int
	RowsPerTx      int
	PayloadBytes   int
	Runs           int
	HugeRows       int
	HugeRuns       int
	LatencyLoads   []Load
	LatencyFor     time.Duration
	LatencyWarmup  time.Duration
	LatencyRuns    int
	LatencyWriters int
	LatencyFloor   bool // Kafka's latency floor after each live load walstream held (floor.go)
	ForeignRows    int
	ForeignRuns    int
	DebeziumRows   int
	DebeziumRuns   int
	DebeziumModes  []string
	ReemitRows     int
	ReemitLoad     Load
	ReemitRuns     int
	FleetStreams   int
	FleetServers   int  // Postgres servers the fleet's streams are spread over
	FleetLoad      Load // each stream's
	FleetRuns      int
	FleetDebezium  string // empty, standalone or distributed
	Scenarios      map[string]bool
	Profile        bool
	PGO            string   // empty: no profile for profile-guided optimization
	PGURL          string   // empty: start a throwaway cluster
	PGSettings     []string // name=value, added to the throwaway cluster's
	PGBin          string
	RecvLogical    string // pg_recvlogical binary
	WalstreamBin   string // empty: build ./cmd/walstream
	WalstreamArgs  []string
	// Avro adds a drain by walstream under the Avro converter to each
	// backlog and huge run, with Apicurio Registry.
	Avro         bool
	Partitions   int
	Broker       string // BrokerKafka or BrokerKfake
	BrokerWarmUp time.Duration
	OutDir       string
	WorkDir      string // empty: a temporary directory, removed at the end
	MaxLoad      float64
	QuietTimeout time.Duration
	DrainTimeout time.Duration
}

func parseConfig(args []string, stderr io.Writer) (*Config, error) {
	cfg := &Config{}
	fs := flag.NewFlagSet("walbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: walbench [flags]\n\nEnd-to-end benchmark of walstream against pg_recvlogical; see docs/benchmarks.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.Rows, "rows", DefaultRows, "outbox rows preloaded for each backlog run")
	fs.IntVar(&cfg.RowsPerTx, "rows-per-tx", DefaultRowsPerTx, "rows per Postgres transaction in the backlog preload")
	fs.IntVar(&cfg.PayloadBytes, "payload-bytes", DefaultPayloadBytes, "size of each row's JSON payload as Postgres sends it")
	fs.IntVar(&cfg.Runs, "runs", DefaultRuns, "backlog runs (the report quotes medians)")
	fs.IntVar(&cfg.HugeRows, "huge-rows", DefaultHugeRows, "rows in the single transaction of the huge scenario; each run also drains one of this many rows plus one, so that one size is a multiple of walstream's batch limit and one is not")
	fs.IntVar(&cfg.HugeRuns, "huge-runs", DefaultHugeRuns, "runs of the huge-transaction scenario")
	loads := fs.String("latency-loads", DefaultLatencyLoads, "offered loads of the latency scenario, comma-separated RATExROWS: RATE rows/s in transactions of ROWS rows")
	fs.DurationVar(&cfg.LatencyFor, "latency-duration", DefaultLatencyDuration, "measured time at each offered load")
	fs.DurationVar(&cfg.LatencyWarmup, "latency-warmup", DefaultLatencyWarmup, "time at each offered load before measuring")
	fs.IntVar(&cfg.LatencyRuns, "latency-runs", DefaultLatencyRuns, "runs of the latency scenario")
	fs.IntVar(&cfg.LatencyWriters, "latency-writers", DefaultLatencyWriters, "Postgres connections inserting rows in the latency scenario")
	fs.BoolVar(&cfg.LatencyFloor, "latency-floor", true, "after each live load walstream held (the latency and reemit scenarios, walstream's in the debezium scenario), commit the Kafka transactions walstream committed in the measured time again, as many, as large and begun at the same moments, with a bare transactional producer (franz-go, then the minimal client) on the same broker, and time its records to read_committed visibility: Kafka's own latency floor")
	fs.IntVar(&cfg.ForeignRows, "foreign-rows", DefaultForeignRows, "rows of each large transaction on a table outside the publication in the foreign scenario")
	fs.IntVar(&cfg.ForeignRuns, "foreign-runs", DefaultForeignRuns, "large transactions, each followed by one outbox row, in the foreign scenario, with streaming of in-progress transactions off and then on")
	fs.IntVar(&cfg.DebeziumRows, "debezium-rows", DefaultDebeziumRows, "rows of the debezium scenario's backlog, one per transaction; 0 skips the backlog")
	fs.IntVar(&cfg.DebeziumRuns, "debezium-runs", DefaultDebeziumRuns, "rounds of the debezium scenario, each running every tool once, one after the other")
	modes := fs.String("debezium-modes", DefaultDebeziumModes, "Kafka Connect modes of the debezium scenario, comma-separated: standalone (the producer idempotent), distributed (exactly-once)")
	fs.IntVar(&cfg.ReemitRows, "reemit-rows", DefaultReemitRows, "rows the reemit scenario re-emits with one request")
	reemitLoad := fs.String("reemit-load", DefaultReemitLoad, "live load during the reemit scenario's request, RATExROWS as in -latency-loads")
	fs.IntVar(&cfg.ReemitRuns, "reemit-runs", DefaultReemitRuns, "runs of the reemit scenario")
	fs.IntVar(&cfg.FleetStreams, "fleet-streams", DefaultFleetStreams, "streams in the one walstream process of the fleet scenario, each its own outbox table, publication and slot")
	fs.IntVar(&cfg.FleetServers, "fleet-servers", 1, "Postgres servers the fleet scenario's streams are spread over, stream i on server (i-1) mod n, each a throwaway cluster like the first: a walsender reads every change of its server, so a hundred streams on one server each read the others' load")
	fleetLoad := fs.String("fleet-load", DefaultFleetLoad, "each stream's live load in the fleet scenario, RATExROWS as in -latency-loads")
	fs.IntVar(&cfg.FleetRuns, "fleet-runs", DefaultFleetRuns, "runs of the fleet scenario")
	fs.StringVar(&cfg.FleetDebezium, "fleet-debezium", "", "in each fleet run, also run the streams as connectors of Debezium's Postgres connector in one Kafka Connect worker of this mode (standalone or distributed, Apache Kafka only) under the same load; empty: not")
	scenarios := fs.String("scenarios", DefaultScenarios, "scenarios to run, comma-separated: backlog, huge, latency, foreign (Postgres 14 and later), debezium (Debezium as the peer, on Apache Kafka), reemit (a re-emit request beside a live load), fleet (many streams in one process)")
	fs.BoolVar(&cfg.Profile, "profile", false, "add one profiled backlog run (perf for every process, a pprof CPU profile of the broker); its figures are not in the medians")
	fs.StringVar(&cfg.PGO, "pgo", "", "write walstream's CPU profile over every measured phase, merged, to this file (cmd/walstream/default.pgo: see docs/benchmarks.md); walstream then runs with --pprof-addr, and the report names it")
	fs.StringVar(&cfg.PGURL, "pg-url", "", "use this Postgres (superuser, wal_level=logical) instead of starting a throwaway cluster")
	pgSettings := fs.String("pg-settings", "", "settings added to the throwaway Postgres's, comma-separated name=value (e.g. synchronous_commit=off,wal_writer_delay=10ms); the report names them")
	fs.StringVar(&cfg.PGBin, "pg-bin", DefaultPGBin, "directory of the Postgres 15 server binaries")
	fs.StringVar(&cfg.RecvLogical, "pg-recvlogical", "", "pg_recvlogical binary (default: in -pg-bin, else on PATH)")
	fs.StringVar(&cfg.WalstreamBin, "walstream-bin", "", "walstream binary to measure (default: go build ./cmd/walstream)")
	extra := fs.String("walstream-args", "", "extra arguments for `walstream run`, space-separated; walstream otherwise runs at its defaults, and the report names them; "+registryArg+" stands for the URL of an Apicurio Registry walbench starts (scripts/deps.sh installs it), e.g. --converter avro --schema-registry-url "+registryArg)
	fs.BoolVar(&cfg.Avro, "avro", false, "in each backlog and huge run, drain a fourth slot with walstream under the Avro converter (keys and values, Apicurio Registry in memory), after the walstream of -walstream-args, e.g. --converter json, and compare the two")
	fs.IntVar(&cfg.Partitions, "partitions", DefaultPartitions, "partitions of every topic")
	fs.StringVar(&cfg.Broker, "broker", BrokerKafka, "broker to publish to: kafka (Apache Kafka, one node, as kafka-server-start.sh runs it; scripts/deps.sh installs it) or kfake (franz-go's fake broker, in a process of its own)")
	fs.DurationVar(&cfg.BrokerWarmUp, "broker-warm-up", DefaultBrokerWarmUp, "on Apache Kafka, commit transactions shaped as walstream's (keyed records and a checkpoint record) on each new broker for this long, read back read_committed, before its phase: the JVM compiles the broker's transaction paths under their first load, which a phase begun at once would pay; 0: not")
	fs.StringVar(&cfg.OutDir, "out", DefaultOutDir, "directory for walbench.json, walbench.md, logs and profiles")
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "directory for the cluster, the broker's data and binaries (default: a temporary one, removed at the end)")
	fs.Float64Var(&cfg.MaxLoad, "max-load", DefaultMaxLoad, "before each measured phase, wait until the 1-minute load average is below this")
	fs.DurationVar(&cfg.QuietTimeout, "quiet-timeout", DefaultQuietTimeout, "longest wait for a quiet machine; after it the phase runs anyway and is marked")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", DefaultDrainTimeout, "limit on each load and drain")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.LatencyLoads, err = parseLoads(*loads); err != nil {
		return nil, fmt.Errorf("-latency-loads: %w", err)
	}
	if l, err := parseLoads(*reemitLoad); err != nil || len(l) != 1 {
		return nil, fmt.Errorf("-reemit-load %q: one load, RATExROWS: %v", *reemitLoad, err)
	} else {
		cfg.ReemitLoad = l[0]
	}
	if l, err := parseLoads(*fleetLoad); err != nil || len(l) != 1 {
		return nil, fmt.Errorf("-fleet-load %q: one load, RATExROWS: %v", *fleetLoad, err)
	} else {
		cfg.FleetLoad = l[0]
	}
	cfg.Scenarios = make(map[string]bool)
	for _, s := range commaList(*scenarios) {
		cfg.Scenarios[s] = true
	}
	cfg.WalstreamArgs = strings.Fields(*extra)
	cfg.PGSettings = commaList(*pgSettings)
	cfg.DebeziumModes = commaList(*modes)
	if cfg.RecvLogical == "" {
		cfg.RecvLogical = filepath.Join(cfg.PGBin, "pg_recvlogical")
		if _, err := exec.LookPath(cfg.RecvLogical); err != nil {
			if p, err := exec.LookPath("pg_recvlogical"); err == nil {
				cfg.RecvLogical = p
			}
		}
	}
	return cfg, cfg.Validate()
}

// Validate names the first setting that cannot work.
func (c *Config) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("-%s must be positive, got %d", name, v))
		}
	}
	positive("rows", c.Rows)
	positive("rows-per-tx", c.RowsPerTx)
	positive("runs", c.Runs)
	positive("latency-writers", c.LatencyWriters)
	positive("partitions", c.Partitions)
	if c.Broker != BrokerKafka && c.Broker != BrokerKfake {
		errs = append(errs, fmt.Errorf("-broker %q is not kafka or kfake", c.Broker))
	}
	if c.HugeRows < 0 || c.HugeRuns < 0 || c.LatencyRuns < 0 || c.ForeignRows < 0 || c.ForeignRuns < 0 {
		errs = append(errs, errors.New("-huge-rows, -huge-runs, -latency-runs, -foreign-rows and -foreign-runs must not be negative"))
	}
	if c.PayloadBytes < 200 {
		errs = append(errs, fmt.Errorf("-payload-bytes must be at least 200 (the JSON without padding), got %d", c.PayloadBytes))
	}
	for s := range c.Scenarios {
		if s != ScenarioBacklog && s != ScenarioHuge && s != ScenarioLatency && s != ScenarioForeign && s != ScenarioDebezium && s != ScenarioReemit && s != ScenarioFleet {
			errs = append(errs, fmt.Errorf("-scenarios: unknown scenario %q", s))
		}
	}
	for i, m := range c.DebeziumModes {
		if m != "standalone" && m != "distributed" {
			errs = append(errs, fmt.Errorf("-debezium-modes: %q is not standalone or distributed", m))
		} else if slices.Contains(c.DebeziumModes[:i], m) {
			errs = append(errs, fmt.Errorf("-debezium-modes: %q twice", m))
		}
	}
	if c.Scenarios[ScenarioDebezium] && len(c.DebeziumModes) == 0 {
		errs = append(errs, errors.New("-debezium-modes: none given for -scenarios debezium"))
	}
	if c.Scenarios[ScenarioDebezium] && c.Broker != BrokerKafka {
		errs = append(errs, errors.New("-scenarios debezium runs on Apache Kafka only (-broker kafka): Kafka Connect's exactly-once mode needs it"))
	}
	if c.ReemitRows <= 0 || c.ReemitRuns < 0 || c.ReemitLoad.Rate <= 0 || c.ReemitLoad.RowsPerTx <= 0 {
		errs = append(errs, errors.New("-reemit-rows and the rate and rows of -reemit-load must be positive, -reemit-runs not negative"))
	}
	if c.FleetStreams < 1 || c.FleetStreams > 100 || c.FleetRuns < 0 || c.FleetLoad.Rate <= 0 || c.FleetLoad.RowsPerTx <= 0 || c.FleetLoad.RowsPerTx > c.FleetLoad.Rate {
		errs = append(errs, errors.New("-fleet-streams must be from 1 to 100 (the Postgres walbench starts has 128 slots), -fleet-runs not negative, and -fleet-load a positive rate of at least one transaction per second"))
	}
	if c.FleetServers < 1 || c.FleetServers > c.FleetStreams || c.FleetServers > 1 && c.PGURL != "" {
		errs = append(errs, errors.New("-fleet-servers must be from 1 to -fleet-streams, and 1 with -pg-url: walbench starts the others"))
	}
	if c.FleetDebezium != "" && (c.FleetDebezium != "standalone" && c.FleetDebezium != "distributed" || c.Broker != BrokerKafka) {
		errs = append(errs, fmt.Errorf("-fleet-debezium %q: standalone or distributed, on Apache Kafka (-broker kafka)", c.FleetDebezium))
	}
	if c.DebeziumRows < 0 || c.DebeziumRuns < 0 {
		errs = append(errs, errors.New("-debezium-rows and -debezium-runs must not be negative"))
	}
	for _, l := range c.LatencyLoads {
		if l.Rate <= 0 || l.RowsPerTx <= 0 || l.RowsPerTx > l.Rate {
			errs = append(errs, fmt.Errorf("-latency-loads: %s needs a positive rate of at least one transaction per second", l))
		}
	}
	if c.LatencyFor <= 0 || c.LatencyWarmup < 0 || c.DrainTimeout <= 0 {
		errs = append(errs, errors.New("-latency-duration and -drain-timeout must be positive, -latency-warmup not negative"))
	}
	if c.OutDir == "" {
		errs = append(errs, errors.New("-out must not be empty"))
	}
	for _, kv := range c.PGSettings {
		if name, _, ok := strings.Cut(kv, "="); !ok || strings.TrimSpace(name) == "" {
			errs = append(errs, fmt.Errorf("-pg-settings: %q is not name=value", kv))
		}
	}
	if len(c.PGSettings) > 0 && c.PGURL != "" {
		errs = append(errs, errors.New("-pg-settings applies to the Postgres walbench starts, not to one given with -pg-url"))
	}
	return errors.Join(errs...)
}

// commaList splits a comma-separated flag value, its items trimmed and
// empty ones left out.
func commaList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Load is an offered load of the latency scenario: Rate rows per second
// in transactions of RowsPerTx rows.
type Load struct {
	Rate      int `json:"rows_per_sec"`
	RowsPerTx int `json:"rows_per_tx"`
}

func (l Load) String() string { return fmt.Sprintf("%dx%d", l.Rate, l.RowsPerTx) }

func parseLoads(s string) ([]Load, error) {
	var out []Load
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		rate, rows, ok := strings.Cut(f, "x")
		if !ok {
			rows = "1"
		}
		var l Load
		var err1, err2 error
		l.Rate, err1 = strconv.Atoi(rate)
		l.RowsPerTx, err2 = strconv.Atoi(rows)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("parsing %q as RATExROWS: %w", f, err)
		}
		out = append(out, l)
	}
	return out, nil
}
