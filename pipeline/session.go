package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
	"golang.org/x/sync/errgroup"
)

// session is one attempt at streaming: connections, producer and stages.
type session struct {
	cfg     *Config
	log     *slog.Logger
	metrics metrics
	state   *state
	// started is set once a session has streamed: from then on a missing
	// slot or publication was dropped under us and is never recreated.
	started bool
	// warnedPlain: the first connection's TLS was reported.
	warnedPlain bool
}

func (s *session) run(ctx context.Context) (streamed bool, err error) {
	cfg, names := s.cfg, s.cfg.Names
	conn, err := replication.Connect(ctx, cfg.Postgres)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if !s.warnedPlain {
		// Said once, from the connection: sslmode=prefer falls back to
		// plain TCP when the server has no TLS.
		s.log.Info("connected to Postgres", "host", cfg.Postgres.Host, "port", cfg.Postgres.Port, "pg_tls", !plainTCP(conn))
		if plainTCP(conn) && !replication.Loopback(cfg.Postgres.Host) {
			s.log.Warn("the Postgres connection is not encrypted; use sslmode=verify-full in production", "host", cfg.Postgres.Host)
		}
		s.warnedPlain = true
	}
	if err := replication.Prepare(ctx, conn, names, cfg.Create && !s.started); err != nil {
		return false, err
	}
	rconn, err := replication.Dial(ctx, &cfg.Postgres.Config)
	if err != nil {
		return false, err
	}
	stream, err := replication.Start(ctx, rconn, replication.StreamConfig{Names: names, StatusInterval: cfg.StatusInterval}, s.log, s.metrics.repl)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	// The slot is ours now: its confirmed_flush_lsn only moves when we confirm.
	slot, ok, err := replication.LookupSlot(ctx, conn, names.Slot)
	if err == nil && !ok {
		err = fmt.Errorf("slot %q vanished after START_REPLICATION", names.Slot)
	}
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	// Column defaults and NOT NULL, which pgoutput does not send, from the
	// catalog as Debezium reads them; the decoder applies them.
	catalogs := make(map[string]map[string]decode.Catalog, len(cfg.Outboxes))
	for _, o := range cfg.Outboxes {
		if catalogs[o.Name()], err = readCatalog(ctx, conn, o); err != nil {
			rconn.Close(context.WithoutCancel(ctx))
			return false, err
		}
	}
	// The decoder tags events with these mappings and the producer routes by
	// them, so both get the same ones.
	prod, err := publish.New(publish.Config{
		Kafka: cfg.Kafka, TransactionalID: cfg.TransactionalID,
		CheckpointTopic: cfg.CheckpointTopic, CheckpointKey: cfg.CheckpointKey, Slot: names.Slot,
		Outboxes: append(slices.Clip(cfg.Outboxes), cfg.Messages), MaxBatchEvents: cfg.MaxBatchEvents, MaxBatchBytes: cfg.MaxBatchBytes,
		Linger: cfg.Linger, IdleInterval: cfg.IdleInterval, CommitTimeout: cfg.CommitTimeout,
		MaxRecordBytes: cfg.MaxRecordBytes, DeadLetterTopic: cfg.DeadLetterTopic, Encoding: cfg.Encoding,
		Compression: cfg.Compression, TopicCreation: cfg.TopicCreation,
	}, s.log, s.metrics.pub, cfg.Hook)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, onKafka(err)
	}
	defer prod.Close()

	cp, inKafka, err := resume(ctx, prod, slot, cfg, s.log)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	// The tracker is told the resume position once; the producer and the
	// decoder's replay filter ask it.
	tracker := checkpoint.NewTracker(cp, inKafka, slot.ConfirmedFlush)
	prod.Start(tracker)
	q := publish.NewQueue(int64(cfg.QueueBytes))
	in := &feed{
		dec: decode.New(decode.Config{
			Outboxes: cfg.Outboxes, MaxPartEvents: cfg.MaxBatchEvents, MaxPartBytes: cfg.MaxBatchBytes,
			DeadLetter: cfg.DeadLetterTopic != "", MessagePrefix: cfg.MessagePrefix, Messages: cfg.Messages, Skip: tracker.Replayed,
		}),
		out: q, received: tracker, log: s.log, skipped: s.metrics.skipped, hook: cfg.Hook,
		catalog: func(o *decode.Outbox) (map[string]decode.Catalog, error) {
			// The stream's goroutine asks; the session's connection is the
			// slot monitor's, so this reads on a connection of its own.
			c, err := replication.Connect(ctx, cfg.Postgres)
			if err != nil {
				return nil, err
			}
			defer c.Close(context.WithoutCancel(ctx))
			return readCatalog(ctx, c, o)
		},
	}
	for name, c := range catalogs {
		in.dec.SetCatalog(name, c)
	}
	s.started = true
	s.metrics.standby.Set(0)
	s.state.tracker.Store(tracker)
	defer s.state.tracker.Store(nil)
	s.log.Info("streaming", "checkpoint", cp.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String(), "pg_tls", !plainTCP(conn))

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return onKafka(prod.Run(gctx, q)) })
	g.Go(func() error { return stream.Run(gctx, in, tracker) })
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
	s.log.Info("session ended", "checkpoint", committed.String(), "confirmed_lsn", confirmed.String(), "replayed_events_skipped", in.dec.Skipped())
	return true, err
}

