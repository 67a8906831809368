package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/replication"
)

// Takeover says where Debezium's Postgres connector stopped, for a stream
// that goes on from there on the connector's slot and publication
// (Config.Names) instead of from a slot of its own: its first checkpoint
// is made from the offset Kafka Connect stored, and the events Debezium
// published past that offset are found in Kafka and not published again.
// It applies while Kafka holds no checkpoint of the stream, and again when
// Debezium's offset is past the stream's checkpoint: Debezium streamed
// from the slot after the stream (a way back, then a second cutover).
type Takeover struct {
	// Source is where the offset is read; the zero Source takes over
	// nothing.
	Source debezium.Source
	// Selector names the connector (Kafka Connect's name, its
	// topic.prefix).
	Selector debezium.Selector
	// Lookback is how long before the commit time of the offset's last
	// transaction the output topics are read for events Debezium
	// published: record timestamps are Debezium's processing time, later
	// than the commit, unless table.field.event.timestamp takes them from
	// a column, whose times may lie before the commit.
	Lookback time.Duration
	// StatusTopic is Kafka Connect's status topic (status.storage.topic),
	// where Inspect reads the connector's state; empty: it is not read.
	StatusTopic string
	// AcceptRepeatedIDs takes over although an outbox table's event id
	// column has no unique index or may be null, or the stream takes
	// logical messages (whose ids nothing keeps unique), with a warning:
	// the lookup counts the records of each event id
	// (checkpoint/store/takeover.go), and one that Debezium published
	// before the stretch walstream reads again may excuse an event of that
	// id Debezium never published; an event with a null id is published
	// even if Debezium had published it.
	AcceptRepeatedIDs bool
}

// DefaultTakeoverLookback covers clocks of Kafka Connect and Postgres
// minutes apart, and event timestamp columns set that long before their
// transaction's commit.
const DefaultTakeoverLookback = 5 * time.Minute

// Enabled reports whether a takeover was asked for.
func (t Takeover) Enabled() bool { return t.Source.Kind != 0 }

// ErrTakeover means a takeover from Debezium cannot start: the offset
// cannot be read, or it cannot be gone on from without losing events.
var ErrTakeover = errors.New("cannot take over from Debezium")

// ErrRepeatedIDs means an outbox table's event ids may repeat: its event
// id column has no unique index.
var ErrRepeatedIDs = errors.New("event ids may repeat")

// TakeoverError says why, with the offset and the slot's position.
type TakeoverError struct {
	Slot   string
	Source debezium.Source
	Offset debezium.Offset // zero when it could not be read
	Err    error
}

func (e *TakeoverError) Error() string {
	return fmt.Sprintf("%v on slot %q from the offset in %s: %v", ErrTakeover, e.Slot, e.Source, e.Err)
}

func (e *TakeoverError) Unwrap() []error { return []error{ErrTakeover, e.Err} }

// ErrConnectorStreaming means a takeover found its slot held by another
// process than an instance of the stream: Debezium's connector, still
// streaming from it.
var ErrConnectorStreaming = errors.New("the connector still streams from the slot")

// StreamingError is a takeover refused because the process Held names
// holds the slot: no instance of the stream (its application_name is
// another), so not one to wait for as a standby, but the connector the
// takeover must follow.
type StreamingError struct {
	Held *replication.SlotHeldError
	// Own is the application_name of the stream's connections; Why says
	// why the start takes over.
	Own, Why string
}

func (e *StreamingError) Error() string {
	return fmt.Sprintf("%v: %v; its application_name is not this stream's (%q), so it is no walstream standing by, and %s: "+
		"stop the connector (Strimzi: spec.state: stopped in the KafkaConnector; MSK Connect: delete the connector; Kafka Connect: PUT /connectors/<name>/stop), "+
		"check that the slot is inactive and the connector STOPPED in Kafka Connect's status topic, then start again "+
		"(see docs/debezium.md, Checking that the connector stopped)", ErrConnectorStreaming, e.Held, e.Own, e.Why)
}

