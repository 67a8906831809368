package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
	"golang.org/x/sync/errgroup"
)

// session is one attempt at streaming: connections, producer and stages.
type session struct {
	cfg     *Config
	log     *slog.Logger
	metrics metrics
	state   *state
	waits   *waits
	// started is set once a session has streamed: from then on a missing
	// slot or publication was dropped under us and is never recreated.
	started bool
	// warnedPlain: the first connection's TLS was reported.
	warnedPlain bool
	warnedHosts bool
	// claimed: the checkpoint key was found to be this stream's (claim).
	claimed bool
	// earlier is what the sessions of this process learned that the
	// next one needs (fenceAndRead).
	earlier earlier
	// whole: the last session ended at a streamed transaction that cannot
	// be published from its stream (decode.WholeError); the next one has
	// Postgres send every transaction whole at its commit.
	whole bool
	// settled is the Pipeline's: set once a session had a checkpoint in
	// Kafka (see Pipeline).
	settled *atomic.Bool
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
	if w := replication.MultiHostWarning(&cfg.Postgres.Config); w != "" && !s.warnedHosts {
		s.log.Warn(w)
		s.warnedHosts = true
	}
	tables, err := checkTables(ctx, conn, cfg)
	if err != nil {
		return false, err
	}
	cfg.hook("tables-checked")
	rconn, err := replication.Dial(ctx, &cfg.Postgres.Config)
	if err != nil {
		return false, err
	}
	// Which server this is, asked before START_REPLICATION: after it the
	// connection only streams.
	srv, history, err := identify(ctx, rconn)
	if err == nil && !s.claimed {
		err = s.claim(ctx, srv)
	}
	if err == nil {
		err = s.unsettled(ctx, tables, srv)
	}
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	create, err := s.creatable(ctx, conn, srv)
	if err == nil {
		// A new slot waits for the transactions running when it began to
		// end: a wait as long as the longest of them, said as it lasts.
		create.Watch = func(w replication.SlotWait) {
			s.waits.waiting("slot", w.String(), "slot", names.Slot, "blockers", len(w.Blockers))
		}
		create.WatchInterval, create.Queries = waitPoll, cfg.BlockingQueries
		err = replication.Prepare(ctx, conn, names, create)
		s.waits.done("slot", "slot created")
	}
	if err == nil && !tables.settled() {
		// Read again: Prepare created the publication, or added a table
		// to it, and the publication's entries exist once it did.
		tables, err = checkTables(ctx, conn, cfg)
	}
	if errors.Is(err, replication.ErrSetup) {
		// A table dropped (and perhaps created again, outside the
		// publication) since checkTables read it: what the checkpoint
		// recorded of it decides what the stop says, as for a start after
		// the drop. A table new to the stream stays setup's to name.
		if now, terr := checkTables(ctx, conn, cfg); terr == nil && !now.settled() {
			if uerr := s.unsettled(ctx, now, srv); uerr != nil {
				err = uerr
			}
		}
	}
	if err == nil && cfg.Reemit.SignalTable != "" {
		t, _ := replication.ParseTable(cfg.Reemit.SignalTable) // Validate parsed it
		err = replication.CheckSignalTable(ctx, conn, names, t)
	}
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	inProgress := false
	if cfg.StreamInProgress && s.whole {
		s.log.Warn("this session has Postgres send each transaction whole at its commit, not streamed while in progress: " +
			"the last session stopped at a streamed transaction that cannot be published from its stream; the next session streams again")
	} else if cfg.StreamInProgress {
		version, err := replication.ServerVersion(ctx, conn)
		if err != nil {
			rconn.Close(context.WithoutCancel(ctx))
			return false, err
		}
		inProgress = replication.SupportsStreaming(version)
	}
	s.whole = false
	stream, err := replication.Start(ctx, rconn, replication.StreamConfig{Names: names, StatusInterval: cfg.StatusInterval,
		ConfirmInterval: cfg.ConfirmInterval, InProgress: inProgress}, s.log, s.metrics.repl)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		// Held by another process: which one, so that a standby says whom
		// it waits for, and a takeover refuses Debezium still streaming.
		return false, s.refuseHeld(ctx, srv, replication.DescribeHeld(ctx, conn, names.Slot, err))
	}
	s.waits.done("standby", "no longer a standby: the slot is free")
	// Logged once the slot is ours, not at every try of a standby instance.
	s.log.Info("connected", "host", replication.RemoteHost(conn.PgConn()), "replication_host", replication.RemoteHost(rconn),
		"system_id", srv.SystemID, "timeline", srv.Timeline, "wal_end", srv.XLogPos.String(), "database", srv.Database)
	s.warnFailover(ctx, conn)
	// The slot is ours now: its confirmed_flush_lsn only moves when we confirm.
	slot, ok, err := replication.LookupSlot(ctx, conn, names.Slot)
	if err == nil && !ok {
		err = fmt.Errorf("slot %q vanished after START_REPLICATION", names.Slot)
	}
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	cfg.hook("slot-held")
	// The decoder tags events with these mappings and the producer routes by
	// them, so both get the same ones.
	pcfg := cfg.publishConfig()
	pcfg.Tables, pcfg.Entries = tables.oids, tables.entries
	prod, err := publish.New(pcfg, s.log, s.metrics.pub, cfg.Hook)
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, onKafka(err)
	}
	defer prod.Close()
	// Without the schema registry no record can be written: say so now,
	// not at the first event, and retry until it answers.
	if err := prod.CheckRegistry(ctx); err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}

	walEnd := func(ctx context.Context) (pglogrepl.LSN, error) { return replication.WALEnd(ctx, conn) }
	src := sessionSource{prod, store.New(cfg.storeConfig(), s.log)}
	cp, inKafka, err := resume(ctx, src, slot, srv, history, walEnd, cfg, &s.earlier, s.log, s.metrics.phantoms)
	switch {
	case errors.Is(err, errNoCheckpoint):
		cp, err = takeOver(ctx, conn, cfg, slot, srv, s.log)
	case cfg.Takeover.Enabled() && (err == nil || errors.Is(err, ErrSlotAhead)):
		cp, inKafka, err = takeOverAgain(ctx, conn, cfg, slot, srv, cp, inKafka, err, s.log)
	}
	if err == nil && ownSystem(cp, srv) {
		err = tables.sinceCheckpoint(cp, cfg.AcceptRecreated, s.log)
	}
	if err != nil {
		rconn.Close(context.WithoutCancel(ctx))
		return false, err
	}
	// The tracker is told the resume position once; the producer and the
	// decoder's replay filter ask it. Nothing past the server's WAL end is
	// ever confirmed.
	tracker := checkpoint.NewTracker(cp, inKafka, slot.ConfirmedFlush)
	tracker.ServerWALEnd(srv.XLogPos)
	reemitWake := make(chan struct{}, 1)
	prod.Start(confirmOnCommit{tracker, stream, s.state, reemitWake})
	q := publish.NewQueue(int64(cfg.QueueBytes))
	skip := tracker.Replayed
	if tk := cp.TakeoverAhead(); tk != nil {
		// Within the stretch of a takeover from Debezium, replays reach the
		// producer, which claims their records in Kafka before it looks up
		// a new event (checkpoint/store/takeover.go).
		skip = func(commitLSN pglogrepl.LSN, ordinal uint64) bool {
			return !tk.Overlaps(commitLSN) && tracker.Replayed(commitLSN, ordinal)
		}
	}
	rm := &reemitter{cfg: cfg, log: s.log, out: q, wake: reemitWake,
		committed: func() checkpoint.Reemits { cp, _ := tracker.InKafka(); return reemitsOf(cp) },
		connect:   func(ctx context.Context) (*pgx.Conn, error) { return replication.ConnectReader(ctx, cfg.Postgres) }}
	in := &feed{out: q, received: tracker, witness: tracker, log: s.log, skipped: s.metrics.skipped, hook: cfg.Hook,
		catalog: func(o *decode.Outbox, oid uint32) (map[string]decode.Catalog, error) {
			// The stream's goroutine asks; the session's connection is the
			// slot monitor's, so this reads on a connection of its own.
			c, err := replication.Connect(ctx, cfg.Postgres)
			if err != nil {
				return nil, err
			}
			defer c.Close(context.WithoutCancel(ctx))
			return readCatalog(ctx, c, names, o, oid)
		},
	}
	in.dec = decode.New(decode.Config{
		Outboxes: cfg.Outboxes, MaxPartEvents: cfg.MaxBatchEvents, MaxPartBytes: cfg.MaxBatchBytes,
		JSONText: cfg.Encoding.Value != format.String, OIDs: tables.oids, Recreated: tables.mayChange,
		MessagePrefix: cfg.MessagePrefix, Messages: cfg.Messages, Skip: skip, SignalTable: cfg.Reemit.SignalTable,
		Replayed: in.sent,
	})
	in.relationOf = func(oid uint32) (relationState, error) {
		c, err := replication.Connect(ctx, cfg.Postgres)
		if err != nil {
			return relationState{}, err
		}
		defer c.Close(context.WithoutCancel(ctx))
		rs, err := replication.DescribeRelation(ctx, c, names, oid)
		if err != nil {
			return relationState{}, err
		}
		st := relationState{exists: rs.Exists, published: rs.Published}
		if i := slices.IndexFunc(cfg.Outboxes, func(o *decode.Outbox) bool { return o.Name() == rs.Root.String() }); rs.Partition && i >= 0 {
			st.root = cfg.Outboxes[i]
		}
		return st, nil
	}
	if inProgress {
		spooled := s.metrics.spooled
		in.streams = decode.NewStreams(func(xid uint32) (decode.Spool, error) {
			return newFileSpool(cfg.SpoolDir, xid, spooled)
		}, in.dec.TakesMessage)
	}
	// The stream's goroutine has stopped when this runs.
	defer in.close()
	// Column defaults and NOT NULL, which pgoutput does not send, from the
	// catalog as Debezium reads them; the decoder applies them.
	for name, c := range tables.catalogs {
		in.dec.SetCatalog(name, c)
	}
	s.started = true
	s.metrics.standby.Set(0)
	s.state.tracker.Store(tracker)
	defer s.state.tracker.Store(nil)
	s.log.Info("streaming", "checkpoint", cp.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String(), "pg_tls", !plainTCP(conn),
		"stream_in_progress", inProgress)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return onKafka(prod.Run(gctx, q)) })
	g.Go(func() error { return stream.Run(gctx, in, tracker) })
	g.Go(func() error { return rm.Run(gctx) })
	mon := &replication.Monitor{Conn: conn, Names: names, Interval: cfg.SlotPollInterval, Metrics: s.metrics.slot, OIDs: tables.watched(), Entries: tables.entries,
		CheckTable: func(info replication.TableInfo) error { return checkMapping(cfg.Outboxes, info, "while streaming") }}
	g.Go(func() error { return mon.Run(gctx) })
	if cfg.ProgressInterval > 0 {
		g.Go(func() error { return progress(gctx, cfg.ProgressInterval, tracker, s.log) })
	}
	err = g.Wait()
	var rewritten *checkpoint.ReplayError
	if errors.As(err, &rewritten) {
		err = s.rewritten(ctx, src, rewritten, srv)
	}
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
	done, at := tracker.InKafka()
	s.earlier.remember(done)
	if !at.IsZero() && rewritten == nil && !s.settled.Swap(true) && s.cfg.accepts() {
		// Kafka holds a checkpoint this session resumed from or wrote: a
		// divergence accepted for the start is on record, and one a later
		// session meets (a failover to a server without the slot, a slot
		// recreated again) is new, and stops the stream as any does.
		s.log.Info("the divergences accepted at the start are on record in Kafka: later sessions accept none")
		s.cfg = s.cfg.acceptingNone()
	}
	if a := prod.Acknowledged(); a.Checkpoint.LSN != 0 {
		s.earlier.acked = a
	}
	committed, confirmed := tracker.Positions()
	s.log.Info("session ended", "checkpoint", committed.String(), "confirmed_lsn", confirmed.String(), "replayed_events_skipped", in.dec.Skipped())
	return true, err
}

