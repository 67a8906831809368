package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
	"golang.org/x/sync/errgroup"
)

// ErrSlotAhead means the slot has confirmed more than Kafka holds.
var ErrSlotAhead = errors.New("slot is ahead of the checkpoint in Kafka")

// runStream streams until ctx ends or a permanent error. Every transient
// failure tears the session down and starts again from what Kafka holds,
// after a backoff.
func runStream(ctx context.Context, cfg *Config, stderr io.Writer) error {
	log := cfg.logger(stderr).With("slot", cfg.Slot)
	pgCfg, err := cfg.pgConfig()
	if err != nil {
		return err
	}
	kafka, err := cfg.kafkaConn()
	if err != nil {
		return err
	}
	log.Info("starting", "version", version, "host", pgCfg.Host, "port", pgCfg.Port, "database", pgCfg.Database,
		"user", pgCfg.User, "pg_tls", pgCfg.TLSConfig != nil, "brokers", cfg.Brokers,
		"kafka_tls", kafka.TLS != nil, "kafka_sasl", kafka.SASLMechanism, "table", cfg.Table, "transactional_id", cfg.TransactionalID)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st := &state{started: time.Now()}
	m := newMetrics(reg, st)
	stopHTTP, err := serveHTTP(cfg.HTTPAddr, reg, st, cfg, log)
	if err != nil {
		return err
	}
	defer stopHTTP()

	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 500*time.Millisecond, 30*time.Second, 0
	s := &session{cfg: cfg, pgCfg: pgCfg, kafka: kafka, log: log, metrics: m, state: st, hook: crashHook()}
	var standbyLogged time.Time
	var bumps []time.Time // recent fencings with no other instance on the slot
	for {
		streamed, err := s.run(ctx)
		if ctx.Err() != nil {
			log.Info("stopped")
			return nil
		}
		if streamed {
			b.Reset()
			standbyLogged = time.Time{}
		}
		peer, kind, transient := classify(err)
		m.errors.WithLabelValues(kind).Inc()
		if !transient {
			return err
		}
		if kind == "epoch_bumped" {
			// One bump follows a broker restart; a run of them means
			// another instance, on another slot, shares the transactional id.
			bumps = append(bumps, time.Now())
			for len(bumps) > 0 && time.Since(bumps[0]) > bumpWindow {
				bumps = bumps[1:]
			}
			if len(bumps) >= maxBumps {
				return fmt.Errorf("%w: transactional id %s was fenced %d times in %s while this instance held slot %q: "+
					"another walstream uses the same transactional id (check --transactional-id): %w",
					publish.ErrFenced, cfg.TransactionalID, len(bumps), bumpWindow, cfg.Slot, err)
			}
		}
		var wait time.Duration
		if replication.SlotInUse(err) {
			// A standby polls the slot at a steady pace so that it takes
			// over within a second or two, and says so once a minute.
			m.standby.Set(1)
			wait = standbyPoll
			if time.Since(standbyLogged) >= time.Minute {
				log.Info("standby: another instance streams the slot; waiting for it", "err", err)
				standbyLogged = time.Now()
			}
		} else {
			m.standby.Set(0)
			m.reconnects.WithLabelValues(peer).Inc()
			wait = b.NextBackOff()
			log.Warn("session ended, restarting from the checkpoint", "peer", peer, "err", err, "backoff", wait.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			log.Info("stopped")
			return nil
		case <-time.After(wait):
		}
	}
}

// classify names the peer an error came from, its kind for the error
// metric, and whether retrying can help. Setup problems, bad input,
// fencing and authorization are final.
func classify(err error) (peer, kind string, transient bool) {
	var de *decode.Error
	var ke *kafkaError
	var eb *errEpochBumped
	switch {
	case errors.As(err, &eb):
		return "kafka", "epoch_bumped", true
	case errors.As(err, &de):
		return "postgres", "bad_input", false
	case errors.Is(err, ErrSlotAhead):
		return "postgres", "slot_ahead", false
	case errors.Is(err, replication.ErrSetup):
		return "postgres", "setup", false
	case errors.Is(err, publish.ErrFenced):
		return "kafka", "fenced", false
	case errors.Is(err, publish.ErrAuthorization):
		return "kafka", "authorization", false
	case publish.Permanent(err):
		return "kafka", "bad_input", false
	case tlsRefused(err):
		if errors.As(err, &ke) {
			return "kafka", "tls", false
		}
		return "postgres", "tls", false
	case errors.As(err, &ke):
		// Anything else from Kafka: a new session with a fresh producer is
		// the rebuild from the checkpoint it needs.
		return "kafka", "kafka", true
	case replication.SlotInUse(err):
		return "postgres", "slot_in_use", true
	case replication.Transient(err):
		return "postgres", "postgres", true
	case replication.IsPostgres(err):
		// An error from the server that reconnecting will not change: a
		// wrong password, a missing privilege.
		return "postgres", "postgres", false
	}
	return "postgres", "postgres", true
}

// kafkaError marks an error from the Kafka side of a session, so that a
// connection error is blamed on the right peer.
type kafkaError struct{ err error }

func (e *kafkaError) Error() string { return e.err.Error() }
func (e *kafkaError) Unwrap() error { return e.err }

func onKafka(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	return &kafkaError{err}
}

// metrics are the process-wide metrics; each package declares its own.
type metrics struct {
	repl       *replication.Metrics
	slot       *replication.SlotMetrics
	pub        *publish.Metrics
	reconnects *prometheus.CounterVec
	errors     *prometheus.CounterVec
	standby    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, st *state) metrics {
	m := metrics{
		repl: replication.NewMetrics(reg),
		slot: replication.NewSlotMetrics(reg),
		pub:  publish.NewMetrics(reg),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_reconnects_total", Help: "Sessions restarted after a transient error, by the peer that failed."}, []string{"peer"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_errors_total", Help: "Errors that ended a session, by kind."}, []string{"kind"}),
		standby: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_standby", Help: "1 while another instance streams the slot and this one waits for it."}),
	}
	reg.MustRegister(m.reconnects, m.errors, m.standby,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walstream_replication_lag_seconds",
			Help: "Now minus the Postgres commit time of the newest published transaction while transactions wait; 0 when idle and caught up."},
			func() float64 { return st.status().Lag.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walstream_last_event_age_seconds", Help: "Time since events were last committed to Kafka (since start, before the first)."},
			st.since(func(s checkpoint.Status) time.Time { return s.LastEvent })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walstream_last_confirm_age_seconds", Help: "Time since a position was last confirmed to Postgres (since start, before the first)."},
			st.since(func(s checkpoint.Status) time.Time { return s.LastConfirm })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walstream_streaming", Help: "1 while this instance holds the slot and streams."},
			func() float64 {
				if st.tracker.Load() != nil {
					return 1
				}
				return 0
			}),
	)
	return m
}

