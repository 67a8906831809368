package decode

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"
)

// Config says which tables hold the outbox and how large a part may grow.
type Config struct {
	// Outboxes are the outbox tables; rows of other tables are ignored.
	Outboxes []*Outbox
	// MaxPartEvents and MaxPartBytes bound the events buffered for one
	// transaction; when either is reached the buffered events are handed on
	// as a part.
	MaxPartEvents int
	MaxPartBytes  int
	// JSONText requires text payloads and text fields placed in the
	// envelope to be valid UTF-8, which JSON needs: a SQL_ASCII database
	// stores any bytes, and the JSON converter must not write malformed
	// JSON. A row that breaks it is bad.
	JSONText bool
	// OIDs are the outbox tables' pg_class OIDs by schema.table, as the
	// catalog had them when the session started. A Relation message that
	// names an outbox table with another OID is a recreated table: rows
	// committed between its CREATE TABLE and its ALTER PUBLICATION ... ADD
	// TABLE were never sent, so decoding stops there. A table missing from
	// OIDs takes the first OID the stream shows.
	OIDs map[string]uint32
	// Recreated names tables whose OID may change without a gap: an
	// operator accepted the recreation, or the publication covers the
	// table's schema, so a new table is in it from its CREATE TABLE on.
	Recreated map[string]bool
	// MessagePrefix, when set, makes transactional logical decoding
	// messages with this prefix (pg_logical_emit_message) outbox events,
	// routed as Messages says (default: the first outbox).
	MessagePrefix string
	Messages      *Outbox
	// SignalTable, when set, is Debezium's signal table (schema.table,
	// signal.data.collection): its rows are re-emit requests and cancels
	// (SignalRequests), handed on with their transaction.
	SignalTable string
	// Skip reports whether the event with the given ordinal (1-based) of
	// the transaction committed at commitLSN was handed on before, by an
	// earlier run: a replay to drop. It must skip every smaller ordinal of
	// a transaction when it skips one; a transaction is skipped whole when
	// Skip(commitLSN, math.MaxUint64). Nil skips nothing.
	Skip func(commitLSN pglogrepl.LSN, ordinal uint64) bool
	// Replayed, if not nil, is told of each transaction Skip drops whole,
	// with the number of outbox events it held (tx holds none of them),
	// and of each non-transactional message Skip drops (Xid 0): what the
	// server replays of what was published before, for the caller to
	// check against what it published.
	Replayed func(tx *Tx, events uint64)
}

// Identity names an event: where it stands on the stream and where it came
// from. Events carry it, and so does every error about one.
type Identity struct {
	// CommitLSN and Ordinal place the event on the stream: the commit LSN
	// of its transaction and its 1-based position among that transaction's
	// outbox events. Checkpoints are made of them, never of LSN: rows of one
	// multi-row INSERT share an LSN.
	CommitLSN pglogrepl.LSN
	Ordinal   uint64
	// LSN and Table say where the row or message is: its WAL position and
	// its schema-qualified table, or "logical message <prefix>".
	LSN   pglogrepl.LSN
	Table string
	// ID is the event id as the source has it; nil when unknown.
	ID []byte
}

// String names the event for logs and errors.
func (id Identity) String() string {
	var parts []string
	if id.LSN != 0 {
		parts = append(parts, "at LSN "+id.LSN.String())
	}
	if id.Table != "" {
		parts = append(parts, "table "+id.Table)
	}
	if len(id.ID) > 0 {
		parts = append(parts, "event id "+string(id.ID))
	}
	if id.CommitLSN != 0 {
		parts = append(parts, "event "+id.Ref().String())
	}
	return strings.Join(parts, ", ")
}

// Ref places the event on the stream.
func (id Identity) Ref() Ref { return Ref{CommitLSN: id.CommitLSN, Ordinal: id.Ordinal} }

// Ref names one event on the stream, in the form errors print it: the
// commit LSN of its transaction and its ordinal there, or, for a logical
// message emitted outside any transaction, the message's LSN and ordinal 0.
type Ref struct {
	CommitLSN pglogrepl.LSN
	Ordinal   uint64
}

// String is the text form ParseRef reads: 0/16B3748:3.
func (r Ref) String() string { return r.CommitLSN.String() + ":" + strconv.FormatUint(r.Ordinal, 10) }

// IsZero reports whether r names no event.
func (r Ref) IsZero() bool { return r.CommitLSN == 0 }

// ParseRef reads an event reference as Ref.String writes it.
func ParseRef(s string) (Ref, error) {
	lsn, ord, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Ref{}, fmt.Errorf("event %q is not <commit LSN>:<ordinal>, like 0/16B3748:3", s)
	}
	var r Ref
	var err error
	if r.CommitLSN, err = pglogrepl.ParseLSN(lsn); err != nil || r.CommitLSN == 0 {
		return Ref{}, fmt.Errorf("event %q: commit LSN %q is not a non-zero LSN", s, lsn)
	}
	if r.Ordinal, err = strconv.ParseUint(ord, 10, 64); err != nil {
		return Ref{}, fmt.Errorf("event %q: ordinal %q is not a number", s, ord)
	}
	return r, nil
}

