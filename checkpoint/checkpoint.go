package checkpoint

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// Checkpoint is walstream's position. It is written inside the Kafka
// transaction that published everything up to it, so it is committed
// exactly when those records are.
type Checkpoint struct {
	// LSN: every transaction whose commit record starts before LSN is
	// published in whole. It is the end LSN of the last whole transaction,
	// or a keepalive position taken while nothing was in flight, and it is
	// the only position that may be confirmed to Postgres.
	LSN pglogrepl.LSN
	// PartialCommitLSN, when non-zero, is the commit LSN of a transaction
	// published in parts, of which events 1..Ordinal are in Kafka.
	PartialCommitLSN pglogrepl.LSN
	Ordinal          uint64
	// Notes is what the record says besides the position; nil when it says
	// nothing more. It does not take part in ordering checkpoints.
	Notes *Notes

	// Identity names the Postgres history the LSNs above belong to. It is
	// zero in records written before walstream recorded it.
	Identity Identity
	// Events counts the events published under this checkpoint key up to
	// this checkpoint, when Counted; records written before walstream
	// counted them carry no count. The difference between two records is
	// the number of events published between them.
	Events  uint64
	Counted bool
	// Gap, when set, is the last discontinuity an operator accepted at a
	// start; it is carried in every later record so that it stays visible.
	Gap Gap
	// Last is the last transaction with events published up to this
	// checkpoint, which a replay must show again (replay.go); unknown in
	// records written before walstream recorded it, and after a gap.
	Last Last
	// Owner is the stream that wrote a decoded record; Encode takes the
	// writer's own instead.
	Owner Owner
}

// Owner names the stream a checkpoint record belongs to: what survives a
// failover or a restore of its database, unlike the system identifier.
// Fields are empty in records written before walstream recorded them
// (Stream, TransactionalID) or when unknown.
type Owner struct {
	Stream string
	Slot   string
	// TransactionalID is the transactional id of the producer that wrote
	// the record, which the next instance of the stream fences should it
	// be deployed under another one.
	TransactionalID string
}

func (o Owner) String() string {
	if o.Stream == "" {
		return fmt.Sprintf("slot %s", o.Slot)
	}
	return fmt.Sprintf("stream %s, slot %s", o.Stream, o.Slot)
}

// Identity is what IDENTIFY_SYSTEM says about the server a position was
// read from. LSNs from different systems, or from different timelines past
// their fork, name different WAL and cannot be compared.
type Identity struct {
	SystemID string // the cluster's system identifier; "" when unknown
	Timeline int32  // 0 when unknown
	Database string
}

// Known reports whether the identity was recorded.
func (id Identity) Known() bool { return id.SystemID != "" }

func (id Identity) String() string {
	if !id.Known() {
		return "unknown system"
	}
	return fmt.Sprintf("system %s timeline %d database %s", id.SystemID, id.Timeline, id.Database)
}

// GapKind says why a start left a discontinuity in the stream.
type GapKind string

const (
	// GapNone: no discontinuity was accepted.
	GapNone GapKind = ""
	// GapSystemChanged: the server is another cluster; streaming went on
	// from the slot's position, and nothing of the old system's positions
	// was used to skip rows.
	GapSystemChanged GapKind = "system_changed"
	// GapPhantoms: events between From and To were published from WAL the
	// server's history no longer holds; streaming went on from From.
	GapPhantoms GapKind = "phantoms"
	// GapSlotAhead: the slot had confirmed past the checkpoint; streaming
	// went on from the slot, and events between To and From may be missing.
	GapSlotAhead GapKind = "slot_ahead"
)

// Gap is a discontinuity an operator accepted: a range of positions of
// the previous identity and, where known, how many events it held.
type Gap struct {
	Kind     GapKind
	Previous Identity
	// From and To bound the range on the previous identity's WAL: for
	// phantoms, the fork and the old checkpoint.
	From, To pglogrepl.LSN
	// Events is the number of events in the range; -1 when unknown.
	Events int64
	At     time.Time
}

// At returns the checkpoint moved to the whole position lsn, keeping its
// identity, count and gap.
func (c Checkpoint) At(lsn pglogrepl.LSN) Checkpoint {
	c.LSN, c.PartialCommitLSN, c.Ordinal = lsn, 0, 0
	return c
}