// rewritten makes the replay's finding that the server's history is not
// the one published a DivergedError: phantom events from the slot's
// position on, where the replay began, which is where accepting them goes
// on from (the next session, resume).
func (s *session) rewritten(ctx context.Context, src checkpointSource, re *checkpoint.ReplayError, srv replication.Server) error {
	events := int64(-1)
	if h, err := src.CheckpointHistory(ctx); err == nil {
		events = checkpoint.EventsPast(h, re.From)
	} else {
		s.log.Warn("reading the checkpoint topic's history to count the events published past the slot's position", "err", err)
	}
	s.metrics.phantoms.Set(float64(events))
	s.log.Error("phantom events: the server's history was rewritten", "err", re.Error(), "slot_confirmed_flush_lsn", re.From.String(),
		"checkpoint", re.Checkpoint.String(), "events", events)
	return &DivergedError{Placement: Placement{Verdict: Phantoms, Fork: re.From, Ahead: true, Replay: re}, Checkpoint: re.Checkpoint,
		Server: srv, Events: events, From: re.From, Slot: s.cfg.Names.Slot, CheckpointKey: s.cfg.CheckpointKey, Stream: s.cfg.Stream}
}

// errRelationGone: the catalog has no table by that name with the OID of
// the relation being decoded.
var errRelationGone = errors.New("the relation is no longer in the catalog")

