package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/group"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/pipeline"
	"github.com/walstream/walstream/replication"
)

// defaultGOGC is the garbage collector's target when GOGC is not in the
// environment. walstream's memory is bounded by its queue and batch limits,
// not by the collector, and against Go's default of 100, 200 cut the CPU
// per row of a backlog drain by 19-22 % in two pairs of runs, for 20 MB
// more peak RSS (docs/benchmarks.md).
const defaultGOGC = 200

// memoryLimit is the collector's soft ceiling when GOMEMLIMIT is not in
// the environment: what walstream holds by design, its queue and three
// batches (franz-go's buffer of two, and the one being built). At
// GOGC=200 alone the heap may grow to three times what is live, so peak
// RSS followed the rows' size (135 MB draining 439-byte rows, 177 MB for
// 32 KiB ones); with this ceiling it follows the settings, 88-90 MB at the
// defaults for both (docs/benchmarks.md). Go's collector spends at most
// about half the CPU to keep under it: a heap that must outgrow it costs
// throughput, and the limit itself stops nothing.
func memoryLimit(cfg *config.Config) int64 {
	return int64(cfg.QueueBytes) + 3*int64(max(cfg.MaxBatchBytes, cfg.MaxRecordBytes))
}

// streamsMemoryLimit is the soft ceiling of a process running cfgs: the
// sum of each stream's.
func streamsMemoryLimit(cfgs []*config.Config) int64 {
	var limit int64
	for _, cfg := range cfgs {
		limit += memoryLimit(cfg)
	}
	return limit
}

// runStream streams every stream of cfgs until ctx ends, or until each
// has stopped on a permanent error. A stream's permanent error is logged as
// an ERROR record as it happens, so that a log pipeline reading the
// structured log sees why it stopped; the others go on. The process-wide
// settings (HTTP, pprof, logging) are the same in every stream's Config.
func runStream(ctx context.Context, cfgs []*config.Config, stderr io.Writer) (err error) {
	first := cfgs[0]
	base, _ := first.Logger(stderr) // validated
	log := base
	if len(cfgs) == 1 {
		log = base.With("stream", first.Stream, "slot", first.Slot)
	}
	var ran bool        // the error, if any, is the pipelines'
	var stopped []error // of several streams, those that stopped, each its error
	defer func() {
		switch {
		case err == nil:
		case len(cfgs) > 1 && ran:
			log.Error("stopping; the streams that stopped on a permanent error were logged as they stopped", "streams_stopped", len(stopped), "streams", len(cfgs))
		case ran:
			peer, kind := pipeline.Describe(err)
			log.Error("stopping on a permanent error", "err", err, "peer", peer, "kind", kind)
		default:
			log.Error("stopping on a permanent error", "err", err)
		}
	}()
	gogc := os.Getenv("GOGC")
	if gogc == "" {
		debug.SetGCPercent(defaultGOGC)
		gogc = strconv.Itoa(defaultGOGC)
	}
	memLimit := os.Getenv("GOMEMLIMIT")
	if memLimit == "" {
		limit := streamsMemoryLimit(cfgs)
		debug.SetMemoryLimit(limit)
		memLimit = strconv.FormatInt(limit, 10)
	}
	reg := newRegistry()
	defer shareKafka(cfgs, base)()
	pipelines := make([]*pipeline.Pipeline, len(cfgs))
	for i, cfg := range cfgs {
		sl := base.With("stream", cfg.Stream, "slot", cfg.Slot)
		pg, kafka := cfg.Postgres, cfg.Kafka
		// Whether Postgres speaks TLS is known once connected: the streaming
		// line says so (pg_tls); sslmode is what was asked for.
		sl.Info("starting", "version", version, "host", pg.Host, "port", pg.Port, "database", pg.Database,
			"user", pg.User, "pg_sslmode", sslMode(cfg.PGURL), "brokers", cfg.Brokers,
			"kafka_tls", kafka.TLS != nil, "kafka_sasl", kafka.SASLMechanism, "table", cfg.Table, "checkpoint_key", cfg.CheckpointKey, "transactional_id", cfg.TransactionalID,
			"gogc", gogc, "gomemlimit", memLimit)
		for _, k := range cfg.Ignored {
			sl.Info("ignoring a key of the Debezium connector config", "key", k.Key, "reason", k.Why)
		}
		if cfg.NamesWarning != "" {
			sl.Warn(cfg.NamesWarning, "checkpoint_key", cfg.CheckpointKey, "transactional_id", cfg.TransactionalID)
		}
		pipelines[i] = pipeline.New(cfg.Config, sl, reg)
	}
	shared := first.Fleet.Group != ""
	fleet := pipeline.NewFleet(pipelines...)
	var member *group.Membership
	if shared {
		fleet = pipeline.NewSharedFleet(pipelines...)
		if member, err = newMembership(cfgs, base, reg); err != nil {
			return err
		}
	}
	stopHTTP, err := serveHTTP(reg, fleet, first, log)
	if err != nil {
		return err
	}
	defer stopHTTP()
	ran = true
	if len(cfgs) == 1 && !shared {
		return flagHints(fleet.Run(ctx, nil)) // logged as the process stops
	}
	streamStopped := func(p *pipeline.Pipeline, err error) {
		peer, kind := pipeline.Describe(err)
		p.Log().Error("stream stopped on a permanent error; the other streams go on", "err", flagHints(err), "peer", peer, "kind", kind)
	}
	if shared {
		err = fleet.RunShared(ctx, member, streamStopped)
	} else {
		err = fleet.Run(ctx, streamStopped)
	}
	// Each stream's error, which fleet.Run joins, with the flag that
	// changes its outcome.
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		stopped = slices.Clone(j.Unwrap())
	}
	for i, e := range stopped {
		if se := (*pipeline.StreamError)(nil); errors.As(e, &se) {
			stopped[i] = &pipeline.StreamError{Stream: se.Stream, Err: flagHints(se.Err)}
		} else {
			stopped[i] = flagHints(e) // the fleet's membership
		}
	}
	return errors.Join(stopped...)
}