// Part returns the checkpoint covering events 1..ordinal of the
// transaction committed at commitLSN, keeping its LSN, identity, count and
// gap.
func (c Checkpoint) Part(commitLSN pglogrepl.LSN, ordinal uint64) Checkpoint {
	c.PartialCommitLSN, c.Ordinal = commitLSN, ordinal
	return c
}

// Published returns the checkpoint with n more events counted.
func (c Checkpoint) Published(n int) Checkpoint {
	c.Events += uint64(n)
	c.Counted = true
	return c

}

// Notes is what a checkpoint records for the next session and for
// operators, besides the position.
type Notes struct {
	// Tables are the outbox tables' pg_class OIDs, by schema.table, that
	// the published stream came from: a table found with another OID was
	// recreated since, and rows may be missing.
	Tables map[string]uint32 `json:"tables,omitempty"`
	// Entries are, by schema.table, the OIDs of the publication's catalog
	// rows that covered the outbox tables (replication.TableInfo.Entries):
	// a table covered by none of them since left the publication and came
	// back, and rows may be missing.
	Entries map[string][]uint32 `json:"entries,omitempty"`
	// Skipped is the last event an operator sent to the dead-letter topic
	// by naming it, kept in every later checkpoint too.
	Skipped *Skip `json:"skipped,omitempty"`
	// Takeover is where the stream's first checkpoint came from when it
	// went on where Debezium stopped, kept in every later checkpoint too.
	Takeover *Takeover `json:"takeover,omitempty"`
	// Reemits are the re-emit requests the stream met: those queued or
	// running, with their progress, and the last ones that ended.
	Reemits Reemits `json:"reemits,omitempty"`
}

// Takeover records a stream that went on where Debezium's Postgres
// connector stopped, on its slot: the offset Kafka Connect stored for it,
// where it was read, and the stretch of WAL whose events Debezium may
// have published already, which walstream looks up in Kafka by event id
// before publishing each.
type Takeover struct {
	// Source is where the offset was read: Kafka Connect's REST API,
	// kafka:<offsets topic> or a file.
	Source string `json:"source"`
	// Connector and Server are the connector's name and its source
	// partition's server (topic.prefix).
	Connector string `json:"connector,omitempty"`
	Server    string `json:"server,omitempty"`
	// Offset is the offset as Debezium stored it.
	Offset json.RawMessage `json:"offset"`
	// Until is the server's WAL end when walstream took over: no event of
	// a transaction committed at or after it can be in Kafka already.
	Until pglogrepl.LSN `json:"-"`
	// Since is the record timestamp from which the output topics are read
	// for events already published.
	Since time.Time `json:"since"`
	Time  time.Time `json:"time"`
}

// takeoverJSON writes Until in Postgres' text form.
type takeoverJSON struct {
	*takeoverAlias
	Until string `json:"until_lsn"`
}

type takeoverAlias Takeover