// Event is one outbox row. Its byte slices alias a buffer owned by the
// event's Tx and stay valid for as long as the Tx is referenced.
type Event struct {
	Identity
	// Source is the mapping the event was read with; publish finds the
	// event's route and encoders by its Name.
	Source        *Outbox
	AggregateType []byte // empty routes to outbox.event. by default, as in Debezium
	AggregateID   []byte
	Type          []byte // nil when the table has no type column or it is NULL
	// Payload is the value; nil for a NULL payload, which is published as
	// a null value, or for a tombstone.
	Payload []byte
	// Tombstone is set when the record has no value at all
	// (route.tombstone.on.empty.payload with a NULL or blank payload).
	Tombstone bool
	// IDColumn, KeyColumn and PayloadColumn are the event id's, the key's
	// and the payload's columns, whose types say how converters encode
	// them; nil for a logical message.
	IDColumn, KeyColumn, PayloadColumn *Column
	// PayloadBinary is set when the payload is bytea, so that converters
	// that encode text and bytes differently can tell.
	PayloadBinary bool
	// TraceParent is the W3C trace context from the row's traceparent or
	// tracingspancontext column, when it has one.
	TraceParent []byte
	// Headers are extra headers a logical message's envelope carries.
	Headers []Header
	// Message is a logical message's JSON content, of which the encoders
	// make the key, the value and the id header as Debezium does; nil for
	// a row.
	Message []byte
	// Fields are the additional columns placed in headers or the envelope.
	Fields []Field
	// SchemaVersion is the schema version column's value, nil when NULL or
	// there is none.
	SchemaVersion []byte
	// Timestamp is the record's timestamp from the timestamp column; zero
	// leaves the time Kafka receives it.
	Timestamp time.Time
	// Partition is the record's partition when Partitioned, from an
	// additional column placed in the partition; otherwise the key picks it.
	Partition   int32
	Partitioned bool
	// Bad says why the row cannot become a record; the columns above are
	// then whatever the row had. Bad events stay in commit order with the
	// others, so that whoever stops at one stops at the first.
	Bad *Error
}

// Size is the event's payload and key bytes, the measure batches are
// bounded by.
func (e *Event) Size() int {
	return len(e.ID) + len(e.AggregateType) + len(e.AggregateID) + len(e.Type) + len(e.Payload)
}

// Header is an extra record header.
type Header struct{ Key, Value string }

// Tx is a Postgres transaction, or a part of one.
type Tx struct {
	Xid uint32
	// CommitLSN is the LSN of the commit record, known from BEGIN.
	CommitLSN pglogrepl.LSN
	// EndLSN is the end of the commit record, set when Final. It is the
	// position to confirm once everything up to it is in Kafka.
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
	Events     []Event
	// Final is set on the part that ends the transaction. A Final Tx with no
	// Xid is a position marker: nothing was in flight at EndLSN.
	Final bool
	// Bytes is the sum of the events' sizes.
	Bytes int
	// Ignored are the UPDATEs of outbox rows in this transaction (or part)
	// that table.op.invalid.behavior says to skip and report.
	Ignored []IgnoredUpdate
	// Stop, when set, is input the stream cannot go on past (a message that
	// cannot be decoded, a recreated table). It travels after everything
	// decoded before it, so that the first problem in commit order is the
	// one reported; nothing follows it.
	Stop error
	// Requests are the re-emit requests and cancels the transaction made,
	// in its order; only its Final part carries them, so that they are
	// recorded once with the checkpoint that completes it.
	Requests []Request
	// Chunk, when set, makes the Tx a chunk of rows a re-emit request
	// read (Events), not a transaction: it moves no position.
	Chunk *Chunk
}

// IgnoredUpdate is an UPDATE of an outbox row that was skipped: an outbox
// row is an event, and changing it afterwards publishes nothing. The caller
// logs it at the level Behavior names.
type IgnoredUpdate struct {
	Row      Identity
	Behavior InvalidOp
}

// Marker returns a Tx that moves the position to lsn without events.
func Marker(lsn pglogrepl.LSN) *Tx { return &Tx{EndLSN: lsn, Final: true} }

// Error is bad input: a message that cannot be decoded, or an outbox row
// that cannot become a record. It names where it happened.
type Error struct {
	Event  Identity // as far as known
	Column string   // when the problem is one column
	Reason string
	Err    error
	// Unmapped says the table, not the row, is wrong for the mapping: a
	// required column is missing. Dead-letter mode does not take such rows,
	// or it would take every row of the table; only naming the one event
	// (a skip) does.
	Unmapped bool
}

// at is the identity of a message known only by its position.
func at(lsn pglogrepl.LSN) Identity { return Identity{LSN: lsn} }