// readCatalog reads an outbox table's NOT NULL and column defaults anew,
// for the relation oid.
func readCatalog(ctx context.Context, conn *pgx.Conn, names replication.Names, o *decode.Outbox, oid uint32) (map[string]decode.Catalog, error) {
	t := replication.Table{Schema: o.Schema, Name: o.Table}
	names.Tables = []replication.Table{t}
	infos, err := replication.DescribeTables(ctx, conn, names)
	if err != nil {
		return nil, err
	}
	if infos[0].OID != oid {
		return nil, fmt.Errorf("%w: table %s has OID %d, the relation %d", errRelationGone, t.SQL(), infos[0].OID, oid)
	}
	return catalogOf(infos[0]), nil
}

// unsettled stops before setup at an outbox table that does not exist or
// is not in the publication, naming the gap when the last checkpoint
// recorded the table: it was dropped (and perhaps created again) since,
// and rows committed to its successor before it is in the publication are
// never sent. Setup alone would only say what is missing.
func (s *session) unsettled(ctx context.Context, tables outboxTables, srv replication.Server) error {
	if tables.settled() {
		return nil
	}
	cp, _, found, err := store.ReadCheckpoint(ctx, s.cfg.Kafka, s.cfg.CheckpointTopic, s.cfg.CheckpointKey)
	if err != nil {
		return onKafka(fmt.Errorf("reading the checkpoint to tell an outbox table dropped since from a new one: %w", err))
	}
	if !found || !ownSystem(cp, srv) {
		cp = checkpoint.Checkpoint{}
	}
	// Only a stop matters here. An accepted recreation is logged by the
	// check after resume, against the checkpoint read after fencing; here
	// setup would still refuse a table outside the publication.
	return tables.sinceCheckpoint(cp, s.cfg.AcceptRecreated, slog.New(slog.DiscardHandler))
}