// newMembership is the process's membership of its fleet's group, on the
// first stream's Kafka cluster (pipeline.CheckFleet has checked that every
// stream is on it), as the host it runs on.
func newMembership(cfgs []*config.Config, log *slog.Logger, reg prometheus.Registerer) (*group.Membership, error) {
	first := cfgs[0]
	host, err := os.Hostname()
	if err != nil {
		host = fmt.Sprintf("pid %d", os.Getpid())
	}
	names := make([]string, len(cfgs))
	for i, c := range cfgs {
		names[i] = c.Stream
	}
	log.Info("joining the fleet's group", "group", first.Fleet.Group, "host", host, "streams", len(names),
		"session_timeout", first.Fleet.SessionTimeout, "heartbeat_interval", first.Fleet.HeartbeatInterval)
	return group.NewMembership(first.Kafka, group.Config{Settings: first.Fleet, Name: host, Streams: names}, log, group.NewMetrics(reg))
}

// shareKafka gives the streams that reach one Kafka cluster as one
// principal one reader of their commits' markers (kafka.Markers), where
// each producer would read its own, and one readiness prober
// (kafka.Prober), where each stream would probe alone; it returns what
// closes them. A stream alone gets its own. A prober that cannot be made
// is left to each stream, which then says why.
func shareKafka(cfgs []*config.Config, log *slog.Logger) (closeAll func()) {
	var markers []*kafka.Markers
	var probers []*kafka.Prober
	var by []kafka.Settings // the settings each of them connects with
	for _, cfg := range cfgs {
		i := slices.IndexFunc(by, cfg.Kafka.SameAccess)
		if i < 0 {
			pr, _ := kafka.NewProber(cfg.Kafka, log) // nil: each stream makes its own, and says why it cannot
			markers, probers, by = append(markers, kafka.NewMarkers(cfg.Kafka.Opts())), append(probers, pr), append(by, cfg.Kafka)
			i = len(by) - 1
		}
		cfg.Markers, cfg.Prober = markers[i], probers[i]
	}
	return func() {
		for i, m := range markers {
			m.Close()
			if probers[i] != nil {
				probers[i].Close()
			}
		}
	}
}