func (e *Error) Error() string {
	s := e.Event.String()
	if e.Column != "" {
		s += ", column " + e.Column
	}
	s += ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// relation is what the decoder knows of a table from its Relation message.
type relation struct {
	name    string  // schema.table
	outbox  *Outbox // nil when the table is not an outbox
	columns int
	cols    []Column // of an outbox table, in tuple order
	// indexes of the outbox columns in the tuple; -1 when absent.
	id, aggType, aggID, typ, payload, trace, timestamp, version int
	payloadBytea                                                bool
	extra                                                       []extraColumn
	// err, when set, is why the table does not fit the mapping; each of its
	// rows is then a bad event carrying it.
	err *Error
	// recreated, when set, says this is not the table walstream streamed
	// before: its first row stops the stream.
	recreated *TableRecreatedError
	// msg is the Relation message of a table that is no outbox table, kept
	// until the caller says whether it is a partition of one
	// (PartitionOf); classified is set once it has.
	msg        *pglogrepl.RelationMessage
	classified bool
	// unattached, when set, says the relation is no outbox table nor a
	// partition of one now but fits outbox's mapping and may have been its
	// partition when its rows were written (Unattached): each of its rows
	// is an event of outbox, under the relation's own name, and bad.
	unattached *UnattachedError
	// signal is set on Debezium's signal table.
	signal bool
}

// extraColumn is an additional field the table has.
type extraColumn struct {
	Additional
	index int
}

// Decoder holds the relation cache and the open transaction. It is used
// from one goroutine.
type Decoder struct {
	cfg       Config
	relations map[uint32]*relation
	oids      map[string]uint32 // outbox table → the OID its rows have come with
	// catalogs are outbox tables' catalogs given by SetCatalog, by table
	// name, over their Outbox.Catalog.
	catalogs map[string]map[string]Catalog

	tx *Tx // open transaction, nil between transactions
	// events is how many events the last transaction closed had in its
	// last part: the next one is likely as large, and its events are made
	// that large at once instead of grown by doubling (at 10,000 rows a
	// second in ten-row transactions, four copies of each transaction's
	// events so far).
	events  int
	skipTx  bool
	ordinal uint64
	vals    []value // reused by every INSERT; events keep only the bytes
	skipped uint64
	// requests are those of the open transaction, for its last part.
	requests []Request
}

// New returns a decoder that drops every event cfg.Skip says to.
func New(cfg Config) *Decoder {
	if cfg.Messages == nil && len(cfg.Outboxes) > 0 {
		cfg.Messages = cfg.Outboxes[0]
	}
	if cfg.Skip == nil {
		cfg.Skip = func(pglogrepl.LSN, uint64) bool { return false }
	}
	return &Decoder{cfg: cfg, relations: make(map[uint32]*relation), oids: make(map[string]uint32)}
}

// Skipped counts the replayed events dropped so far.
func (d *Decoder) Skipped() uint64 { return d.skipped }

// InTx reports whether a transaction is open: its BEGIN was decoded and its
// COMMIT not yet.
func (d *Decoder) InTx() bool { return d.tx != nil }

// Decode consumes one pgoutput message that started at walStart. It returns
// a Tx when a transaction ends or a part fills up, and nil otherwise. data
// is not retained.
func (d *Decoder) Decode(walStart pglogrepl.LSN, data []byte) (*Tx, error) {
	if len(data) == 0 {
		return nil, &Error{Event: at(walStart), Reason: "empty pgoutput message"}
	}
	switch pglogrepl.MessageType(data[0]) {
	case pglogrepl.MessageTypeBegin:
		return nil, d.begin(walStart, data)
	case pglogrepl.MessageTypeCommit:
		return d.commit(walStart, data)
	case pglogrepl.MessageTypeRelation:
		return nil, d.relation(walStart, data)
	case pglogrepl.MessageTypeInsert:
		return d.insert(walStart, data)
	case pglogrepl.MessageTypeUpdate:
		return nil, d.update(walStart, data)
	case pglogrepl.MessageTypeDelete, pglogrepl.MessageTypeTruncate:
		// The outbox is append-only to walstream: a DELETE never retracts a
		// published event, and a row inserted and deleted in one transaction
		// is still published.
		return nil, d.requireTx(walStart, data[0])
	case pglogrepl.MessageTypeType, pglogrepl.MessageTypeOrigin:
		return nil, nil
	case pglogrepl.MessageTypeMessage:
		return d.message(walStart, data)
	case pglogrepl.MessageTypeStreamStart, pglogrepl.MessageTypeStreamStop, pglogrepl.MessageTypeStreamCommit, pglogrepl.MessageTypeStreamAbort:
		// Streams takes these before the decoder sees them.
		return nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("pgoutput message %q of streaming of in-progress transactions, which was not asked for", data[0])}
	default:
		return nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("unexpected pgoutput message type %q", data[0])}
	}
}

func (d *Decoder) requireTx(walStart pglogrepl.LSN, typ byte) error {
	if d.tx == nil {
		return &Error{Event: at(walStart), Reason: fmt.Sprintf("pgoutput message %q outside a transaction", typ)}
	}
	return nil
}

func (d *Decoder) begin(walStart pglogrepl.LSN, data []byte) error {
	if d.tx != nil {
		return &Error{Event: at(walStart), Reason: fmt.Sprintf("BEGIN inside transaction %d", d.tx.Xid)}
	}
	var m pglogrepl.BeginMessage
	if err := m.Decode(data[1:]); err != nil {
		return &Error{Event: at(walStart), Reason: "decoding BEGIN", Err: err}
	}
	d.open(m.Xid, m.FinalLSN, m.CommitTime)
	return nil
}

// open opens the transaction that commits at commitLSN.
func (d *Decoder) open(xid uint32, commitLSN pglogrepl.LSN, commitTime time.Time) {
	d.tx = &Tx{Xid: xid, CommitLSN: commitLSN, CommitTime: commitTime}
	if n := min(d.events, maxPresized); n > 0 {
		d.tx.Events = make([]Event, 0, n)
	}
	d.skipTx = d.cfg.Skip(commitLSN, math.MaxUint64)
	d.ordinal = 0
	d.requests = nil
}

func (d *Decoder) commit(walStart pglogrepl.LSN, data []byte) (*Tx, error) {
	if d.tx == nil {
		return nil, &Error{Event: at(walStart), Reason: "COMMIT outside a transaction"}
	}
	var m pglogrepl.CommitMessage
	if err := m.Decode(data[1:]); err != nil {
		return nil, &Error{Event: at(walStart), Reason: "decoding COMMIT", Err: err}
	}
	if m.CommitLSN != d.tx.CommitLSN {
		return nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("COMMIT at %s does not match BEGIN's final LSN %s", m.CommitLSN, d.tx.CommitLSN)}
	}
	if m.TransactionEndLSN <= m.CommitLSN {
		return nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("COMMIT ends at %s, not after its start %s", m.TransactionEndLSN, m.CommitLSN)}
	}
	return d.close(m.TransactionEndLSN), nil
}

