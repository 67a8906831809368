package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/walstream/walstream/internal/testenv"
	"golang.org/x/sys/unix"
)

// bench is one walbench invocation: the servers it started and what every
// scenario needs from them.
type bench struct {
	cfg         *Config
	log         io.Writer
	exe         string // walbench itself, started again as the broker under the name kfake-broker
	recvExe     string // walbench as pgoutput-recv
	kafkaTxnExe string // walbench as kafka-txn
	walstream   string // the binary under test
	workDir     string
	pg          *postgres
	fleetPG     []*postgres // the fleet scenario's servers, pg first (startFleetServers)
	db          *db
	pad         int               // payload padding for -payload-bytes
	perf        bool              // perf can sample here
	pgo         *pgoProfiles      // nil without -pgo
	registry    *testenv.Registry // Apicurio Registry, for -avro and {registry}; nil otherwise
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "walbench: "+format+"\n", args...)
}

// runBench runs the scenarios, writing the report after each run so that
// an interrupted benchmark keeps what it measured.
func runBench(ctx context.Context, cfg *Config, stdout, stderr io.Writer) (err error) {
	b := &bench{cfg: cfg, log: stderr}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return fmt.Errorf("creating -out %s: %w", cfg.OutDir, err)
	}
	if b.workDir = cfg.WorkDir; b.workDir == "" {
		if b.workDir, err = os.MkdirTemp("", "walbench-"); err != nil {
			return fmt.Errorf("creating a work directory: %w", err)
		}
		defer os.RemoveAll(b.workDir)
	} else if err := os.MkdirAll(b.workDir, 0o755); err != nil {
		return fmt.Errorf("creating -work-dir %s: %w", b.workDir, err)
	}
	// The broker and the Go receiver are walbench itself, started through
	// links with their own names so that profiles and ps tell them apart.
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding walbench's own binary: %w", err)
	}
	b.exe, b.recvExe = filepath.Join(b.workDir, "kfake-broker"), filepath.Join(b.workDir, "pgoutput-recv")
	b.kafkaTxnExe = filepath.Join(b.workDir, "kafka-txn")
	for _, link := range []string{b.exe, b.recvExe, b.kafkaTxnExe} {
		_ = os.Remove(link)
		if err := os.Symlink(self, link); err != nil {
			return fmt.Errorf("linking %s to walbench: %w", link, err)
		}
	}
	if b.walstream = cfg.WalstreamBin; b.walstream == "" {
		b.walstream = filepath.Join(b.workDir, "walstream")
		b.logf("building walstream into %s", b.walstream)
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", b.walstream, "./cmd/walstream").CombinedOutput(); err != nil {
			return fmt.Errorf("building walstream (run walbench from the repository root): %w\n%s", err, out)
		}
	}
	b.pg = &postgres{url: cfg.PGURL}
	if cfg.PGURL == "" {
		b.logf("starting Postgres from %s", cfg.PGBin)
		if b.pg, err = startPostgres(ctx, cfg.PGBin, cfg.PGSettings); err != nil {
			return err
		}
	}
	defer func() {
		if serr := b.pg.stop(); serr != nil {
			b.logf("stopping Postgres: %v", serr)
		}
	}()
	if b.db, err = connect(ctx, b.pg.url); err != nil {
		return err
	}
	defer b.db.close()
	if err := b.db.exec(ctx, setupSQL); err != nil {
		return err
	}
	if b.pad, err = b.db.padFor(ctx, cfg.PayloadBytes, int64(cfg.Rows/2)); err != nil {
		return err
	}
	b.perf = cfg.Profile && perfUsable(ctx)
	if cfg.Profile && !b.perf {
		b.logf("perf cannot sample here (is linux-perf installed?); profiling the broker only")
	}

	if cfg.Avro || strings.Contains(strings.Join(cfg.WalstreamArgs, " "), registryArg) {
		b.logf("starting Apicurio Registry")
		logf, err := os.Create(filepath.Join(cfg.OutDir, "registry.log"))
		if err != nil {
			return fmt.Errorf("creating the registry's log: %w", err)
		}
		defer logf.Close()
		if b.registry, err = testenv.LaunchRegistry(ctx, logf); err != nil {
			return err
		}
		defer b.registry.Close()
	}
	if cfg.PGO != "" {
		if b.pgo, err = newPGOProfiles(filepath.Join(cfg.OutDir, "pgo")); err != nil {
			return err
		}
		cfg.WalstreamArgs = append(cfg.WalstreamArgs, "--pprof-addr="+b.pgo.addr)
	}

	rep := &Report{Started: time.Now().UTC(), Config: reportConfig(cfg)}
	if rep.Machine, err = b.machine(ctx); err != nil {
		return err
	}
	save := func() error { return rep.write(cfg.OutDir) }

	if cfg.Scenarios[ScenarioBacklog] {
		for i := 1; i <= cfg.Runs; i++ {
			r, err := b.backlogRun(ctx, ScenarioBacklog, i, int64(cfg.Rows), int64(cfg.RowsPerTx), false)
			if err != nil {
				return fmt.Errorf("backlog run %d: %w", i, err)
			}
			rep.Backlog = append(rep.Backlog, r)
			if err := save(); err != nil {
				return err
			}
		}
	}
	if cfg.Profile && cfg.Scenarios[ScenarioBacklog] {
		r, err := b.backlogRun(ctx, ScenarioBacklog, 0, int64(cfg.Rows), int64(cfg.RowsPerTx), true)
		if err != nil {
			return fmt.Errorf("profiled backlog run: %w", err)
		}
		rep.Profiled = r
		if err := save(); err != nil {
			return err
		}
	}
	if cfg.Scenarios[ScenarioHuge] && cfg.HugeRows > 0 {
		// One size a multiple of the batch limit (at the defaults), one not:
		// the last part of a split transaction must carry the checkpoint of
		// the whole either way.
		for i := 1; i <= cfg.HugeRuns; i++ {
			for _, rows := range []int64{int64(cfg.HugeRows), int64(cfg.HugeRows) + 1} {
				r, err := b.backlogRun(ctx, ScenarioHuge, i, rows, rows, false)
				if err != nil {
					return fmt.Errorf("huge-transaction run %d of %d rows: %w", i, rows, err)
				}
				rep.Huge = append(rep.Huge, r)
				if err := save(); err != nil {
					return err
				}
			}
		}
	}
	if cfg.Scenarios[ScenarioLatency] && len(cfg.LatencyLoads) > 0 {
		for i := 1; i <= cfg.LatencyRuns; i++ {
			l, err := b.latencyRun(ctx, i, false)
			if err != nil {
				return fmt.Errorf("latency run %d: %w", i, err)
			}
			rep.Latency = append(rep.Latency, l...)
			if err := save(); err != nil {
				return err
			}
		}
		if cfg.Profile {
			l, err := b.latencyRun(ctx, 0, true)
			if err != nil {
				return fmt.Errorf("profiled latency run: %w", err)
			}
			rep.ProfiledLatency = l
			if err := save(); err != nil {
				return err
			}
		}
	}
	if cfg.Scenarios[ScenarioDebezium] {
		for i := 1; i <= cfg.DebeziumRuns; i++ {
			if err := b.debeziumRound(ctx, i, rep, save); err != nil {
				return fmt.Errorf("debezium round %d: %w", i, err)
			}
		}
	}
	if cfg.Scenarios[ScenarioForeign] && cfg.ForeignRuns > 0 {
		for _, streaming := range []bool{false, true} {
			f, err := b.foreignRun(ctx, streaming)
			if err != nil {
				return fmt.Errorf("foreign scenario, streaming %v: %w", streaming, err)
			}
			rep.Foreign = append(rep.Foreign, f)
			if err := save(); err != nil {
				return err
			}
		}
	}
	if cfg.Scenarios[ScenarioReemit] {
		for i := 1; i <= cfg.ReemitRuns; i++ {
			r, err := b.reemitRun(ctx, i)
			if err != nil {
				return fmt.Errorf("reemit run %d: %w", i, err)
			}
			rep.Reemit = append(rep.Reemit, r)
			if err := save(); err != nil {
				return err
			}
		}
	}
	if cfg.Scenarios[ScenarioFleet] {
		stop, err := b.startFleetServers(ctx)
		if err != nil {
			return err
		}
		defer stop()
		for i := 1; i <= cfg.FleetRuns; i++ {
			r, err := b.fleetRun(ctx, i)
			if err != nil {
				return fmt.Errorf("fleet run %d: %w", i, err)
			}
			rep.Fleet = append(rep.Fleet, r)
			if err := save(); err != nil {
				return err
			}
		}
	}
	rep.Finished = time.Now().UTC()
	if err := save(); err != nil {
		return err
	}
	if b.pgo != nil {
		if err := b.pgo.merge(ctx, cfg.PGO); err != nil {
			return err
		}
		b.logf("wrote walstream's CPU profile of %d windows of %s to %s", len(b.pgo.files), pgoWindow, cfg.PGO)
	}
	_, err = io.WriteString(stdout, rep.markdown())
	b.logf("wrote %s and %s", filepath.Join(cfg.OutDir, "walbench.json"), filepath.Join(cfg.OutDir, "walbench.md"))
	return err
}