// state is what the HTTP endpoints and lag gauges read: the tracker of the
// session that is streaming, nil between sessions.
type state struct {
	started time.Time
	tracker atomic.Pointer[checkpoint.Tracker]
	last    atomic.Pointer[checkpoint.Status] // of the last session, so that lag does not drop to 0 between sessions
}

// since returns a gauge of the seconds since the time pick takes from the
// status, or since start when that was never set.
func (st *state) since(pick func(checkpoint.Status) time.Time) func() float64 {
	return func() float64 {
		t := pick(st.status())
		if t.IsZero() {
			t = st.started
		}
		return time.Since(t).Seconds()
	}
}

func (st *state) status() checkpoint.Status {
	if t := st.tracker.Load(); t != nil {
		s := t.Status(time.Now())
		st.last.Store(&s)
		return s
	}
	if s := st.last.Load(); s != nil {
		return *s
	}
	return checkpoint.Status{}
}

// standbyPoll is how often a standby tries to take the slot.
const standbyPoll = time.Second

// maxBumps fencings within bumpWindow, none of them by an instance on this
// slot, mean that the transactional id is shared with another stream.
const (
	maxBumps   = 3
	bumpWindow = 10 * time.Minute
)

// session is one attempt at streaming: connections, producer and pipeline.
type session struct {
	cfg     *Config
	pgCfg   *pgx.ConnConfig
	kafka   publish.Conn
	log     *slog.Logger
	metrics metrics
	state   *state
	hook    func(string)
	// started is set once a session has streamed: from then on a missing
	// slot or publication was dropped under us and is never recreated.
	started     bool
	warnedPlain bool
}