// close ends the open transaction at endLSN and returns its last part,
// nil when it is a replay Skip drops whole.
func (d *Decoder) close(endLSN pglogrepl.LSN) *Tx {
	tx := d.tx
	d.tx = nil
	d.events = len(tx.Events)
	tx.EndLSN = endLSN
	if d.skipTx {
		d.skipped += d.ordinal
		if d.cfg.Replayed != nil {
			d.cfg.Replayed(tx, d.ordinal)
		}
		return nil
	}
	tx.Final = true
	tx.Requests, d.requests = d.requests, nil
	return tx
}

// relation decodes a Relation message with pglogrepl, which indexes its
// input without bounds checks: a truncated message panics inside it, so
// that panic becomes an error naming the LSN.
func (d *Decoder) relation(walStart pglogrepl.LSN, data []byte) (err error) {
	var m pglogrepl.RelationMessage
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = &Error{Event: at(walStart), Reason: "truncated Relation message", Err: fmt.Errorf("%v", r)}
			}
		}()
		err = m.Decode(data[1:])
	}()
	if err != nil {
		var de *Error
		if errors.As(err, &de) {
			return err
		}
		return &Error{Event: at(walStart), Reason: "decoding Relation message", Err: err}
	}
	rel := &relation{name: m.Namespace + "." + m.RelationName, columns: len(m.Columns)}
	d.relations[m.RelationID] = rel
	for _, o := range d.cfg.Outboxes {
		if m.Namespace == o.Schema && m.RelationName == o.Table {
			rel.outbox = o
		}
	}
	if rel.outbox == nil {
		rel.msg = &m
		rel.signal = d.cfg.SignalTable != "" && rel.name == d.cfg.SignalTable
		rel.classified = rel.signal
		return nil
	}
	// Postgres sends a Relation message with WAL position 0/0, just before
	// the table's first row in the session: the row names the position.
	rel.recreated = d.sameTable(rel.name, m.RelationID)
	// A table that does not fit the mapping is not an error yet: its rows
	// become bad events that name themselves, in commit order.
	if err := rel.mapColumns(walStart, &m, d.catalog(rel.outbox)); err != nil {
		rel.err = err
	}
	return nil
}

// Unclassified returns the relation of an INSERT or UPDATE into a table
// that is no outbox table and that PartitionOf was not told of since its
// Relation message: a partition of an outbox table, whose rows a
// publication without publish_via_partition_root sends under the
// partition's name, or another table of a publication wider than the
// outbox. name is schema.table.
func (d *Decoder) Unclassified(data []byte) (relID uint32, name string, ok bool) {
	if len(data) < 5 || (data[0] != byte(pglogrepl.MessageTypeInsert) && data[0] != byte(pglogrepl.MessageTypeUpdate)) {
		return 0, "", false
	}
	relID = binary.BigEndian.Uint32(data[1:])
	rel := d.relations[relID]
	if rel == nil || rel.outbox != nil || rel.classified {
		return 0, "", false
	}
	return relID, rel.name, true
}

// PartitionOf says whether relation relID, which Unclassified returned,
// is a partition of outbox table o; nil: of none. A partition's rows are
// o's rows, mapped by column name as o's own are, and become events of o
// exactly as a publication with publish_via_partition_root would have
// sent them, under o's name. Its OID is not o's, and no recreation of o is
// read into it.
func (d *Decoder) PartitionOf(relID uint32, o *Outbox) {
	rel := d.relations[relID]
	if rel == nil || rel.outbox != nil {
		return
	}
	rel.classified = true
	if o == nil || rel.msg == nil {
		return
	}
	rel.outbox, rel.name = o, o.Name()
	if err := rel.mapColumns(0, rel.msg, d.catalog(o)); err != nil {
		rel.err = err
	}
	rel.msg = nil
}

// Unattached says that relation relID, which Unclassified returned, is no
// partition of an outbox table now, but may have been one when its rows
// were written: the catalog no longer has it (dropped is set), or the
// publication no longer publishes it. Postgres sent its rows under its
// own name, as a publication without publish_via_partition_root sends a
// partition's, and the catalog can no longer say whose rows they are. It
// returns the first outbox table whose mapping the relation's columns
// fit: each of its rows is then decoded as that table's, under the
// relation's name, as a bad event saying so, so that it is stopped at or
// dead-lettered in commit order and never dropped. Nil when its columns
// fit no outbox table's mapping: its rows could never have become events,
// and are ignored as another table's.
func (d *Decoder) Unattached(relID uint32, dropped bool) *Outbox {
	rel := d.relations[relID]
	if rel == nil || rel.outbox != nil || rel.msg == nil {
		return nil
	}
	rel.classified = true
	for _, o := range d.cfg.Outboxes {
		fit := &relation{name: rel.name, columns: rel.columns, outbox: o, classified: true}
		if fit.mapColumns(0, rel.msg, d.catalog(o)) != nil {
			continue
		}
		fit.unattached = &UnattachedError{Relation: rel.name, OID: relID, Table: o.Name(), Dropped: dropped}
		d.relations[relID] = fit
		return o
	}
	rel.msg = nil
	return nil
}

// UnattachedError is a row of a relation that fits an outbox table's
// mapping and may have been its partition when the row was written, but
// that the catalog no longer shows as one (Unattached).
type UnattachedError struct {
	Relation string // schema.table, as the Relation message named it
	OID      uint32
	Table    string // the outbox table whose mapping it fits
	// Dropped says the catalog no longer has the relation; otherwise the
	// publication no longer publishes it.
	Dropped bool
}