// Machine describes where the figures were taken.
type Machine struct {
	CPU         string `json:"cpu"`
	CPUs        int    `json:"cpus"`
	MemoryBytes int64  `json:"memory_bytes"`
	Kernel      string `json:"kernel"`
	Go          string `json:"go"`
	Postgres    string `json:"postgres"`
	RecvLogical string `json:"pg_recvlogical"`
	Walstream   string `json:"walstream"`
	Commit      string `json:"commit,omitempty"`
	Broker      string `json:"broker"`
	Debezium    string `json:"debezium,omitempty"`
	// Memory is what the kernel does to the page cache that a broker's
	// figures depend on (seasonTopics): the read-ahead of the device the
	// brokers' data is on, and proactive reclaim.
	Memory string `json:"memory,omitempty"`
}

func (b *bench) machine(ctx context.Context) (Machine, error) {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if cpuinfo, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(cpuinfo), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if meminfo, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(meminfo), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryBytes = kb << 10
		}
	}
	if rel, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(rel))
	}
	var err error
	if m.Postgres, err = b.db.serverVersion(ctx); err != nil {
		return m, err
	}
	output := func(name string, args ...string) string {
		out, err := exec.CommandContext(ctx, name, args...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	m.RecvLogical = output(b.cfg.RecvLogical, "--version")
	m.Walstream = output(b.walstream, "version")
	m.Commit = output("git", "describe", "--always", "--dirty")
	m.Broker = "kfake"
	if b.cfg.Broker == BrokerKafka {
		versions, err := testenv.JavaVersions()
		if err != nil {
			return m, err
		}
		m.Broker = fmt.Sprintf("Apache Kafka %s (one node, transaction version 2, JVM -Xmx1G %s)", versions["KAFKA_VERSION"], strings.Join(kafkaJVM, " "))
	}
	if b.cfg.Scenarios[ScenarioDebezium] {
		m.Debezium = debeziumVersions()
	}
	m.Memory = memoryNote("/sys", os.TempDir())
	return m, nil
}

// memoryNote says how far the kernel reads ahead on the device holding dir
// and whether DAMON pages out memory left untouched, from the sysfs at
// sys; "" when it tells neither.
func memoryNote(sys, dir string) string {
	var notes []string
	if id, ok := deviceOf(dir); ok {
		if dev, err := filepath.EvalSymlinks(filepath.Join(sys, "dev", "block", id)); err == nil {
			// A partition's queue is its disk's, one directory up.
			for _, q := range []string{filepath.Join(dev, "queue"), filepath.Join(dev, "..", "queue")} {
				if kb, err := os.ReadFile(filepath.Join(q, "read_ahead_kb")); err == nil {
					notes = append(notes, fmt.Sprintf("read-ahead %s KB on %s's device", strings.TrimSpace(string(kb)), dir))
					break
				}
			}
		}
	}
	damon := filepath.Join(sys, "kernel", "mm", "damon", "admin", "kdamonds", "0")
	read := func(rel string) string {
		b, _ := os.ReadFile(filepath.Join(damon, rel))
		return strings.TrimSpace(string(b))
	}
	if read("state") == "on" && read("contexts/0/schemes/0/action") == "pageout" {
		age, _ := strconv.ParseInt(read("contexts/0/schemes/0/access_pattern/age/min"), 10, 64)
		aggr, _ := strconv.ParseInt(read("contexts/0/monitoring_attrs/intervals/aggr_us"), 10, 64)
		notes = append(notes, fmt.Sprintf("DAMON pages out memory untouched for %s", time.Duration(age*aggr)*time.Microsecond))
	}
	return strings.Join(notes, "; ")
}

// deviceOf is the device holding path as sysfs names it under dev/block,
// "major:minor".
func deviceOf(path string) (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", false
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), true
}