func (s *session) run(ctx context.Context) (streamed bool, err error) {
	cfg, names := s.cfg, s.cfg.names()
	conn, err := pgx.ConnectConfig(ctx, s.pgCfg.Copy())
	if err != nil {
		return false, fmt.Errorf("connecting to %s:%d database %s: %w", s.pgCfg.Host, s.pgCfg.Port, s.pgCfg.Database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, tls := conn.PgConn().Conn().(*tls.Conn); !tls && !loopback(s.pgCfg.Host) && !s.warnedPlain {
		s.log.Warn("the Postgres connection is not encrypted; use sslmode=verify-full in production", "host", s.pgCfg.Host)
		s.warnedPlain = true
	}
	if err := replication.Prepare(ctx, conn, names, cfg.Create && !s.started); err != nil {
		return false, err
	}
	rconn, err := replication.Dial(ctx, &s.pgCfg.Config)
	if err != nil {
		return false, err
	}
	stream, err := replication.Start(ctx, rconn, replication.StreamConfig{
		Names: names, StatusInterval: cfg.StatusInterval, MarkerInterval: time.Second, Hook: s.hook,
	}, s.log, s.metrics.repl)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	// The slot is ours now: its confirmed_flush_lsn only moves when we confirm.
	slot, ok, err := replication.LookupSlot(ctx, conn, cfg.Slot)
	if err == nil && !ok {
		err = fmt.Errorf("slot %q vanished after START_REPLICATION", cfg.Slot)
	}
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	// The decoder tags events with these mappings and the producer routes by
	// them, so both get the same ones.
	outboxes, messages, _ := cfg.outboxes() // validated
	if err := readCatalog(ctx, conn, outboxes); err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	enc, _ := cfg.encoding() // validated
	prod, err := publish.New(publish.Config{
		Conn: s.kafka, TransactionalID: cfg.TransactionalID,
		CheckpointTopic: cfg.CheckpointTopic, CheckpointKey: cfg.CheckpointKey, Slot: cfg.Slot,
		Outboxes: append(slices.Clip(outboxes), messages), MaxBatchEvents: cfg.MaxBatchEvents, MaxBatchBytes: cfg.MaxBatchBytes,
		Linger: cfg.Linger, IdleInterval: cfg.IdleInterval, CommitTimeout: cfg.CommitTimeout,
		MaxRecordBytes: cfg.MaxRecordBytes, DeadLetterTopic: cfg.deadLetterTopic(), Encoding: enc,
		Compression: cfg.compression(),
	}, s.log, s.metrics.pub, s.hook)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, onKafka(err)
	}
	defer prod.Close()

	cp, inKafka, err := s.resume(ctx, prod, slot)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	tracker := checkpoint.NewTracker(cp, slot.ConfirmedFlush)
	prod.Start(cp, inKafka, tracker)
	dec := decode.New(decode.Config{
		Outboxes: outboxes, MaxPartEvents: cfg.MaxBatchEvents, MaxPartBytes: cfg.MaxBatchBytes,
		DeadLetter: cfg.OnError == OnErrorDeadLetter, MessagePrefix: cfg.MessagePrefix, Messages: messages, Log: s.log,
	}, cp)
	q := publish.NewQueue(int64(cfg.QueueBytes))
	s.started = true
	s.metrics.standby.Set(0)
	s.state.tracker.Store(tracker)
	defer s.state.tracker.Store(nil)
	s.log.Info("streaming", "checkpoint", cp.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return onKafka(prod.Run(gctx, q)) })
	g.Go(func() error { return stream.Run(gctx, dec, q, tracker) })
	mon := &replication.Monitor{Conn: conn, Names: names, Interval: cfg.SlotPollInterval, Metrics: s.metrics.slot}
	g.Go(func() error { return mon.Run(gctx) })
	err = g.Wait()
	if errors.Is(err, publish.ErrFenced) {
		err = s.whoFenced(ctx, conn, rconn.PID(), err)
	}
	// Both loops have stopped, so the last status update carries every
	// position Kafka committed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if cerr := stream.Close(cctx, tracker); cerr != nil && ctx.Err() != nil {
		s.log.Warn("sending the last status update", "err", cerr)
	}
	committed, confirmed := tracker.Positions()
	s.log.Info("session ended", "checkpoint", committed.String(), "confirmed_lsn", confirmed.String(), "replayed_events_skipped", dec.Skipped)
	return true, err
}

// errEpochBumped is a fencing error with no other instance behind it.
type errEpochBumped struct{ err error }