func (e *UnattachedError) Error() string {
	sent := fmt.Sprintf("its columns fit outbox table %s's mapping, and the publication sent this row under the relation's own name, "+
		"as it sends a partition's when publish_via_partition_root is off", e.Table)
	if e.Dropped {
		return fmt.Sprintf("relation %s (OID %d) was dropped after this row was written; %s: the catalog can no longer tell whether it was a partition of %s. "+
			"Dead-letter its rows, or name each to skip, and restart (see docs/busy-primaries.md, Partitioned outbox tables)", e.Relation, e.OID, sent, e.Table)
	}
	return fmt.Sprintf("relation %s (OID %d) is no partition of %s now and not in the publication; %s: it was detached, or removed from the publication, after this row was written. "+
		"If it was a partition of %s, attach it again (ALTER TABLE %s ATTACH PARTITION %s FOR VALUES ...) and restart: its rows are then published as %s's; "+
		"otherwise dead-letter its rows, or name each to skip (see docs/busy-primaries.md, Partitioned outbox tables)",
		e.Relation, e.OID, e.Table, sent, e.Table, e.Table, e.Relation, e.Table)
}

// sameTable stops at an outbox table that comes with another OID than it
// had: it was dropped and created again, and the rows committed before it
// was added to the publication again are not in the stream.
func (d *Decoder) sameTable(name string, oid uint32) *TableRecreatedError {
	want, known := d.cfg.OIDs[name]
	seen, seenBefore := d.oids[name]
	switch {
	case d.cfg.Recreated[name], known && oid == want, !known && (!seenBefore || oid == seen):
	default:
		old := want
		if seenBefore {
			old = seen
		}
		return &TableRecreatedError{Table: name, OldOID: old, NewOID: oid}
	}
	d.oids[name] = oid
	return nil
}

// recreatedAt stops at the first row of a recreated table, lsn.
func recreatedAt(rel *relation, lsn pglogrepl.LSN) error {
	if rel.recreated == nil {
		return nil
	}
	e := *rel.recreated
	e.LSN = lsn
	return &Error{Event: Identity{LSN: lsn, Table: rel.name}, Reason: "not the table streamed before", Err: &e}
}

// TableRecreatedError is an outbox table that is not the one walstream
// streamed before: it was dropped and created again. Postgres sends a
// table's rows only once it is in the publication, so rows committed
// between the CREATE TABLE and the ALTER PUBLICATION ... ADD TABLE, when
// those were separate transactions, are missing from the stream.
type TableRecreatedError struct {
	Table          string
	OldOID, NewOID uint32
	// LSN is where the new table first showed in the stream (its first
	// row), or zero when it was found in the catalog.
	LSN pglogrepl.LSN
	// Since names where the old table was last known to be in use, when
	// found at startup (the checkpoint).
	Since string
}

func (e *TableRecreatedError) Error() string {
	where := "in the stream at LSN " + e.LSN.String()
	if e.LSN == 0 {
		where = "in the catalog at startup, after checkpoint " + e.Since
	}
	return fmt.Sprintf("table %s was dropped and recreated: OID %d, now %d, found %s; "+
		"rows committed to the new table before it was added to the publication were never sent by Postgres. "+
		"To recover: find those rows (SELECT them from %s by id or time) and insert them again, or accept the loss; "+
		"then accept the new table (OID %d) and restart. To avoid this, create the table and add it to the publication "+
		"in one transaction, or use a publication FOR TABLES IN SCHEMA (see docs/outbox.md, Changes to the outbox table)",
		e.Table, e.OldOID, e.NewOID, where, e.Table, e.NewOID)
}

// mapColumns finds the outbox's columns in the table, and refuses a table
// that lacks one or has an additional column of a type it cannot encode.
func (rel *relation) mapColumns(walStart pglogrepl.LSN, m *pglogrepl.RelationMessage, catalog map[string]Catalog) *Error {
	find := func(name string) int {
		for i, c := range m.Columns {
			if name != "" && c.Name == name {
				return i
			}
		}
		return -1
	}
	missing := func(column, reason string) *Error {
		return &Error{Event: Identity{LSN: walStart, Table: rel.name}, Column: column, Reason: reason, Unmapped: true}
	}
	cols := rel.outbox.Columns
	for _, c := range []struct {
		dst  *int
		name string
	}{{&rel.id, cols.ID}, {&rel.aggType, cols.AggregateType}, {&rel.aggID, cols.AggregateID}, {&rel.payload, cols.Payload}} {
		if *c.dst = find(c.name); *c.dst < 0 {
			return missing(c.name, "outbox column is missing")
		}
	}
	rel.cols = make([]Column, len(m.Columns))
	for i, c := range m.Columns {
		info := catalog[c.Name]
		rel.cols[i] = Column{Name: c.Name, Type: c.DataType, TypMod: c.TypeModifier, NotNull: info.NotNull, Labels: info.Labels}
		if d, ok := ParseDefault(rel.cols[i], info.Default); ok {
			rel.cols[i].Default = d
		}
	}
	if err := keyable(&rel.cols[rel.aggID]); err != nil {
		return missing(cols.AggregateID, "the record key (table.field.event.key) cannot be encoded: "+err.Error())
	}
	rel.typ = find(cols.Type)
	rel.trace = -1
	if cols.Tracing != "" {
		if rel.trace = find(cols.Tracing); rel.trace < 0 {
			return missing(cols.Tracing, "tracing column (tracing.span.context.field) is missing")
		}
	}
	rel.payloadBytea = m.Columns[rel.payload].DataType == TypeBytea
	rel.timestamp = -1
	if cols.Timestamp != "" {
		if rel.timestamp = find(cols.Timestamp); rel.timestamp < 0 {
			return missing(cols.Timestamp, "timestamp column (table.field.event.timestamp) is missing")
		}
		if t := m.Columns[rel.timestamp].DataType; t != TypeTimestamp && t != TypeTimestampTZ {
			return missing(cols.Timestamp, fmt.Sprintf("timestamp column (table.field.event.timestamp) has type OID %d; it must be timestamp or timestamptz", t))
		}
	}
	rel.version = -1
	if cols.SchemaVersion != "" {
		if rel.version = find(cols.SchemaVersion); rel.version < 0 {
			return missing(cols.SchemaVersion, "schema version column (table.field.event.schema.version) is missing")
		}
		// Debezium reads it with Struct.getInt32, and only for an envelope.
		if t := m.Columns[rel.version].DataType; t != TypeInt4 && rel.outbox.HasEnvelope() {
			return missing(cols.SchemaVersion, fmt.Sprintf("schema version column (table.field.event.schema.version) has type OID %d; it must be integer", t))
		}
	}
	for _, a := range rel.outbox.Additional {
		i := find(a.Column)
		if i < 0 {
			if rel.outbox.AdditionalOptional {
				continue
			}
			return missing(a.Column, "additional column (table.fields.additional.placement) is missing; set table.field.additional.missing=ignore to skip it")
		}
		t := m.Columns[i].DataType
		if a.Placement == PlacePartition && t != TypeInt2 && t != TypeInt4 && t != TypeInt8 {
			return missing(a.Column, fmt.Sprintf("additional column placed in the partition has type OID %d; it must be smallint, integer or bigint", t))
		}
		if err := keyable(&rel.cols[i]); err != nil {
			return missing(a.Column, "additional column cannot be encoded: "+err.Error())
		}
		rel.extra = append(rel.extra, extraColumn{Additional: a, index: i})
	}
	return nil
}