// MarshalJSON writes the record's takeover, its LSN as text.
func (t *Takeover) MarshalJSON() ([]byte, error) {
	return json.Marshal(takeoverJSON{takeoverAlias: (*takeoverAlias)(t), Until: t.Until.String()})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (t *Takeover) UnmarshalJSON(b []byte) error {
	v := takeoverJSON{takeoverAlias: (*takeoverAlias)(t)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	lsn, err := pglogrepl.ParseLSN(v.Until)
	if err != nil {
		return fmt.Errorf("decoding takeover until_lsn %q: %w", v.Until, err)
	}
	t.Until = lsn
	return nil
}

// Overlaps reports whether events of the transaction committed at
// commitLSN may be in Kafka already, published by Debezium.
func (t *Takeover) Overlaps(commitLSN pglogrepl.LSN) bool { return t != nil && commitLSN < t.Until }

// TakeoverAhead returns the takeover from Debezium the checkpoint records
// when transactions Debezium may have published lie after it; nil
// otherwise.
func (c Checkpoint) TakeoverAhead() *Takeover {
	if c.Notes == nil || !c.Notes.Takeover.Overlaps(c.LSN) {
		return nil
	}
	return c.Notes.Takeover
}

// Skip is an event skipped by name: sent to the dead-letter topic with
// its reason instead of stopping walstream.
type Skip struct {
	Event   string    `json:"event"` // commit LSN:ordinal, as errors print it
	LSN     string    `json:"lsn"`
	Table   string    `json:"table"`
	EventID string    `json:"event_id,omitempty"`
	Reason  string    `json:"reason"`
	Time    time.Time `json:"time"`
}

// Skip reports whether the event with the given ordinal (1-based) of the
// transaction committed at commitLSN is already in Kafka.
func (c Checkpoint) Skip(commitLSN pglogrepl.LSN, ordinal uint64) bool {
	if commitLSN < c.LSN {
		return true
	}
	return c.PartialCommitLSN != 0 && commitLSN == c.PartialCommitLSN && ordinal <= c.Ordinal
}

// SlotAhead reports whether a slot that has confirmed slotConfirmed is
// ahead of c: Postgres no longer sends what lies between, so events may be
// missing. It is the one test run, resume and status apply.
func (c Checkpoint) SlotAhead(slotConfirmed pglogrepl.LSN) bool { return c.LSN < slotConfirmed }

// SkipTx reports whether the whole transaction committed at commitLSN is
// already in Kafka.
func (c Checkpoint) SkipTx(commitLSN pglogrepl.LSN) bool { return commitLSN < c.LSN }

// Less orders checkpoints by how much of the stream they cover.
func (c Checkpoint) Less(o Checkpoint) bool {
	al, ao := c.point()
	bl, bo := o.point()
	return al < bl || (al == bl && ao < bo)
}

// point places the checkpoint on the stream: a whole checkpoint covers the
// commits before LSN; a partial one also covers the first Ordinal events of
// the transaction at PartialCommitLSN, which is never before LSN.
func (c Checkpoint) point() (pglogrepl.LSN, uint64) {
	if c.PartialCommitLSN != 0 {
		return c.PartialCommitLSN, c.Ordinal
	}
	return c.LSN, 0
}

func (c Checkpoint) String() string {
	if c.PartialCommitLSN != 0 {
		return fmt.Sprintf("%s (+%d events of the transaction committed at %s)", c.LSN, c.Ordinal, c.PartialCommitLSN)
	}
	return c.LSN.String()
}

// record is the JSON value of a checkpoint record. LSNs are in Postgres'
// text form so that operators can read and compare them with pg_* views.
// Fields added later are optional, so that older records still decode.
type record struct {
	Stream           string     `json:"stream,omitempty"`
	Slot             string     `json:"slot"`
	TransactionalID  string     `json:"transactional_id,omitempty"`
	LSN              string     `json:"lsn"`
	PartialCommitLSN string     `json:"partial_commit_lsn,omitempty"`
	Ordinal          uint64     `json:"ordinal,omitempty"`
	Time             time.Time  `json:"time"`
	SystemID         string     `json:"system_id,omitempty"`
	Timeline         int32      `json:"timeline,omitempty"`
	Database         string     `json:"database,omitempty"`
	Events           *uint64    `json:"events,omitempty"`
	Gap              *gapRecord `json:"gap,omitempty"`
	// The last transaction with events (Last), absent when unknown.
	LastXid        uint32     `json:"last_xid,omitempty"`
	LastCommitLSN  string     `json:"last_commit_lsn,omitempty"`
	LastCommitTime *time.Time `json:"last_commit_time,omitempty"`
	// Notes' fields, at the top level; absent from older records.
	Tables   map[string]uint32   `json:"tables,omitempty"`
	Entries  map[string][]uint32 `json:"entries,omitempty"`
	Skipped  *Skip               `json:"skipped,omitempty"`
	Takeover *Takeover           `json:"takeover,omitempty"`
	Reemits  Reemits             `json:"reemits,omitempty"`
	// Wrote names the topics the transaction that committed the record
	// wrote to, the checkpoint topic among them: of that record alone.
	Wrote []string `json:"wrote,omitempty"`
}

type gapRecord struct {
	Kind             GapKind   `json:"kind"`
	PreviousSystemID string    `json:"previous_system_id,omitempty"`
	PreviousTimeline int32     `json:"previous_timeline,omitempty"`
	PreviousDatabase string    `json:"previous_database,omitempty"`
	From             string    `json:"from_lsn"`
	To               string    `json:"to_lsn"`
	Events           int64     `json:"events"` // -1: unknown
	Time             time.Time `json:"time"`
}

// Encode returns the checkpoint record's value, written by owner.
func (c Checkpoint) Encode(owner Owner, now time.Time) []byte {
	return c.EncodeIn(owner, now, nil)
}

// EncodeIn returns the value of the checkpoint record of a transaction
// that wrote to the topics wrote, the checkpoint topic among them: a
// record its partition shows in a transaction still open is decided by
// the transaction's markers in them (checkpoint/store).
func (c Checkpoint) EncodeIn(owner Owner, now time.Time, wrote []string) []byte {
	r := record{Wrote: wrote, Stream: owner.Stream, Slot: owner.Slot, TransactionalID: owner.TransactionalID, LSN: c.LSN.String(), Ordinal: c.Ordinal, Time: now.UTC(),
		SystemID: c.Identity.SystemID, Timeline: c.Identity.Timeline, Database: c.Identity.Database}
	if c.PartialCommitLSN != 0 {
		r.PartialCommitLSN = c.PartialCommitLSN.String()
	}
	if c.Notes != nil {
		r.Tables, r.Entries, r.Skipped, r.Takeover, r.Reemits = c.Notes.Tables, c.Notes.Entries, c.Notes.Skipped, c.Notes.Takeover, c.Notes.Reemits
	}
	if c.Counted {
		r.Events = &c.Events
	}
	if l := c.Last; l.Known() {
		t := l.CommitTime.UTC()
		r.LastXid, r.LastCommitLSN, r.LastCommitTime = l.Xid, l.CommitLSN.String(), &t
	}
	if g := c.Gap; g.Kind != GapNone {
		r.Gap = &gapRecord{Kind: g.Kind, PreviousSystemID: g.Previous.SystemID, PreviousTimeline: g.Previous.Timeline,
			PreviousDatabase: g.Previous.Database, From: g.From.String(), To: g.To.String(), Events: g.Events, Time: g.At.UTC()}
	}
	b, _ := json.Marshal(r) // cannot fail: strings, integers and times
	return b
}

// Wrote returns the topics a checkpoint record's transaction wrote to, as
// the record names them (EncodeIn); none for a record of an earlier
// version, or one that does not decode.
func Wrote(b []byte) []string {
	var r struct {
		Wrote []string `json:"wrote"`
	}
	_ = json.Unmarshal(b, &r) // a record that does not decode names none
	return r.Wrote
}

// Decode parses a checkpoint record's value.
func Decode(b []byte) (Checkpoint, time.Time, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return Checkpoint{}, time.Time{}, fmt.Errorf("decoding checkpoint %q: %w", b, err)
	}
	var c Checkpoint
	var err error
	if c.LSN, err = pglogrepl.ParseLSN(r.LSN); err != nil {
		return Checkpoint{}, time.Time{}, fmt.Errorf("decoding checkpoint lsn %q: %w", r.LSN, err)
	}
	if r.PartialCommitLSN != "" {
		if c.PartialCommitLSN, err = pglogrepl.ParseLSN(r.PartialCommitLSN); err != nil {
			return Checkpoint{}, time.Time{}, fmt.Errorf("decoding checkpoint partial_commit_lsn %q: %w", r.PartialCommitLSN, err)
		}
		c.Ordinal = r.Ordinal
	}
	if len(r.Tables) > 0 || len(r.Entries) > 0 || r.Skipped != nil || r.Takeover != nil || len(r.Reemits) > 0 {
		c.Notes = &Notes{Tables: r.Tables, Entries: r.Entries, Skipped: r.Skipped, Takeover: r.Takeover, Reemits: r.Reemits}
	}
	c.Identity = Identity{SystemID: r.SystemID, Timeline: r.Timeline, Database: r.Database}
	c.Owner = Owner{Stream: r.Stream, Slot: r.Slot, TransactionalID: r.TransactionalID}
	if r.Events != nil {
		c.Events, c.Counted = *r.Events, true
	}
	if r.LastCommitLSN != "" {
		if c.Last.CommitLSN, err = pglogrepl.ParseLSN(r.LastCommitLSN); err != nil {
			return Checkpoint{}, time.Time{}, fmt.Errorf("decoding checkpoint last_commit_lsn %q: %w", r.LastCommitLSN, err)
		}
		c.Last.Xid = r.LastXid
		if r.LastCommitTime != nil {
			c.Last.CommitTime = *r.LastCommitTime
		}
	}
	if g := r.Gap; g != nil {
		c.Gap = Gap{Kind: g.Kind, Previous: Identity{SystemID: g.PreviousSystemID, Timeline: g.PreviousTimeline, Database: g.PreviousDatabase},
			Events: g.Events, At: g.Time}
		if c.Gap.From, err = pglogrepl.ParseLSN(g.From); err != nil {
			return Checkpoint{}, time.Time{}, fmt.Errorf("decoding checkpoint gap from_lsn %q: %w", g.From, err)
		}
		if c.Gap.To, err = pglogrepl.ParseLSN(g.To); err != nil {
			return Checkpoint{}, time.Time{}, fmt.Errorf("decoding checkpoint gap to_lsn %q: %w", g.To, err)
		}
	}
	return c, r.Time, nil
}

// Tracker owns a session's positions: where it resumed, what it received,
// what Kafka committed and what was confirmed to Postgres, and the times
// behind walstream's lag metrics. The others ask it rather than keep
// copies: the publisher reports commits and asks what Kafka holds, the
// stage between replication and decode reports what it received, and the
// replication loop asks what to confirm, from different goroutines.
type Tracker struct {
	// resume is where the session started; it never changes, so it is read
	// without the lock.
	resume Checkpoint
	// takeover, while the session starts within the stretch of a takeover
	// from Debezium, holds confirmation at the slot's own position until
	// Kafka committed past the stretch: a session that starts again
	// within it reads the stretch from its start, so that each of its
	// events claims the record that holds it (checkpoint/store/takeover.go).
	takeover *Takeover

	mu sync.Mutex
	// replay checks what the server replays of the checkpoint's stretch;
	// nothing new is confirmed before it is done, so that a server whose
	// history was rewritten keeps the slot where it was (witness).
	replay witness
	// committed only moves forward; it is what Kafka holds once inKafka.
	committed   Checkpoint
	inKafka     bool
	committedAt time.Time
	// confirmed only moves forward and never passes committed.LSN nor
	// serverEnd, except that it starts at the slot's own
	// confirmed_flush_lsn. sent is the last position Confirm returned.
	confirmed, sent pglogrepl.LSN
	// serverEnd is the highest WAL end the server reported. A position
	// past it names WAL the server does not have (a checkpoint from
	// another history); confirming it would make the slot skip
	// transactions the server writes later.
	serverEnd pglogrepl.LSN

	received     pglogrepl.LSN // commit LSN of the newest transaction handed on
	pending      bool          // received transactions not yet in Kafka
	pendingSince time.Time     // Postgres commit time lag is measured from
	lastEvent    time.Time     // when events were last committed to Kafka
	events       uint64        // events committed to Kafka by this session
	lastConfirm  time.Time     // when a position was last confirmed
}

// NewTracker starts a session at resume, the checkpoint read from Kafka
// (inKafka) or the slot's position when Kafka holds none, with the slot's
// confirmed_flush_lsn.
func NewTracker(resume Checkpoint, inKafka bool, slotConfirmed pglogrepl.LSN) *Tracker {
	t := &Tracker{resume: resume, takeover: resume.TakeoverAhead(), committed: resume, inKafka: inKafka, confirmed: slotConfirmed,
		replay: newWitness(resume, slotConfirmed)}
	if inKafka {
		t.committedAt = time.Now()
	}
	return t
}

// Resume is the position the session started from.
func (t *Tracker) Resume() Checkpoint { return t.resume }

// Replayed reports whether the event with the given ordinal of the
// transaction committed at commitLSN was in Kafka when the session started:
// the replay filter decoding applies.
func (t *Tracker) Replayed(commitLSN pglogrepl.LSN, ordinal uint64) bool {
	return t.resume.Skip(commitLSN, ordinal)
}

// Sent checks a transaction the server sent against what the resume
// checkpoint says was published, while the replay of its stretch lasts:
// a *ReplayError when the server's history is not the one published.
func (t *Tracker) Sent(s Sent) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.replay.sent(s)
}