func (e *StreamingError) Unwrap() []error { return []error{ErrConnectorStreaming, e.Held} }

// refuseHeld turns held, the refusal of the slot at a session's start,
// into a takeover's refusal when the holder is no instance of the stream
// and the session would take over from Debezium (takeoverPending): the
// connector still streams, and taking the slot whenever it lets go of it
// (a task restarting) would start from an offset it is still moving.
// Otherwise held is returned as it is, and the session waits as a
// standby: another walstream of the stream holding the slot, or a holder
// of a slot this stream already streamed from.
func (s *session) refuseHeld(ctx context.Context, srv replication.Server, held error) error {
	cfg := s.cfg
	var h *replication.SlotHeldError
	own := replication.AppName(&cfg.Postgres.Config)
	if !cfg.Takeover.Enabled() || !errors.As(held, &h) || h.Holder.Application == own {
		return held
	}
	cp, _, found, _, err := findCheckpoint(ctx, cfg, srv.Database)
	if err != nil {
		s.log.Warn("cannot tell whether this start takes over from Debezium; waiting for the slot as a standby", "holder", h.Holder.String(), "err", err)
		return held
	}
	why := takeoverPending(ctx, cfg, cp, found)
	if why == "" {
		return held
	}
	return &TakeoverError{Slot: cfg.Names.Slot, Source: cfg.Takeover.Source, Err: &StreamingError{Held: h, Own: own, Why: why}}
}

// takeoverPending says why a session of the stream starting now takes
// over from Debezium, "" when it does not: Kafka holds no checkpoint of
// the stream (found), or Debezium's offset is past it, cp
// (takeOverAgain). An offset that cannot be read takes nothing over, as
// in takeOverAgain.
func takeoverPending(ctx context.Context, cfg *Config, cp checkpoint.Checkpoint, found bool) string {
	if !found {
		return "the start takes over from Debezium: Kafka holds no checkpoint of this stream"
	}
	off, err := readOffset(ctx, cfg)
	if err != nil || off.Snapshot || off.Resume() <= reach(cp) {
		return ""
	}
	return fmt.Sprintf("the start takes over from Debezium again: its offset (%s) is past this stream's checkpoint %s", off, cp)
}

// topicReader reads Kafka Connect's offsets and status topics from the
// cluster the stream writes to.
type topicReader struct{ conn kafka.Settings }

var _ debezium.TopicReader = topicReader{}

func (r topicReader) ReadTopic(ctx context.Context, topic string, each func(key, value []byte)) error {
	return kafka.ReadTopic(ctx, r.conn, topic, each)
}

// takeOver reads Debezium's offset and makes the stream's first checkpoint
// of it. It runs once the session holds the slot: the connector can no
// longer move it, and the server's WAL flush position bounds everything
// the connector can have read.
func takeOver(ctx context.Context, conn *pgx.Conn, cfg *Config, slot replication.Slot, srv replication.Server, log *slog.Logger) (checkpoint.Checkpoint, error) {
	off, err := readOffset(ctx, cfg)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	return takeOverFrom(ctx, conn, cfg, slot, srv, off, checkpoint.Checkpoint{}, log)
}

// readOffset reads Debezium's offset from the takeover's source.
func readOffset(ctx context.Context, cfg *Config) (debezium.Offset, error) {
	t := cfg.Takeover
	off, err := t.Source.Read(ctx, t.Selector, topicReader{cfg.Kafka}, nil)
	if errors.Is(err, debezium.ErrNoOffset) {
		err = fmt.Errorf("%w; Kafka Connect stores a connector's offset every offset.flush.interval.ms and when the connector stops cleanly: "+
			"start the connector again, stop it cleanly (PUT /connectors/<name>/stop, or the worker with SIGTERM), then take over", err)
	}
	if err != nil {
		return off, &TakeoverError{Slot: cfg.Names.Slot, Source: t.Source, Offset: off, Err: err}
	}
	return off, nil
}