// update applies table.op.invalid.behavior to an UPDATE: an outbox row is
// an event, and changing it afterwards publishes nothing.
func (d *Decoder) update(walStart pglogrepl.LSN, data []byte) error {
	if err := d.requireTx(walStart, data[0]); err != nil {
		return err
	}
	if len(data) < 5 {
		return &Error{Event: at(walStart), Reason: fmt.Sprintf("UPDATE message is %d bytes, want at least 5", len(data))}
	}
	relID := binary.BigEndian.Uint32(data[1:])
	rel := d.relations[relID]
	if rel == nil {
		return &Error{Event: at(walStart), Reason: fmt.Sprintf("UPDATE of relation %d before its Relation message", relID)}
	}
	if rel.outbox == nil {
		return nil
	}
	if err := recreatedAt(rel, walStart); err != nil {
		return err
	}
	if d.skipTx {
		return nil
	}
	row := Identity{CommitLSN: d.tx.CommitLSN, LSN: walStart, Table: rel.name, ID: updatedID(rel, data[5:])}
	if rel.outbox.OnUpdate == OpFatal {
		return &Error{Event: row, Reason: "UPDATE of an outbox row: it is not published again (table.op.invalid.behavior)"}
	}
	d.tx.Ignored = append(d.tx.Ignored, IgnoredUpdate{Row: row, Behavior: rel.outbox.OnUpdate})
	return nil
}

// updatedID is the event id in an UPDATE's new tuple, or nil when the
// message does not show it: the id names the row in the log line.
func updatedID(rel *relation, b []byte) []byte {
	for len(b) > 3 {
		kind := b[0]
		n := int(binary.BigEndian.Uint16(b[1:]))
		vals, rest, err := splitTuple(nil, b[3:], n)
		if err != nil {
			return nil
		}
		if kind == 'N' {
			if id := rel.idText(vals); id != nil {
				return append([]byte(nil), id...) // b is the connection's buffer
			}
			return nil
		}
		b = rest // 'K' or 'O': the old tuple comes first
	}
	return nil
}

// add appends an event to the open transaction. A full part is handed on
// only when the next event arrives, not when it fills up: the part that
// ends a transaction then always has events, so the Kafka transaction that
// carries it also carries the whole-transaction checkpoint, whatever the
// transaction's size relative to the limits. At most one part plus one
// event is buffered.
func (d *Decoder) add(ev Event) *Tx {
	var part *Tx
	if len(d.tx.Events) >= d.cfg.MaxPartEvents || d.tx.Bytes >= d.cfg.MaxPartBytes {
		part = d.tx
		// The next part is likely as large. Made whole at once, its events
		// are not copied at each growth: in the drain of one transaction of
		// 500,000 rows those copies were a fifth of walstream's CPU.
		d.tx = &Tx{Xid: part.Xid, CommitLSN: part.CommitLSN, CommitTime: part.CommitTime, Events: make([]Event, 0, len(part.Events))}
	}
	d.tx.Events = append(d.tx.Events, ev)
	d.tx.Bytes += ev.Size()
	return part
}

// maxPresized bounds the events a transaction is made for before they
// come: a transaction of a few rows after one of thousands should not hold
// room for thousands.
const maxPresized = 64

// replayed counts the next outbox event of the open transaction and
// reports whether it is a replay to drop.
func (d *Decoder) replayed() bool {
	d.ordinal++
	if d.skipTx {
		return true
	}
	if d.cfg.Skip(d.tx.CommitLSN, d.ordinal) {
		d.skipped++
		return true
	}
	return false
}

// hand adds a mapped event to the open transaction, a bad one too: the
// publisher decides whether to dead-letter it or stop there, in commit
// order.
func (d *Decoder) hand(ev Event) (*Tx, error) {
	return d.add(ev), nil
}