// whoFenced tells a real takeover from a bumped epoch. An instance fences
// only after it holds the slot, so if no other walsender holds it, the
// epoch was bumped by the broker (a restart, or a transaction timeout) and
// a new session may go on; otherwise this instance must stop.
// readCatalog reads an outbox table's NOT NULL and column defaults.
func readCatalog(ctx context.Context, conn *pgx.Conn, o *decode.Outbox) (map[string]decode.Catalog, error) {
	cols, err := replication.Columns(ctx, conn, replication.Table{Schema: o.Schema, Name: o.Table})
	if err != nil {
		return nil, err
	}
	c := make(map[string]decode.Catalog, len(cols))
	for name, col := range cols {
		c[name] = decode.Catalog{NotNull: col.NotNull, Default: col.Default}
	}
	return c, nil
}

func (s *session) whoFenced(ctx context.Context, conn *pgx.Conn, ownPID uint32, err error) error {
	slot, ok, lerr := replication.LookupSlot(context.WithoutCancel(ctx), conn, s.cfg.Names.Slot)
	if lerr == nil && ok && slot.ActivePID != nil && uint32(*slot.ActivePID) != ownPID {
		return fmt.Errorf("%w; slot %q is now streamed by walsender pid %d", err, s.cfg.Names.Slot, *slot.ActivePID)
	}
	s.log.Warn("producer epoch bumped while no other instance holds the slot (broker restart or transaction timeout); restarting", "err", err)
	return &epochBumpedError{err}
}

// ErrSlotAhead means the slot has confirmed more than Kafka holds.
var ErrSlotAhead = errors.New("slot is ahead of the checkpoint in Kafka")

// checkpointSource fences older instances and reads the checkpoint they
// and this one wrote.
type checkpointSource interface {
	Fence(ctx context.Context) error
	ReadCheckpoint(ctx context.Context) (cp checkpoint.Checkpoint, at time.Time, found bool, err error)
}

var _ checkpointSource = (*publish.Producer)(nil)

// resume fences older instances, then reads the checkpoint, which is final
// only once no older instance can commit. It refuses a slot that has
// confirmed more than Kafka holds, unless cfg.AllowSlotAhead: the events
// between are missing.
func resume(ctx context.Context, src checkpointSource, slot replication.Slot, cfg *Config, log *slog.Logger) (cp checkpoint.Checkpoint, inKafka bool, err error) {
	if err := src.Fence(ctx); err != nil {
		return cp, false, onKafka(err)
	}
	cp, at, found, err := src.ReadCheckpoint(ctx)
	if err != nil {
		return cp, false, onKafka(err)
	}
	switch {
	case !found:
		log.Info("no checkpoint in Kafka, starting where the slot is", "checkpoint_key", cfg.CheckpointKey, "lsn", slot.ConfirmedFlush.String())
		return checkpoint.Checkpoint{LSN: slot.ConfirmedFlush}, false, nil
	case !cp.SlotAhead(slot.ConfirmedFlush):
		log.Info("resuming from checkpoint", "checkpoint", cp.String(), "written_at", at)
		return cp, true, nil
	case cfg.AllowSlotAhead:
		log.Warn("slot is ahead of the checkpoint; continuing because a slot ahead is allowed: events in between may be missing",
			"checkpoint", cp.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String())
		return checkpoint.Checkpoint{LSN: slot.ConfirmedFlush}, false, nil
	}
	return cp, true, fmt.Errorf("%w: slot %q confirmed_flush_lsn %s, checkpoint %q in topic %s at %s: events in between may be missing "+
		"(was the slot dropped and recreated?); see README, Recovery, then restart allowing the slot to be ahead to accept the gap",
		ErrSlotAhead, cfg.Names.Slot, slot.ConfirmedFlush, cfg.CheckpointKey, cfg.CheckpointTopic, cp)
}