// ownSystem reports whether cp was written streaming srv's cluster: OIDs
// name tables of one cluster only, so those a checkpoint of another system
// recorded say nothing here.
func ownSystem(cp checkpoint.Checkpoint, srv replication.Server) bool {
	return !cp.Identity.Known() || cp.Identity.SystemID == srv.SystemID
}

// whoFenced tells a takeover of this slot from other fencings. An instance
// fences only after it holds the slot, so if another walsender holds it,
// another instance took over and this one must stop. Otherwise a new
// session may go on: the producer that fenced this one streams another
// slot with the same transactional id (a run of such fencings stops the
// stream, see SharedIDError), or the coordinator could not be asked and a
// broker may have bumped the epoch (the devbroker does on restart).
func (s *session) whoFenced(ctx context.Context, conn *pgx.Conn, ownPID uint32, err error) error {
	slot, ok, lerr := replication.LookupSlot(context.WithoutCancel(ctx), conn, s.cfg.Names.Slot)
	if lerr == nil && ok && slot.ActivePID != nil && uint32(*slot.ActivePID) != ownPID {
		return fmt.Errorf("%w; slot %q is now streamed by walsender pid %d", err, s.cfg.Names.Slot, *slot.ActivePID)
	}
	var fe *publish.FencedError
	if errors.As(err, &fe) && fe.Known {
		s.log.Warn("another producer initialized the transactional id while this instance holds the slot; restarting "+
			"(if it happens again, another stream uses the same transactional id)", "transactional_id", fe.TransactionalID, "err", err)
	} else {
		s.log.Warn("producer epoch bumped while no other instance holds the slot (a broker restart, a transaction timeout, "+
			"or another stream with the same transactional id); restarting", "err", err)
	}
	return &epochBumpedError{err}
}

// ErrSlotAhead means the slot has confirmed more than Kafka holds.
var ErrSlotAhead = errors.New("slot is ahead of the checkpoint in Kafka")

// ErrSlotMissing means the slot does not exist although Kafka holds a
// checkpoint: it was dropped, or the server was promoted from a standby
// that had no copy of it. Rows committed meanwhile cannot be streamed.
var ErrSlotMissing = errors.New("slot is missing but Kafka holds a checkpoint")