func (d *Decoder) insert(walStart pglogrepl.LSN, data []byte) (*Tx, error) {
	if d.tx == nil {
		return nil, &Error{Event: at(walStart), Reason: "INSERT outside a transaction"}
	}
	// 'I', relation id (4), 'N', column count (2)
	if len(data) < 8 {
		return nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("INSERT message is %d bytes, want at least 8", len(data))}
	}
	relID := binary.BigEndian.Uint32(data[1:])
	rel := d.relations[relID]
	if rel == nil {
		return nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("INSERT into relation %d before its Relation message", relID)}
	}
	if rel.signal {
		return nil, d.signal(rel, walStart, data)
	}
	if rel.outbox == nil {
		return nil, nil
	}
	if err := recreatedAt(rel, walStart); err != nil {
		return nil, err
	}
	if d.replayed() {
		return nil, nil
	}
	if data[5] != 'N' {
		return nil, &Error{Event: Identity{LSN: walStart, Table: rel.name}, Reason: fmt.Sprintf("INSERT tuple marker %q, want 'N'", data[5])}
	}
	// One copy per row: the replication connection reuses its read buffer,
	// and every column of the event then aliases this copy.
	buf := append([]byte(nil), data[8:]...)
	vals, rest, err := splitTuple(d.vals[:0], buf, int(binary.BigEndian.Uint16(data[6:])))
	d.vals = vals
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d bytes after the last column", len(rest))
	}
	if err != nil {
		return nil, &Error{Event: Identity{LSN: walStart, Table: rel.name}, Reason: "decoding INSERT tuple", Err: err}
	}
	if len(vals) != rel.columns {
		return nil, &Error{Event: Identity{LSN: walStart, Table: rel.name}, Reason: fmt.Sprintf("INSERT has %d columns, the Relation message %d", len(vals), rel.columns)}
	}
	if rel.err != nil {
		return d.hand(d.unmapped(rel, walStart, vals))
	}
	ev := d.event(rel, walStart, vals)
	if rel.unattached != nil {
		ev.Bad = &Error{Event: ev.Identity, Reason: "row of a relation that is no partition of an outbox table now", Err: rel.unattached}
	}
	return d.hand(ev)
}

// idText is the event id in a row's values, or nil: NULL, unchanged, or a
// table without the id column (id -1) or with a row shorter than it.
func (rel *relation) idText(vals []value) []byte {
	if rel.id >= 0 && rel.id < len(vals) && vals[rel.id].kind == 't' {
		return vals[rel.id].data
	}
	return nil
}

// unmapped is a row of a table that does not fit the mapping, as a bad
// event naming the row and what the table lacks.
func (d *Decoder) unmapped(rel *relation, walStart pglogrepl.LSN, vals []value) Event {
	ev := Event{Identity: d.identity(walStart, rel.name, rel.idText(vals)), Source: rel.outbox}
	bad := *rel.err
	bad.Event = ev.Identity
	ev.Bad = &bad
	return ev
}

// event maps an outbox row to an event. A row that cannot become a record
// still yields an event, with every column it has and Bad saying why.
//
// Columns Debezium's router reads with Kafka Connect's Struct.get (event
// id, key, payload, additional fields in headers and the envelope) take the
// column's default in place of a NULL; those it reads with a typed getter
// (route-by, partition, timestamp: getString, getInt32, getInt64) do not.
func (d *Decoder) event(rel *relation, walStart pglogrepl.LSN, vals []value) Event {
	col := func(i int) []byte {
		// Debezium's value resolver has no case for the name type: it
		// reads every name column as NULL.
		if i < 0 || vals[i].kind != 't' || rel.cols[i].Type == TypeName {
			return nil
		}
		return vals[i].data
	}
	get := func(i int) []byte { // Struct.get
		if v := col(i); v != nil || i < 0 {
			return v
		}
		return rel.cols[i].Default
	}
	o := rel.outbox
	ev := Event{Identity: d.identity(walStart, rel.name, get(rel.id)), Source: o, AggregateType: col(rel.aggType),
		AggregateID: get(rel.aggID), Type: col(rel.typ), Payload: get(rel.payload), PayloadBinary: rel.payloadBytea,
		IDColumn: &rel.cols[rel.id], KeyColumn: &rel.cols[rel.aggID], PayloadColumn: &rel.cols[rel.payload], TraceParent: traceParent(col(rel.trace))}
	bad := func(column, reason string, err error) Event {
		ev.Bad = &Error{Event: ev.Identity, Column: column, Reason: reason, Err: err}
		return ev
	}
	if column, reason := ev.check(o.Columns, "NULL"); reason != "" {
		return bad(column, reason, nil)
	}
	// EventRouterDelegate: payload == null || payload.toString().trim().isEmpty().
	// A bytea payload's toString is never empty.
	if o.TombstoneOnEmptyPayload && (ev.Payload == nil || !rel.payloadBytea && blank(ev.Payload)) {
		ev.Payload, ev.Tombstone = nil, true
	}
	if rel.payloadBytea && ev.Payload != nil {
		raw, err := unhexBytea(ev.Payload)
		if err != nil {
			return bad(o.Columns.Payload, "decoding bytea", err)
		}
		ev.Payload = raw
	} else if d.cfg.JSONText && !utf8.Valid(ev.Payload) {
		return bad(o.Columns.Payload, "payload is not valid UTF-8: the JSON converter cannot write it as JSON (is the database SQL_ASCII?)", nil)
	}
	ev.SchemaVersion = col(rel.version)
	if ts := col(rel.timestamp); ts != nil {
		t, err := ParseTimestamp(ts)
		if err != nil {
			return bad(o.Columns.Timestamp, "reading the event timestamp", err)
		}
		if reason := recordTime(t); reason != "" {
			return bad(o.Columns.Timestamp, fmt.Sprintf("event timestamp %s %s", ts, reason), nil)
		}
		ev.Timestamp = t
	}
	for _, x := range rel.extra {
		if x.Placement == PlacePartition {
			v := col(x.index)
			if v == nil {
				continue // no partition given: the key picks one
			}
			p, err := strconv.ParseInt(string(v), 10, 32)
			if err != nil || p < 0 {
				return bad(x.Column, fmt.Sprintf("partition %q is not a partition number", v), err)
			}
			ev.Partition, ev.Partitioned = int32(p), true
			continue
		}
		v := get(x.index)
		if d.cfg.JSONText && x.Placement == PlaceEnvelope && !utf8.Valid(v) {
			return bad(x.Column, "envelope field is not valid UTF-8: the JSON converter cannot write it as JSON", nil)
		}
		ev.Fields = append(ev.Fields, Field{Name: x.Alias, Placement: x.Placement, Column: &rel.cols[x.index], Value: v})
	}
	return ev
}