// newRegistry is the registry /metrics serves, holding Go's and the
// process's collectors; pipeline.New registers walstream's own on it.
// docs/metrics.md is generated from the same registry (TestReference).
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// flagHints adds the flag that changes the outcome to errors that have one.
func flagHints(err error) error {
	var shared *pipeline.SharedIDError
	var sharedKey *pipeline.SharedKeyError
	var diverged *pipeline.DivergedError
	var recreated *decode.TableRecreatedError
	var republished *replication.RepublishedError
	var bad *decode.Error
	var unattached *decode.UnattachedError
	var undecided *pipeline.UndecidedCheckpointError
	switch {
	case errors.As(err, &undecided):
		o := undecided.Records[0]
		return fmt.Errorf("%w (committed: walstream status --commit-hanging %d:%d; not: walstream status --abort-hanging %d:%d)",
			err, o.Partition, o.Offset, o.Partition, o.Offset)
	case errors.Is(err, pipeline.ErrSlotAhead), errors.Is(err, pipeline.ErrSlotMissing):
		return fmt.Errorf("%w (--allow-slot-ahead)", err)
	case errors.As(err, &diverged) && diverged.Placement.Verdict == pipeline.Phantoms:
		return fmt.Errorf("%w (--accept-phantoms)", err)
	case errors.As(err, &diverged) && diverged.Placement.Verdict == pipeline.SystemChanged:
		return fmt.Errorf("%w (two streams: --stream; a restore: --accept-system-change)", err)
	case errors.As(err, &shared):
		return fmt.Errorf("%w (give each stream its own --stream, or check --transactional-id)", err)
	case errors.As(err, &sharedKey):
		return fmt.Errorf("%w (--stream)", err)
	case errors.Is(err, pipeline.ErrConnectorStreaming):
		return fmt.Errorf("%w (walstream status, with these flags and --connect-status-topic <status.storage.topic>, says when it stopped)", err)
	case errors.Is(err, pipeline.ErrRepeatedIDs):
		return fmt.Errorf("%w (--debezium-accept-repeated-ids)", err)
	case errors.Is(err, kafka.ErrTopicMissing):
		return fmt.Errorf("%w (create the topic, or let walstream create the topics it writes to with --topic-creation; see docs/kafka.md, Outbox and dead-letter topics)", err)
	case errors.As(err, &recreated):
		return fmt.Errorf("%w (--accept-recreated-table %s=%d)", err, recreated.Table, recreated.NewOID)
	case errors.As(err, &republished):
		return fmt.Errorf("%w (--accept-recreated-table %s=%d)", err, republished.Table, republished.OID)
	case errors.As(err, &bad) && bad.Event.CommitLSN != 0 && errors.As(err, &unattached):
		return fmt.Errorf("%w (to send this one event to --dlq-topic and go on: --skip-event %s; every row of the relation, with any other bad row: --on-error=dead-letter)", err, bad.Event.Ref())
	case errors.Is(err, group.ErrRefused) && !errors.Is(err, kafka.ErrAuthorization):
		return fmt.Errorf("%w (--fleet-group names the group, --fleet-session-timeout its session timeout; --fleet=off runs without)", err)
	case errors.As(err, &bad) && bad.Event.CommitLSN != 0:
		return fmt.Errorf("%w (to send this one event to --dlq-topic and go on: --skip-event %s; see docs/outbox.md, Bad input)", err, bad.Event.Ref())
	}
	return err
}

// health is what /healthz and /readyz answer from: every stream's.
type health interface {
	Healthz(http.ResponseWriter, *http.Request)
	Readyz(http.ResponseWriter, *http.Request)
}

var _ health = (*pipeline.Fleet)(nil)