// checkpointSource fences older instances and reads the checkpoint they
// and this one wrote, and its history.
type checkpointSource interface {
	Fence(ctx context.Context) error
	FenceOthers(ctx context.Context, transactionalIDs []string) error
	ReadCheckpoint(ctx context.Context) (store.Read, error)
	CheckpointHistory(ctx context.Context) ([]checkpoint.Checkpoint, error)
	CoordinatorFate(ctx context.Context, o store.OpenRecord) (kafka.Fate, error)
	MarkerFate(ctx context.Context, o store.OpenRecord) (kafka.Fate, error)
	AbortLeftOpen(ctx context.Context, o store.OpenRecord) ([]string, error)
}

// sessionSource is a session's checkpointSource: its producer fences the
// stream's transactional id; the checkpoints are read, and the other ids
// that wrote them fenced, by the store.
type sessionSource struct {
	*publish.Producer
	*store.Checkpoints
}

var _ checkpointSource = sessionSource{}

// identify asks the server who it is and, past timeline 1, its timeline
// history, which tells where earlier timelines forked.
func identify(ctx context.Context, rconn *pgconn.PgConn) (replication.Server, []replication.HistoryEntry, error) {
	srv, err := replication.Identify(ctx, rconn)
	if err != nil {
		return srv, nil, err
	}
	history, err := replication.History(ctx, rconn, srv.Timeline)
	return srv, history, err
}

// creatable says what Prepare may create. A missing slot is created only
// when Kafka holds no checkpoint for it, or when an operator accepted the
// gap (a slot ahead, or another system): otherwise the checkpoint says
// walstream streamed from a slot that is gone, and a new slot would start
// past rows nobody published.
func (s *session) creatable(ctx context.Context, conn *pgx.Conn, srv replication.Server) (replication.Create, error) {
	cfg := s.cfg
	create := replication.Create{Publication: cfg.Create && !s.started, FailoverSlot: cfg.FailoverSlot}
	_, exists, err := replication.LookupSlot(ctx, conn, cfg.Names.Slot)
	if err != nil || exists && !cfg.Takeover.Enabled() {
		return create, err
	}
	cp, at, found, err := store.ReadCheckpoint(ctx, cfg.Kafka, cfg.CheckpointTopic, cfg.CheckpointKey)
	if err != nil {
		return create, onKafka(err)
	}
	if cfg.Takeover.Enabled() && !found {
		create.Publication = false
		return create, takeoverObjects(ctx, conn, cfg.Names, exists)
	}
	if exists {
		return create, nil
	}
	foreign := found && cp.Identity.Known() && cp.Identity.SystemID != srv.SystemID
	switch {
	case !found:
		create.Slot = cfg.Create && !s.started
	case foreign && cfg.Accept.SystemChange, found && cfg.AllowSlotAhead:
		s.log.Warn("creating the missing slot although Kafka holds a checkpoint, as accepted: rows committed since the checkpoint are not published",
			"checkpoint", cp.String(), "checkpoint_identity", cp.Identity.String(), "written_at", at)
		create.Slot = cfg.Create
	case foreign:
		return create, &DivergedError{Placement: Placement{Verdict: SystemChanged}, Checkpoint: cp, Server: srv, Events: -1,
			Slot: cfg.Names.Slot, CheckpointKey: cfg.CheckpointKey, Stream: cfg.Stream}
	case found:
		return create, fmt.Errorf("%w: slot %q does not exist on %s, but checkpoint %q in topic %s is at %s (written %s on %s): "+
			"the slot was dropped, or this server was promoted from a standby that had no copy of it (not a failover slot). "+
			"Postgres cannot create a slot in the past, so rows committed after the checkpoint and before a new slot exists cannot be streamed; "+
			"walstream does not recreate it. Reconcile those rows, then start once accepting a slot ahead of the checkpoint, which creates it "+
			"(see docs/postgres.md, The slot is missing)",
			ErrSlotMissing, cfg.Names.Slot, srv.SystemID, cfg.CheckpointKey, cfg.CheckpointTopic, cp, at.Format(time.RFC3339), cp.Identity)
	}
	return create, nil
}