// DecodedTo is the server's word that every transaction committed before
// lsn has been sent; like Sent, it may end the replay's check or fail it.
func (t *Tracker) DecodedTo(lsn pglogrepl.LSN) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.replay.decodedTo(lsn)
}

// InKafka returns the checkpoint Kafka holds and when this session learnt
// it; the zero checkpoint and time while Kafka holds none.
func (t *Tracker) InKafka() (Checkpoint, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.inKafka {
		return Checkpoint{}, time.Time{}
	}
	return t.committed, t.committedAt
}

// Received records a transaction (or part) with events handed to the
// publisher.
func (t *Tracker) Received(commitLSN pglogrepl.LSN, commitTime time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.pending {
		t.pending, t.pendingSince = true, commitTime
	}
	t.received = max(t.received, commitLSN)
}

// Committed records that Kafka committed the transaction holding cp, with
// events events of which the newest was committed in Postgres at newest.
// A checkpoint behind the current one is an error in the caller and is
// refused rather than allowed to move the position backwards.
func (t *Tracker) Committed(cp Checkpoint, events int, newest time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cp.Less(t.committed) {
		return fmt.Errorf("checkpoint %s is behind the committed checkpoint %s", cp, t.committed)
	}
	t.committed, t.inKafka, t.committedAt = cp, true, time.Now()
	if events > 0 {
		t.events += uint64(events)
		t.lastEvent = time.Now()
		if t.pending {
			t.pendingSince = newest
		}
	}
	if t.received < cp.LSN {
		t.pending = false
	}
	return nil
}