// Report is everything walbench measured, as written to walbench.json.
type Report struct {
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished,omitzero"`
	Machine  Machine        `json:"machine"`
	Config   map[string]any `json:"config"`
	Summary  []Figure       `json:"summary"`
	Backlog  []*BacklogRun  `json:"backlog"`
	Huge     []*BacklogRun  `json:"huge"`
	Latency  []Latency      `json:"latency"`
	Foreign  []*ForeignRun  `json:"foreign,omitempty"`
	Reemit   []*ReemitRun   `json:"reemit,omitempty"`
	Fleet    []*FleetRun    `json:"fleet,omitempty"`
	// Peers are the debezium scenario's runs: each tool in each round.
	Peers []*PeerRun `json:"debezium,omitempty"`
	// Profiled is the profiled run, left out of the summary: sampling
	// costs CPU.
	Profiled        *BacklogRun `json:"profiled,omitempty"`
	ProfiledLatency []Latency   `json:"profiled_latency,omitempty"`
}

func reportConfig(c *Config) map[string]any {
	out := map[string]any{
		"rows": c.Rows, "rows_per_tx": c.RowsPerTx, "payload_bytes": c.PayloadBytes, "runs": c.Runs,
		"huge_rows": c.HugeRows, "huge_runs": c.HugeRuns,
		"latency_loads": c.LatencyLoads, "latency_seconds": c.LatencyFor.Seconds(), "latency_warmup_seconds": c.LatencyWarmup.Seconds(),
		"latency_runs": c.LatencyRuns, "latency_writers": c.LatencyWriters, "latency_floor": c.LatencyFloor,
		"foreign_rows": c.ForeignRows, "foreign_runs": c.ForeignRuns,
		"debezium_rows": c.DebeziumRows, "debezium_runs": c.DebeziumRuns, "debezium_modes": c.DebeziumModes,
		"reemit_rows": c.ReemitRows, "reemit_load": c.ReemitLoad, "reemit_runs": c.ReemitRuns,
		"fleet_streams": c.FleetStreams, "fleet_servers": c.FleetServers, "fleet_load": c.FleetLoad, "fleet_runs": c.FleetRuns, "fleet_debezium": c.FleetDebezium,
		"walstream_args": c.WalstreamArgs, "pg_settings": c.PGSettings,
		"partitions": c.Partitions, "external_postgres": c.PGURL != "", "max_load": c.MaxLoad,
		"broker": c.Broker,
	}
	if c.Scenarios[ScenarioDebezium] {
		out["debezium"] = debeziumSettings()
	}
	return out
}

// write saves walbench.json and walbench.md in dir.
func (r *Report) write(dir string) error {
	r.Summary = r.summarize()
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "walbench.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "walbench.md"), []byte(r.markdown()), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}
