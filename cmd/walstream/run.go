package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	pgCfg, err := pgx.ParseConfig(cfg.PGURL)
	if err != nil {
		return fmt.Errorf("--pg-url: %w", err)
	}
	log.Info("starting", "version", version, "host", pgCfg.Host, "port", pgCfg.Port, "database", pgCfg.Database,
		"user", pgCfg.User, "brokers", cfg.Brokers, "table", cfg.Table, "transactional_id", cfg.TransactionalID)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics{repl: replication.NewMetrics(reg), pub: publish.NewMetrics(reg),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_session_restarts_total", Help: "Sessions restarted after a transient error, by the peer that failed."}, []string{"peer"}),
		standby: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_standby", Help: "1 while another instance streams the slot and this one waits for it."}),
	}
	reg.MustRegister(m.restarts, m.standby)
	stopHTTP, err := serveHTTP(cfg.HTTPAddr, reg, log)
	if err != nil {
		return err
	}
	defer stopHTTP()

	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 500*time.Millisecond, 30*time.Second, 0
	s := &session{cfg: cfg, pgCfg: pgCfg, log: log, metrics: m, hook: crashHook()}
	var standbyLogged time.Time
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
		peer, transient := classify(err)
		if !transient {
			return err
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
			m.restarts.WithLabelValues(peer).Inc()
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

// classify names the peer an error came from and whether retrying can
// help. Setup problems, bad input, fencing and authorization are final.
func classify(err error) (peer string, transient bool) {
	var de *decode.Error
	switch {
	case errors.As(err, &de), errors.Is(err, ErrSlotAhead), errors.Is(err, replication.ErrSetup):
		return "postgres", false
	case errors.Is(err, publish.ErrFenced), publish.Permanent(err):
		return "kafka", false
	case replication.Transient(err):
		return "postgres", true
	}
	// Everything else comes from Kafka or a timeout; a new session with a
	// fresh producer is the rebuild from the checkpoint that both need.
	return "kafka", true
}

type metrics struct {
	repl     *replication.Metrics
	pub      *publish.Metrics
	restarts *prometheus.CounterVec
	standby  prometheus.Gauge
}

// standbyPoll is how often a standby tries to take the slot.
const standbyPoll = time.Second

// session is one attempt at streaming: connections, producer and pipeline.
type session struct {
	cfg     *Config
	pgCfg   *pgx.ConnConfig
	log     *slog.Logger
	metrics metrics
	hook    func(string)
	// started is set once a session has streamed: from then on a missing
	// slot or publication was dropped under us and is never recreated.
	started bool
}

func (s *session) run(ctx context.Context) (streamed bool, err error) {
	cfg, names := s.cfg, s.cfg.names()
	conn, err := pgx.ConnectConfig(ctx, s.pgCfg.Copy())
	if err != nil {
		return false, fmt.Errorf("connecting to %s:%d database %s: %w", s.pgCfg.Host, s.pgCfg.Port, s.pgCfg.Database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
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
	conn.Close(ctx)

	prod, err := publish.New(publish.Config{
		Brokers: cfg.brokers(), TransactionalID: cfg.TransactionalID,
		CheckpointTopic: cfg.CheckpointTopic, CheckpointKey: cfg.CheckpointKey, Slot: cfg.Slot,
		TopicTemplate: cfg.TopicTemplate, MaxBatchEvents: cfg.MaxBatchEvents, MaxBatchBytes: cfg.MaxBatchBytes,
		Linger: cfg.Linger, IdleInterval: cfg.IdleInterval, CommitTimeout: cfg.CommitTimeout,
		MaxRecordBytes: cfg.MaxRecordBytes, DeadLetterTopic: cfg.deadLetterTopic(),
	}, s.log, s.metrics.pub, s.hook)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
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
		Schema: names.Schema, Table: names.Table,
		MaxPartEvents: cfg.MaxBatchEvents, MaxPartBytes: cfg.MaxBatchBytes,
		DeadLetter: cfg.OnError == OnErrorDeadLetter,
	}, cp)
	q := publish.NewQueue(int64(cfg.QueueBytes))
	s.started = true
	s.metrics.standby.Set(0)
	s.log.Info("streaming", "checkpoint", cp.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return prod.Run(gctx, q) })
	g.Go(func() error { return stream.Run(gctx, dec, q, tracker) })
	err = g.Wait()
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

// resume fences older instances, then reads the checkpoint, which is final
// only once no older instance can commit. It refuses a slot that has
// confirmed more than Kafka holds: the events between are missing.
func (s *session) resume(ctx context.Context, prod *publish.Producer, slot replication.Slot) (cp checkpoint.Checkpoint, inKafka bool, err error) {
	if err := prod.Fence(ctx); err != nil {
		return cp, false, err
	}
	cp, at, found, err := prod.ReadCheckpoint(ctx)
	if err != nil {
		return cp, false, err
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

// serveHTTP serves /metrics and /healthz on addr; an empty addr serves
// nothing.
func serveHTTP(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	log.Info("http listening", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