// ServerWALEnd records a WAL end the server reported: IDENTIFY_SYSTEM's
// xlogpos, a keepalive's ServerWALEnd, an XLogData's WALEnd.
func (t *Tracker) ServerWALEnd(lsn pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.serverEnd = max(t.serverEnd, lsn)
}

// Confirm returns the LSN to send to Postgres as the flush position and
// records it as sent: what Kafka committed, but never past the WAL end
// the server reported, nothing new before the session's first commit when
// it started from a position Kafka's readers do not hold, and nothing new
// before Kafka committed past a takeover's stretch, and nothing new
// before the replay of the checkpoint's stretch was found to be the
// server's history (Sent). changed says it differs from the last one
// returned.
func (t *Tracker) Confirm() (lsn pglogrepl.LSN, changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := min(t.committed.LSN, t.serverEnd); c > t.confirmed && t.inKafka && !t.takeover.Overlaps(t.committed.LSN) && t.replay.done {
		t.confirmed = c
	}
	if t.confirmed != 0 {
		t.lastConfirm = time.Now()
	}
	changed = t.confirmed != t.sent
	t.sent = t.confirmed
	return t.confirmed, changed
}

// Positions returns the committed checkpoint and the last confirmed LSN.
func (t *Tracker) Positions() (committed Checkpoint, confirmed pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.committed, t.confirmed
}

// Status is what the lag metrics and readiness report.
type Status struct {
	// Lag: while transactions wait for Kafka, now minus the Postgres commit
	// time of the newest one published (or of the first one waiting, when
	// none was published since); 0 when idle and caught up.
	Lag         time.Duration
	LastEvent   time.Time // zero until events were published
	LastConfirm time.Time
	// Events counts the events this session committed to Kafka.
	Events uint64
	// Committed and Confirmed are the positions in Kafka and in Postgres.
	Committed Checkpoint
	Confirmed pglogrepl.LSN
}

// Status reports the lag and times as of now.
func (t *Tracker) Status(now time.Time) Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := Status{LastEvent: t.lastEvent, LastConfirm: t.lastConfirm, Events: t.events, Committed: t.committed, Confirmed: t.confirmed}
	if t.pending {
		st.Lag = max(now.Sub(t.pendingSince), 0)
	}
	return st
}