// takeOverFrom makes the first checkpoint of a takeover from off. prev is
// the stream's checkpoint before it, when Debezium streamed from the slot
// after walstream (takeOverAgain): its count of events, the gap an
// operator accepted and the event skipped by name go on.
func takeOverFrom(ctx context.Context, conn *pgx.Conn, cfg *Config, slot replication.Slot, srv replication.Server, off debezium.Offset,
	prev checkpoint.Checkpoint, log *slog.Logger) (checkpoint.Checkpoint, error) {
	t := cfg.Takeover
	fail := func(err error) (checkpoint.Checkpoint, error) {
		return checkpoint.Checkpoint{}, &TakeoverError{Slot: cfg.Names.Slot, Source: t.Source, Offset: off, Err: err}
	}
	if err := uniqueIDs(ctx, conn, cfg, log); err != nil {
		return fail(err)
	}
	until, err := replication.WALEnd(ctx, conn)
	if err != nil {
		return fail(err)
	}
	own := checkpoint.Identity{SystemID: srv.SystemID, Timeline: srv.Timeline, Database: srv.Database}
	cp, err := fromOffset(off, t, slot.ConfirmedFlush, until, cfg.AllowSlotAhead, own, time.Now())
	if err != nil {
		return fail(err)
	}
	cp.Events, cp.Counted = prev.Events, prev.Counted
	if cp.Gap == (checkpoint.Gap{}) {
		cp.Gap = prev.Gap
	}
	if prev.Notes != nil {
		cp.Notes.Skipped = prev.Notes.Skipped
	}
	log.Info("taking over from Debezium: its offset is the first checkpoint", "source", t.Source.String(), "connector", off.Connector,
		"topic_prefix", off.Server, "offset", off.String(), "checkpoint", cp.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String(),
		"until_lsn", until.String())
	if cp.Gap.Kind == checkpoint.GapSlotAhead && cp.Gap.From == off.Resume() {
		log.Warn("the slot is ahead of Debezium's offset; going on from the slot because a slot ahead is allowed: events in between are in Kafka only if Debezium published them",
			"offset_lsn_commit", off.Commit.String(), "slot_confirmed_flush_lsn", slot.ConfirmedFlush.String())
	}
	return cp, nil
}