// warnFailover logs, once per session, what stands between the slot and a
// safe failover.
func (s *session) warnFailover(ctx context.Context, conn *pgx.Conn) {
	st, err := replication.CheckFailover(ctx, conn, s.cfg.Names)
	if err != nil {
		s.log.Warn("checking the failover setup", "err", err)
		return
	}
	for _, w := range st.Warnings {
		s.log.Warn("failover setup: " + w)
	}
}

// resume fences older instances, then reads the checkpoint, which is final
// only once no older instance can commit (fenceAndRead). It places the
// checkpoint in the server's history and refuses what would skip or
// misplace rows: another system, a checkpoint past the server's fork or
// WAL end, a slot that has confirmed more than Kafka holds; unless the
// operator accepted it. walEnd asks the server's WAL end again.
func resume(ctx context.Context, src checkpointSource, slot replication.Slot, srv replication.Server, history []replication.HistoryEntry,
	walEnd func(context.Context) (pglogrepl.LSN, error), cfg *Config, prior *earlier, log *slog.Logger, phantoms prometheus.Gauge) (cp checkpoint.Checkpoint, inKafka bool, err error) {
	rd, unmarked, err := fenceAndRead(ctx, src, cfg, srv, prior, log)
	if err != nil {
		return cp, false, err
	}
	cp, at, found := rd.Checkpoint, rd.At, rd.Found
	if found {
		// srv was identified before the slot was ours: an instance that
		// held it until then (this one paused past wal_sender_timeout, or
		// one that let go as this one started) may have committed a
		// checkpoint past the WAL end it names.
		identified := srv.XLogPos
		if srv, err = walEndFor(ctx, cp, srv, walEnd); err != nil {
			return cp, false, err
		}
		if srv.XLogPos != identified {
			log.Info("the checkpoint is past the WAL end the server named at IDENTIFY_SYSTEM; placing it against the WAL end of now",
				"checkpoint", cp.String(), "identified_wal_end", identified.String(), "wal_end", srv.XLogPos.String())
		}
	}
	own := checkpoint.Identity{SystemID: srv.SystemID, Timeline: srv.Timeline, Database: srv.Database}
	switch {
	case !found && cfg.Takeover.Enabled():
		return cp, false, errNoCheckpoint
	case !found:
		log.Info("no checkpoint in Kafka, starting where the slot is", "checkpoint_key", cfg.CheckpointKey, "lsn", slot.ConfirmedFlush.String())
		return checkpoint.Checkpoint{LSN: slot.ConfirmedFlush, Identity: own}, false, nil
	}
	pl := Place(cp, srv, history)
	if r := prior.rewritten; r != nil && pl.Verdict == Continuous && samePosition(r.Checkpoint, cp) {
		// The last session's replay found the server's history
		// rewritten, where the LSNs do not show it.
		pl = r.Placement
	}
	events := int64(-1)
	if pl.Verdict == Phantoms {
		h, err := src.CheckpointHistory(ctx)
		if err != nil {
			return cp, false, onKafka(err)
		}
		events = checkpoint.EventsPast(h, pl.Fork)
		phantoms.Set(float64(events))
		log.Error("phantom events: published from WAL the server does not have", "from_lsn", pl.Fork.String(), "to_lsn", reach(cp).String(),
			"events", events, "checkpoint", cp.String(), "checkpoint_identity", cp.Identity.String(), "server_timeline", srv.Timeline)
	}
	next, fresh, err := resolve(cp, pl, srv, slot.ConfirmedFlush, events, cfg.Accept, time.Now(), cfg.Names.Slot, cfg.CheckpointKey)
	if dv := (*DivergedError)(nil); errors.As(err, &dv) {
		dv.Stream = cfg.Stream
	}
	if err != nil {
		return cp, false, err
	}
	switch pl.Verdict {
	case Unidentified:
		log.Info("the checkpoint has no recorded identity (written before walstream recorded it); taking the server's",
			"checkpoint", cp.String(), "system_id", srv.SystemID, "timeline", srv.Timeline)
	case SafeFailover:
		log.Info("failover: the checkpoint is on the new primary's history", "checkpoint", cp.String(),
			"checkpoint_timeline", cp.Identity.Timeline, "fork_lsn", pl.Fork.String(), "timeline", srv.Timeline)
	case Phantoms:
		log.Warn("accepting phantom events: going on from where the histories part, publishing every transaction after it",
			"skip_lsn", pl.Fork.String(), "phantom_to_lsn", reach(cp).String(), "events", events)
	case SystemChanged:
		log.Warn("accepting another system: going on from the slot, using none of the old system's positions",
			"old_system_id", cp.Identity.SystemID, "system_id", srv.SystemID, "old_checkpoint", cp.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String())
	}
	switch {
	case !next.SlotAhead(slot.ConfirmedFlush):
		log.Info("resuming from checkpoint", "checkpoint", next.String(), "written_at", at)
		// A checkpoint whose record shows no marker yet is committed again
		// at once (as one that is not in Kafka), and nothing is confirmed
		// to Postgres before that commit is read back decided.
		return next, !fresh && !unmarked, nil
	case cfg.AllowSlotAhead:
		log.Warn("slot is ahead of the checkpoint; continuing because a slot ahead is allowed: events in between may be missing",
			"checkpoint", next.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String())
		gap := checkpoint.Gap{Kind: checkpoint.GapSlotAhead, Previous: next.Identity, From: next.LSN, To: slot.ConfirmedFlush, Events: -1, At: time.Now()}
		if next.Gap == cp.Gap { // a gap this start accepted already (phantoms, another system) stays on record
			next.Gap = gap
		}
		return next.At(slot.ConfirmedFlush), false, nil
	}
	return cp, true, fmt.Errorf("%w: slot %q confirmed_flush_lsn %s, checkpoint %q in topic %s at %s: events in between may be missing "+
		"(was the slot dropped and recreated? or did Debezium stream from it after a way back to Debezium: then take over from it again, "+
		"see docs/debezium.md, A second cutover); see docs/postgres.md, A slot ahead of the checkpoint, then restart allowing the slot to be ahead to accept the gap",
		ErrSlotAhead, cfg.Names.Slot, slot.ConfirmedFlush, cfg.CheckpointKey, cfg.CheckpointTopic, next)
}