// lastRecordTime is the last time a Kafka client written in Go can give a
// record: franz-go takes its milliseconds from time.UnixNano.
var lastRecordTime = time.Unix(0, math.MaxInt64)

// recordTime says why t cannot be a record's timestamp, or "". Kafka
// Connect refuses one below -1 ms (ConnectUtils.checkAndConvertTimestamp),
// and Debezium stops at it.
func recordTime(t time.Time) string {
	switch {
	case t.UnixMilli() < -1:
		return "is before 1970: Kafka Connect refuses a record timestamp before the epoch, and Debezium stops at it"
	case t.After(lastRecordTime):
		return "is after " + lastRecordTime.UTC().Format(time.DateOnly) + ", past the record timestamps the Kafka client can write"
	}
	return ""
}

// identity is the identity of the open transaction's current event.
func (d *Decoder) identity(lsn pglogrepl.LSN, table string, id []byte) Identity {
	return Identity{CommitLSN: d.tx.CommitLSN, Ordinal: d.ordinal, LSN: lsn, Table: table, ID: id}
}

// check applies the rules every outbox event obeys, from a row or from a
// logical message, and returns the field that breaks one and why. names
// are the source's names for the fields and absent is how it says a value
// is not there.
func (ev *Event) check(names Columns, absent string) (field, reason string) {
	switch {
	case !utf8.Valid(ev.ID):
		return names.ID, "event id is not valid UTF-8"
	case ev.AggregateType == nil:
		// RegexRouter throws on a null topic: Debezium's task stops.
		return names.AggregateType, "aggregate type is " + absent + ": no topic can be derived"
	case !utf8.Valid(ev.AggregateID):
		return names.AggregateID, "aggregate id is not valid UTF-8"
	}
	// A NULL event id, key or payload is not bad: Debezium publishes a
	// header without value, no key (or the key converter's null), and a
	// null value.
	return "", ""
}

// traceParent takes the W3C traceparent from a tracing column: either the
// traceparent itself, or Debezium's tracingspancontext, a properties text
// with a traceparent= line.
func traceParent(col []byte) []byte {
	if col == nil {
		return nil
	}
	for _, line := range bytes.Split(col, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if v, ok := bytes.CutPrefix(line, []byte("traceparent=")); ok {
			return v
		}
		if bytes.HasPrefix(line, []byte("00-")) {
			return line
		}
	}
	return nil
}

type value struct {
	kind byte // 'n' NULL, 'u' unchanged TOAST, 't' text
	data []byte
}

// splitTuple appends the n column values of pgoutput TupleData to vals,
// aliasing buf, and returns the bytes after them.
func splitTuple(vals []value, buf []byte, n int) ([]value, []byte, error) {
	vals = slices.Grow(vals, n)[:n]
	for i := range vals {
		if len(buf) < 1 {
			return nil, nil, fmt.Errorf("column %d: tuple ends early", i)
		}
		vals[i] = value{kind: buf[0]} // no data left over from the last row
		buf = buf[1:]
		switch vals[i].kind {
		case 'n', 'u':
		case 't', 'b':
			if len(buf) < 4 {
				return nil, nil, fmt.Errorf("column %d: tuple ends in the length", i)
			}
			l := binary.BigEndian.Uint32(buf)
			buf = buf[4:]
			if uint64(l) > uint64(len(buf)) {
				return nil, nil, fmt.Errorf("column %d: length %d exceeds the %d bytes left", i, l, len(buf))
			}
			vals[i].data, buf = buf[:l:l], buf[l:]
			vals[i].kind = 't' // walstream never asks for binary; both carry the value
		default:
			return nil, nil, fmt.Errorf("column %d: unknown kind %q", i, vals[i].kind)
		}
	}
	return vals, buf, nil
}

// unhexBytea decodes bytea's text form, `\x` followed by hex digits, in place.
func unhexBytea(b []byte) ([]byte, error) {
	if len(b) < 2 || b[0] != '\\' || b[1] != 'x' {
		return nil, errors.New(`bytea is not in hex format (bytea_output must be 'hex')`)
	}
	n, err := hex.Decode(b[2:], b[2:])
	if err != nil {
		return nil, err
	}
	return b[2 : 2+n], nil
}

// CheckTable reports whether a table with these columns fits o's mapping:
// the check each Relation message gets, for a table read from the catalog
// before any of its rows arrives, so that an idle outbox with a broken
// mapping is found at once.
// Only the columns' names, types, modifiers and enum labels are read.
func CheckTable(o *Outbox, cols []Column) error {
	m := pglogrepl.RelationMessage{Namespace: o.Schema, RelationName: o.Table}
	catalog := make(map[string]Catalog, len(cols))
	for _, c := range cols {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: c.Name, DataType: c.Type, TypeModifier: c.TypMod})
		catalog[c.Name] = Catalog{NotNull: c.NotNull, Labels: c.Labels}
	}
	rel := &relation{name: o.Name(), outbox: o, columns: len(cols)}
	if err := rel.mapColumns(0, &m, catalog); err != nil {
		return err
	}
	return nil
}