// uniqueIDs refuses a takeover from an outbox table whose event id column
// has no unique index or may be null, or of a stream that takes logical
// messages, unless AcceptRepeatedIDs says to warn instead. The events
// Debezium published are found by event id, counted: a record of an id
// written before the stretch walstream reads again (read because of the
// lookback) is claimed by no event of the stretch, and excuses one of that
// id that Debezium never published, which is then lost. An event without
// an id is never looked up, and published again if Debezium had published
// it (store.Lookup). A logical message's id is a field of its content,
// which nothing keeps unique.
func uniqueIDs(ctx context.Context, conn *pgx.Conn, cfg *Config, log *slog.Logger) error {
	accept := cfg.Takeover.AcceptRepeatedIDs
	for _, o := range cfg.Outboxes {
		t := replication.Table{Schema: o.Schema, Name: o.Table}
		unique, notNull, err := replication.UniqueColumn(ctx, conn, t, o.Columns.ID)
		if err != nil {
			return err
		}
		col := pgx.Identifier{o.Columns.ID}.Sanitize()
		// What the lookup by id needs of the column: each missing refuses
		// the takeover, or is warned of when accepted.
		for _, c := range []struct {
			ok      bool
			refusal error
			warning string
		}{
			{unique, fmt.Errorf("%w: the event id column %s of table %s has no unique index on it alone, and the events Debezium published are found by id: "+
				"an event of an id Debezium published shortly before its offset may be taken for one it did not publish, and not published. "+
				"Create one (CREATE UNIQUE INDEX ON %s (%s)) or, when the ids never repeat (generated UUIDs, for example; a partitioned table's unique keys "+
				"include its partition key, so none is on the id alone), take over accepting ids that may repeat (see docs/debezium.md, How the takeover avoids loss and duplicates)",
				ErrRepeatedIDs, o.Columns.ID, t.SQL(), t.SQL(), col),
				"taking over although the event id column has no unique index: an event whose id Debezium published shortly before its offset may not be published"},
			{notNull, fmt.Errorf("%w: the event id column %s of table %s may be null (a unique index permits any number of nulls), and an event without an id "+
				"cannot be looked up among those Debezium published: it is published again if Debezium had published it. "+
				"Declare the column NOT NULL (ALTER TABLE %s ALTER COLUMN %s SET NOT NULL), as Debezium's outbox table does, or take over accepting ids "+
				"that may repeat (see docs/debezium.md, How the takeover avoids loss and duplicates)",
				ErrRepeatedIDs, o.Columns.ID, t.SQL(), t.SQL(), col),
				"taking over although the event id column may be null: an event with a null id is published even if Debezium had published it"},
		} {
			switch {
			case c.ok:
			case !accept:
				return c.refusal
			default:
				log.Warn(c.warning, "table", t.SQL(), "column", o.Columns.ID)
			}
		}
	}
	if cfg.MessagePrefix == "" {
		return nil
	}
	if !accept {
		return fmt.Errorf("%w: the stream takes logical messages of prefix %q, whose event ids are fields of their content that no index keeps unique "+
			"(and may be null): a message of an id Debezium published shortly before its offset may be taken for one it did not publish, and not published. "+
			"Take over with the stream taking no logical messages (an empty message prefix) when Debezium's connector took none, or accepting ids "+
			"that may repeat when the messages' ids never do (see docs/debezium.md, How the takeover avoids loss and duplicates)",
			ErrRepeatedIDs, cfg.MessagePrefix)
	}
	log.Warn("taking over although the stream takes logical messages, whose ids no index keeps unique: a message whose id Debezium published shortly before its offset may not be published",
		"message_prefix", cfg.MessagePrefix)
	return nil
}

// takeOverAgain decides, for a stream Kafka holds a checkpoint of and
// that is told where Debezium's offset is, whether Debezium streamed from
// the slot after that checkpoint: after the way back to Debezium, a
// cutover again (docs/debezium.md, A second cutover). Then Debezium's
// offset, past the checkpoint, is the first checkpoint of a new takeover,
// and the events Debezium published past it are looked up as at the
// first. Otherwise the checkpoint stands, with resumed, what resume made
// of it (a slot ahead of it), and an offset that cannot be read (a
// connector deleted since) is no reason to stop unless the slot is ahead.
func takeOverAgain(ctx context.Context, conn *pgx.Conn, cfg *Config, slot replication.Slot, srv replication.Server,
	cp checkpoint.Checkpoint, inKafka bool, resumed error, log *slog.Logger) (checkpoint.Checkpoint, bool, error) {
	off, err := readOffset(ctx, cfg)
	switch {
	case err != nil && resumed != nil:
		return cp, inKafka, errors.Join(resumed, fmt.Errorf("whether Debezium streamed from the slot since, its offset would say: %w", err))
	case err != nil:
		log.Info("Kafka holds this stream's checkpoint, and Debezium's offset cannot be read to see whether it streamed since: going on from the checkpoint",
			"checkpoint_key", cfg.CheckpointKey, "checkpoint", cp.String(), "source", cfg.Takeover.Source.String(), "err", err)
		return cp, inKafka, resumed
	case off.Snapshot || off.Resume() <= reach(cp):
		log.Info("Kafka holds this stream's checkpoint, at or past Debezium's offset: going on from the checkpoint",
			"checkpoint_key", cfg.CheckpointKey, "checkpoint", cp.String(), "offset", off.String(), "source", cfg.Takeover.Source.String())
		return cp, inKafka, resumed
	}
	log.Info("Debezium's offset is past this stream's checkpoint: Debezium streamed from the slot after this stream; taking over from it again",
		"checkpoint", cp.String(), "offset", off.String(), "source", cfg.Takeover.Source.String())
	next, err := takeOverFrom(ctx, conn, cfg, slot, srv, off, cp, log)
	return next, false, err
}