// errNoCheckpoint: Kafka holds no checkpoint, and the stream takes over
// from Debezium.
var errNoCheckpoint = errors.New("no checkpoint in Kafka")

// confirmOnCommit is the tracker as the producer sees it: each commit in
// Kafka also tells the stream, which confirms it to Postgres within its
// ConfirmInterval instead of at the next keepalive.
type confirmOnCommit struct {
	*checkpoint.Tracker
	stream *replication.Stream
	state  *state // told when, for readiness
	// reemit wakes the reemitter, which reads where requests stand in
	// what Kafka committed.
	reemit chan struct{}
}

func (c confirmOnCommit) Committed(cp checkpoint.Checkpoint, events int, newest time.Time) error {
	before, _ := c.Tracker.InKafka()
	if err := c.Tracker.Committed(cp, events, newest); err != nil {
		return err
	}
	c.state.committed.Store(time.Now().UnixNano())
	// Only a commit that moves the position Postgres may be confirmed
	// asks for a status update: the parts of a split transaction do not,
	// so the update its last part asks for goes out at once rather than
	// up to ConfirmInterval after one the earlier parts asked for.
	if before.LSN < cp.LSN {
		c.stream.ConfirmSoon()
	}
	// The reemitter waits for a commit only when no request is active:
	// a commit without one gives it nothing to do, and waking it for each
	// cost a goroutine switch per Kafka transaction.
	if slices.ContainsFunc(reemitsOf(cp), func(r checkpoint.Reemit) bool { return r.State.Active() }) {
		nudge(c.reemit)
	}
	return nil
}

// progress logs a line every interval while streaming: the event rate,
// the lag and the positions, so that an operator sees it move (or not)
// without scraping metrics. It returns ctx's error when ctx ends.
func progress(ctx context.Context, interval time.Duration, tracker *checkpoint.Tracker, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	last, lastAt := tracker.Status(time.Now()), time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			st := tracker.Status(now)
			rate := float64(st.Events-last.Events) / now.Sub(lastAt).Seconds()
			log.Info("progress", "events_per_second", int64(rate+0.5), "events", st.Events,
				"lag_seconds", st.Lag.Seconds(), "checkpoint", st.Committed.String(), "confirmed_lsn", st.Confirmed.String())
			last, lastAt = st, now
		}
	}
}

// accepts reports whether c accepts a divergence from the checkpoint.
func (c *Config) accepts() bool { return c.AllowSlotAhead || c.Accept != Accept{} }

// acceptingNone is c accepting no divergence.
func (c *Config) acceptingNone() *Config {
	d := *c
	d.AllowSlotAhead, d.Accept = false, Accept{}
	return &d
}