// serveHTTP serves /metrics, and the pipeline's /healthz and /readyz, on
// cfg.HTTPAddr, and pprof on cfg.PprofAddr; an empty address serves
// nothing there. Either is served without the other.
func serveHTTP(reg *prometheus.Registry, p health, cfg *config.Config, log *slog.Logger) (stop func(), err error) {
	stopMetrics, err := serveMetrics(cfg.HTTPAddr, reg, p, cfg.HTTPConfigFile, log)
	if err != nil {
		return nil, err
	}
	if cfg.PprofAddr == "" {
		return stopMetrics, nil
	}
	pln, err := net.Listen("tcp", cfg.PprofAddr)
	if err != nil {
		stopMetrics()
		return nil, fmt.Errorf("--pprof-addr %s: %w", cfg.PprofAddr, err)
	}
	pmux := http.NewServeMux()
	pmux.HandleFunc("/debug/pprof/", pprof.Index)
	pmux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	pmux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	pmux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	pmux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	stopPprof := serve(pln, pmux, "", log)
	log.Info("pprof listening", "addr", pln.Addr().String())
	return func() { stopPprof(); stopMetrics() }, nil
}

// serveMetrics serves /metrics, /healthz and /readyz on addr, with TLS and
// basic auth when webConfig says so.
func serveMetrics(addr string, reg *prometheus.Registry, p health, webConfig string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		if webConfig != "" {
			log.Warn("--http-config-file is not used: --http-addr is empty, so nothing listens for HTTP", "http_config_file", webConfig)
		}
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	if everyInterface(addr) {
		log.Warn("the HTTP listener binds every interface: /metrics and the health endpoints are reachable from the network; "+
			"bind a loopback or pod address, or protect it with --http-config-file", "addr", addr)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", p.Healthz)
	mux.HandleFunc("/readyz", p.Readyz)
	stop = serve(ln, mux, webConfig, log)
	log.Info("http listening", "addr", ln.Addr().String(), "tls_and_auth_config", webConfig)
	return stop, nil
}

// serve serves h on ln, with TLS and basic auth from an exporter-toolkit
// web config file when one is given.
func serve(ln net.Listener, h http.Handler, webConfig string, log *slog.Logger) (stop func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	flags := &web.FlagConfig{WebListenAddresses: &[]string{}, WebSystemdSocket: new(bool), WebConfigFile: &webConfig}
	go func() {
		// exporter-toolkit logs every start at info; only its warnings matter.
		quiet := slog.New(warnOnly{log.Handler().WithAttrs([]slog.Attr{slog.String("component", "http")})})
		if err := web.Serve(ln, srv, flags, quiet); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}

// warnOnly drops records below warn.
type warnOnly struct{ slog.Handler }

var _ slog.Handler = warnOnly{}

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

// everyInterface reports whether a listen address binds every interface:
// no host, 0.0.0.0 or ::.
func everyInterface(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// sslMode names, as libpq's sslmode does, what a connection to the URL or
// DSN does about TLS, read from the config pgconn parses from it and
// $PGSSLMODE (it keeps no sslmode): plain only, plain then TLS, TLS then
// plain, TLS unverified, TLS with the certificate verified, and its host
// name too. require with a root certificate verifies it, as libpq's does.
// It parses the URL anew: the config walstream connects with has its TLS
// checks replaced by ones that read the certificates at each connection.
func sslMode(url string) string {
	c, err := pgconn.ParseConfig(url)
	if err != nil {
		return "" // refused before this is asked
	}
	var plain, secure bool // what the fallbacks (other hosts, other modes) do
	for _, f := range c.Fallbacks {
		plain, secure = plain || f.TLSConfig == nil, secure || f.TLSConfig != nil
	}
	switch t := c.TLSConfig; {
	case t == nil && secure:
		return "allow"
	case t == nil:
		return "disable"
	case plain:
		return "prefer"
	case !t.InsecureSkipVerify:
		return "verify-full"
	case t.VerifyPeerCertificate != nil:
		return "verify-ca"
	}
	return "require"
}