func (e *errEpochBumped) Error() string { return e.err.Error() }
func (e *errEpochBumped) Unwrap() error { return e.err }

// whoFenced tells a real takeover from a bumped epoch. An instance fences
// only after it holds the slot, so if no other walsender holds it, the
// epoch was bumped by the broker (a restart, or a transaction timeout) and
// a new session may go on; otherwise this instance must stop.
func (s *session) whoFenced(ctx context.Context, conn *pgx.Conn, ownPID uint32, err error) error {
	slot, ok, lerr := replication.LookupSlot(context.WithoutCancel(ctx), conn, s.cfg.Slot)
	if lerr == nil && ok && slot.ActivePID != nil && uint32(*slot.ActivePID) != ownPID {
		return fmt.Errorf("%w; slot %q is now streamed by walsender pid %d", err, s.cfg.Slot, *slot.ActivePID)
	}
	s.log.Warn("producer epoch bumped while no other instance holds the slot (broker restart or transaction timeout); restarting", "err", err)
	return &errEpochBumped{err}
}

// resume fences older instances, then reads the checkpoint, which is final
// only once no older instance can commit. It refuses a slot that has
// confirmed more than Kafka holds: the events between are missing.
func (s *session) resume(ctx context.Context, prod *publish.Producer, slot replication.Slot) (cp checkpoint.Checkpoint, inKafka bool, err error) {
	if err := prod.Fence(ctx); err != nil {
		return cp, false, onKafka(err)
	}
	cp, at, found, err := prod.ReadCheckpoint(ctx)
	if err != nil {
		return cp, false, onKafka(err)
	}
	switch {
	case !found:
		s.log.Info("no checkpoint in Kafka, starting where the slot is", "checkpoint_key", s.cfg.CheckpointKey, "lsn", slot.ConfirmedFlush.String())
		return checkpoint.Checkpoint{LSN: slot.ConfirmedFlush}, false, nil
	case cp.LSN >= slot.ConfirmedFlush:
		s.log.Info("resuming from checkpoint", "checkpoint", cp.String(), "written_at", at)
		return cp, true, nil
	case s.cfg.AllowSlotAhead:
		s.log.Warn("slot is ahead of the checkpoint; continuing because --allow-slot-ahead is set: events in between may be missing",
			"checkpoint", cp.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String())
		return checkpoint.Checkpoint{LSN: slot.ConfirmedFlush}, false, nil
	}
	return cp, true, fmt.Errorf("%w: slot %q confirmed_flush_lsn %s, checkpoint %q in topic %s at %s: events in between may be missing "+
		"(was the slot dropped and recreated?); see README, Recovery, then restart with --allow-slot-ahead to accept the gap",
		ErrSlotAhead, s.cfg.Slot, slot.ConfirmedFlush, s.cfg.CheckpointKey, s.cfg.CheckpointTopic, cp)
}

// serveHTTP serves /metrics, /healthz and /readyz on addr; an empty addr
// serves nothing.
//
// /healthz fails when the streaming loop has not confirmed for longer than
// it can without being wedged (it confirms every --status-interval).
// /readyz succeeds while this instance streams and confirmed a position
// within --ready-confirm-age.
func serveHTTP(addr string, reg *prometheus.Registry, st *state, cfg *Config, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	wedged := 2*cfg.StatusInterval + cfg.CommitTimeout
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if t := st.tracker.Load(); t != nil {
			if age := time.Since(t.Status(time.Now()).LastConfirm); age > wedged {
				http.Error(w, fmt.Sprintf("streaming loop silent for %s", age.Round(time.Second)), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		t := st.tracker.Load()
		if t == nil {
			http.Error(w, "not streaming", http.StatusServiceUnavailable)
			return
		}
		if age := time.Since(t.Status(time.Now()).LastConfirm); age > cfg.ReadyConfirmAge {
			http.Error(w, fmt.Sprintf("last confirm %s ago", age.Round(time.Second)), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	stopMetrics := serve(ln, mux, cfg.HTTPConfigFile, log)
	log.Info("http listening", "addr", ln.Addr().String(), "tls_and_auth_config", cfg.HTTPConfigFile)
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

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

// tlsRefused reports a certificate that failed verification: a wrong CA or
// host name does not go away by retrying.
func tlsRefused(err error) bool {
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verification *tls.CertificateVerificationError
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verification)
}