// fromOffset is the first checkpoint of a takeover from off, on a slot
// that confirmed slotConfirmed, on a server whose WAL was flushed up to
// until; or why the offset cannot be gone on from.
func fromOffset(off debezium.Offset, t Takeover, slotConfirmed, until pglogrepl.LSN, allowSlotAhead bool, own checkpoint.Identity, now time.Time) (checkpoint.Checkpoint, error) {
	if off.Snapshot {
		return checkpoint.Checkpoint{}, fmt.Errorf("the offset (%s) is a snapshot's, which Debezium had not finished: "+
			"walstream takes no snapshot; let the connector finish it, then stop it and take over", off)
	}
	resume := off.Resume()
	if resume == 0 {
		return checkpoint.Checkpoint{}, fmt.Errorf("the offset (%s) names no position", off)
	}
	if resume > until {
		return checkpoint.Checkpoint{}, fmt.Errorf("the offset (%s) is past the server's WAL flush position %s: "+
			"the offset is another server's or a restored database's, and going on from it would skip transactions this server commits", off, until)
	}
	since := time.Time{}
	if !off.CommitTime.IsZero() {
		since = off.CommitTime.Add(-t.Lookback)
	}
	cp := checkpoint.Checkpoint{LSN: resume, Identity: own, Notes: &checkpoint.Notes{Takeover: &checkpoint.Takeover{
		Source: t.Source.String(), Connector: off.Connector, Server: off.Server, Offset: off.Raw, Until: until, Since: since, Time: now.UTC()}}}
	if slotConfirmed <= resume {
		// The server sends from the slot's position; transactions that
		// committed before the offset's are skipped as in Kafka.
		return cp, nil
	}
	// The slot is past every transaction the offset says is in Kafka:
	// Postgres no longer sends those in between. Debezium confirms to its
	// slot only what Kafka acknowledged, but a worker killed after it
	// confirmed and before it stored its next offset leaves its last
	// stored offset behind the slot, and so does an offset older than
	// the connector's last.
	if !allowSlotAhead {
		return checkpoint.Checkpoint{}, fmt.Errorf("%w: slot confirmed_flush_lsn %s, Debezium's offset lsn_commit %s (%s): transactions committed between them "+
			"are not sent again, and are in Kafka only if Debezium published them, which its offset does not say. A connector killed after confirming "+
			"a position to its slot and before storing its next offset leaves this; start the connector again and stop it cleanly "+
			"(PUT /connectors/<name>/stop, or the worker with SIGTERM), which stores its offset, then take over. "+
			"To go on from the slot instead, accepting that events in between may be missing, restart allowing the slot to be ahead "+
			"(see docs/debezium.md, Cutover: from Debezium to walstream)", ErrSlotAhead, slotConfirmed, resume, off)
	}
	cp.LSN = slotConfirmed
	cp.Gap = checkpoint.Gap{Kind: checkpoint.GapSlotAhead, From: resume, To: slotConfirmed, Events: -1, At: now.UTC()}
	return cp, nil
}

// takeoverObjects checks, before setup, that the slot and publication a
// takeover goes on from exist: either made now would start past the rows
// Debezium did not publish.
func takeoverObjects(ctx context.Context, conn *pgx.Conn, names replication.Names, slotExists bool) error {
	var pub bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1)", names.Publication).Scan(&pub); err != nil {
		return fmt.Errorf("looking up publication %q: %w", names.Publication, err)
	}
	switch {
	case !slotExists:
		return fmt.Errorf("slot %q does not exist: taking over from Debezium goes on from its slot (slot.name), which must still exist; "+
			"a new slot starts after the rows Debezium did not publish", names.Slot)
	case !pub:
		return fmt.Errorf("publication %q does not exist: taking over from Debezium goes on with its publication (publication.name); "+
			"a publication made now would not publish the rows committed before it", names.Publication)
	}
	return nil
}
