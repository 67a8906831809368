package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
)

// queue takes decoded transactions for the producer. TryPut takes tx only
// if it can at once; Put either takes tx or returns ctx's error having
// taken nothing.
type queue interface {
	TryPut(tx *decode.Tx) bool
	Put(ctx context.Context, tx *decode.Tx) error
}

// receiver hears of each transaction (or part) with events handed on, for
// the lag metrics.
type receiver interface {
	Received(commitLSN pglogrepl.LSN, commitTime time.Time)
}

// witness checks what the server sends against what the resume
// checkpoint says was published (checkpoint.Tracker.Sent).
type witness interface {
	Sent(s checkpoint.Sent) error
	DecodedTo(lsn pglogrepl.LSN) error
}

// markerInterval rate-limits position markers sent while idle.
const markerInterval = time.Second

// feed stands between the replication stream and the producer: it decodes
// the slot's WAL, reports what decode skipped or ignored, turns idle
// keepalives into position markers, and puts transactions on the queue.
// It is used from the stream's goroutine only.
type feed struct {
	dec      *decode.Decoder
	out      queue
	received receiver
	witness  witness // nil checks nothing
	log      *slog.Logger
	skipped  prometheus.Counter
	// hook, if not nil, is called with "mid-transaction" after each message
	// decoded inside an open transaction, and with "mid-stream" after each
	// message of a stream block, so that tests can crash there.
	hook func(point string)

	// catalog, if not nil, reads an outbox table's catalog anew when its
	// Relation message comes again in the session (after ALTER TABLE), as
	// Debezium rereads a table's schema; the first one of each table is
	// covered by the catalog read at the session's start. It returns
	// errRelationGone when the catalog no longer has the relation (oid).
	catalog   func(o *decode.Outbox, oid uint32) (map[string]decode.Catalog, error)
	relations map[string]bool // outbox tables whose Relation message came

	// relationOf, if not nil, says what a relation whose rows came under
	// its own name, no outbox table's, is now to the outbox tables and the
	// publication.
	relationOf func(oid uint32) (relationState, error)

	// streams, when streaming of in-progress transactions is on, keeps
	// each streamed transaction's messages until it ends; replay is a
	// committed one being decoded, part by part, as HandOn hands the parts
	// on. failed is an error reading a spool back, which ends the session
	// and is returned to every later call: a transaction cannot be decoded
	// in part and then skipped.
	streams *decode.Streams
	replay  *decode.Replay
	failed  error

	ready        *decode.Tx // decoded, not yet on the queue
	lastMarker   pglogrepl.LSN
	lastMarkerAt time.Time
	counted      uint64 // dec.Skipped() already counted
	replaying    bool   // skipping replays the checkpoint covers
	// stopped is set once input that cannot be decoded was handed on as a
	// stop: the producer fails there, after everything before it, and
	// nothing after it is decoded or marked.
	stopped bool
	// rewritten is the witness's verdict on a transaction the server sent
	// (sent), taken up by hand.
	rewritten error
}

var _ replication.Consumer = (*feed)(nil)

// The session wires these in.
var (
	_ queue                 = (*publish.Queue)(nil)
	_ receiver              = (*checkpoint.Tracker)(nil)
	_ witness               = (*checkpoint.Tracker)(nil)
	_ replication.Confirmer = (*checkpoint.Tracker)(nil)
)

// WAL decodes one message; a finished transaction or part is ready. The
// commit of a streamed transaction starts decoding it from its spool, up
// to its first part; HandOn decodes the rest as it hands the parts on.
func (f *feed) WAL(walStart pglogrepl.LSN, data []byte) (replication.Ready, error) {
	if f.failed != nil {
		return replication.Ready{}, f.failed
	}
	if f.stopped {
		return replication.Ready{}, nil
	}
	if f.streams != nil {
		handled, r, err := f.streams.Take(walStart, data)
		var de *decode.Error
		switch {
		case errors.As(err, &de):
			return f.stop(err), nil
		case err != nil:
			f.failed = err
			return replication.Ready{}, err
		case r != nil:
			if err := f.dec.BeginStreamed(r.Commit); err != nil {
				_ = r.Close()
				return f.stop(err), nil
			}
			f.replay = r
			return f.advance()
		case handled:
			if f.hook != nil && f.streams.InBlock() {
				f.hook("mid-stream")
			}
			// Postgres streams a transaction in progress in blocks of
			// what outgrew logical_decoding_work_mem, each sent at once;
			// read one message at a time, a block of 1,000,000 rows cost
			// walstream more CPU than publishing them at the commit.
			return replication.Ready{Bulk: f.streams.InBlock()}, nil
		}
	}
	return f.decode(walStart, data)
}

// stop hands err on as a stop: in order, so that a bad row queued before
// it is the first problem, and nothing after it is decoded.
func (f *feed) stop(err error) replication.Ready {
	f.stopped, f.ready = true, &decode.Tx{Stop: err}
	f.endReplay()
	return replication.Ready{OK: true}
}

// decode decodes one message of a transaction sent whole, or read back
// from a streamed transaction's spool.
func (f *feed) decode(walStart pglogrepl.LSN, data []byte) (replication.Ready, error) {
	if err := f.refreshCatalog(data); err != nil {
		return replication.Ready{}, err
	}
	if err := f.classify(data); err != nil {
		return replication.Ready{}, err
	}
	tx, err := f.dec.Decode(walStart, data)
	if err != nil {
		return f.stop(err), nil
	}
	if f.hook != nil && f.dec.InTx() {
		f.hook("mid-transaction")
	}
	return f.hand(tx), nil
}

// sent shows the witness a transaction the server sent with events
// outbox events: one decoded (hand), or dropped as a replay (the
// decoder's Replayed).
func (f *feed) sent(tx *decode.Tx, events uint64) {
	if f.rewritten == nil && f.witness != nil {
		f.rewritten = f.witness.Sent(checkpoint.Sent{Xid: tx.Xid, CommitLSN: tx.CommitLSN, CommitTime: tx.CommitTime, Events: events})
	}
}

// hand makes tx, a transaction or part decoded, ready, unless the witness
// finds the server's history is not the one published: then nothing
// after the replay is handed on.
func (f *feed) hand(tx *decode.Tx) replication.Ready {
	f.countSkipped(tx)
	if tx != nil && tx.Stop == nil {
		f.sent(tx, uint64(len(tx.Events)))
	}
	if f.rewritten != nil {
		return f.stop(f.rewritten)
	}
	if tx == nil {
		return replication.Ready{}
	}
	f.logIgnored(tx.Ignored)
	var ready replication.Ready
	if len(tx.Events) > 0 {
		f.received.Received(tx.CommitLSN, tx.CommitTime)
		ready.CommitTime = tx.CommitTime
	}
	f.ready, ready.OK = tx, true
	return ready
}

// advance decodes the committed streamed transaction being replayed until
// a part is ready, or to its end, whose last part it makes ready.
func (f *feed) advance() (replication.Ready, error) {
	for f.replay != nil && !f.stopped {
		walStart, msg, ok, err := f.replay.Next()
		if err != nil {
			f.failed = err
			f.endReplay()
			return replication.Ready{}, err
		}
		if !ok {
			tx, err := f.dec.CommitStreamed(f.replay.Commit)
			f.endReplay()
			if err != nil {
				return f.stop(err), nil
			}
			return f.hand(tx), nil
		}
		ready, err := f.decode(walStart, msg)
		if err != nil || ready.OK {
			return ready, err
		}
	}
	return replication.Ready{}, nil
}

// endReplay discards the spool of the streamed transaction replayed.
func (f *feed) endReplay() {
	if f.replay == nil {
		return
	}
	if err := f.replay.Close(); err != nil {
		f.log.Warn("discarding the spool of a streamed transaction", "xid", f.replay.Commit.Xid, "err", err)
	}
	f.replay = nil
}

// close discards every spool: a new session gets the transactions in
// progress again from their start.
func (f *feed) close() {
	f.endReplay()
	if f.streams != nil {
		if err := f.streams.Close(); err != nil {
			f.log.Warn("discarding the spools of streamed transactions", "err", err)
		}
	}
}

// relationState is what the catalog says now of a relation whose rows
// came under its own name (replication.RelationState), its partition root
// the outbox table of the mapping.
type relationState struct {
	root      *decode.Outbox // the outbox table it is a partition of; nil for none
	exists    bool
	published bool
}

// classify tells the decoder, at the first row of a table that is no
// outbox table, whether it is a partition of one. Postgres sends a
// partition's rows under the partition's name when the publication lacks
// publish_via_partition_root, and decodes WAL with the publication as it
// was when the WAL was written: rows committed before the setting was
// turned on still come that way, and would be lost to walstream if it
// took them for another table's. The startup check and the slot monitor
// stop walstream on such a publication; this keeps what it had decoded.
//
// A partition detached or dropped after its rows were written is no
// partition to the catalog any more. Its rows are told from another
// table's by two things at once: the publication does not publish the
// relation now (it was dropped, detached, or removed from the publication
// since the rows were written), and its columns fit an outbox table's
// mapping. Such rows stop the stream, or go to the dead-letter topic, in
// commit order (decode.Decoder.Unattached): so do the rows still in the
// stream of a table that fits a mapping and was removed from the
// publication, a bounded number that dead-letter mode takes. Rows of a
// table the publication still publishes (FOR ALL TABLES, a schema, a
// table added to it) are another table's, and ignored; so are those of a
// table whose columns no outbox mapping fits.
func (f *feed) classify(data []byte) error {
	if f.relationOf == nil {
		return nil
	}
	oid, name, ok := f.dec.Unclassified(data)
	if !ok {
		return nil
	}
	st, err := f.relationOf(oid)
	if err != nil {
		return fmt.Errorf("looking up whether table %s (OID %d) is a partition of an outbox table: %w", name, oid, err)
	}
	switch {
	case st.root != nil:
		f.log.Warn("rows of a partitioned outbox table arrive under a partition's name (the publication did not publish via the partition root when they were written); publishing them as the table's",
			"partition", name, "oid", oid, "table", st.root.Name())
		f.dec.PartitionOf(oid, st.root)
	case !st.exists || !st.published:
		if o := f.dec.Unattached(oid, !st.exists); o != nil {
			f.log.Error("rows arrive under the name of a relation that is no partition of an outbox table now and that the publication does not publish, "+
				"although its columns fit the table's mapping: a partition detached or dropped after they were written; each is bad input",
				"relation", name, "oid", oid, "dropped", !st.exists, "table", o.Name())
			return nil
		}
		f.dec.PartitionOf(oid, nil)
	default:
		f.dec.PartitionOf(oid, nil)
	}
	return nil
}

// refreshCatalog gives the decoder an outbox table's catalog read anew when
// data is that table's Relation message for the second time or more.
func (f *feed) refreshCatalog(data []byte) error {
	if f.catalog == nil {
		return nil
	}
	o, oid, ok := f.dec.OutboxRelation(data)
	if !ok {
		return nil
	}
	if !f.relations[o.Name()] {
		if f.relations == nil {
			f.relations = make(map[string]bool)
		}
		f.relations[o.Name()] = true
		return nil
	}
	c, err := f.catalog(o, oid)
	if errors.Is(err, errRelationGone) {
		// The table was dropped, perhaps created again, after these rows
		// were written: decoding lags the catalog. Its rows still in the
		// WAL are decoded with the catalog read before; a recreated
		// table's own Relation message, with its new OID, stops the stream
		// naming the gap, and the slot monitor reports a table that stays
		// dropped.
		f.log.Warn("outbox table dropped after the rows being decoded; they keep the catalog read before", "table", o.Name(), "oid", oid)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the catalog of %s after its Relation message: %w", o.Name(), err)
	}
	f.dec.SetCatalog(o.Name(), c)
	return nil
}

// Keepalive makes a position marker ready between transactions: everything
// that commits before walEnd has been sent, so the producer may checkpoint
// that position and a quiet outbox does not pin WAL written by others.
func (f *feed) Keepalive(walEnd pglogrepl.LSN) replication.Ready {
	if f.stopped {
		return replication.Ready{}
	}
	if f.witness != nil {
		if err := f.witness.DecodedTo(walEnd); err != nil {
			return f.stop(err)
		}
	}
	if f.dec.InTx() || walEnd <= f.lastMarker || time.Since(f.lastMarkerAt) < markerInterval {
		return replication.Ready{}
	}
	f.lastMarker, f.lastMarkerAt = walEnd, time.Now()
	f.ready = decode.Marker(walEnd)
	return replication.Ready{OK: true}
}

// TryHandOn puts the ready transaction on the queue if there is room now.
// With a streamed transaction still being replayed it leaves the rest to
// HandOn, which may read its spool.
func (f *feed) TryHandOn() bool {
	if f.ready != nil {
		if !f.out.TryPut(f.ready) {
			return false
		}
		f.ready = nil
	}
	return f.replay == nil
}

// HandOn waits for room on the queue for the ready transaction and, while
// a streamed transaction is replayed, decodes and hands on its next parts
// until its last.
func (f *feed) HandOn(ctx context.Context) error {
	for {
		if f.failed != nil {
			return f.failed
		}
		if f.ready != nil {
			if err := f.out.Put(ctx, f.ready); err != nil {
				return err
			}
			f.ready = nil
		}
		if f.replay == nil {
			return nil
		}
		if _, err := f.advance(); err != nil {
			f.failed = err
			return err
		}
	}
}

// countSkipped counts replayed events the decoder dropped and logs once,
// when the replay reaches events Kafka does not have yet.
func (f *feed) countSkipped(tx *decode.Tx) {
	if n := f.dec.Skipped(); n > f.counted {
		f.skipped.Add(float64(n - f.counted))
		f.counted = n
		f.replaying = true
	}
	if f.replaying && tx != nil && len(tx.Events) > 0 {
		f.replaying = false
		f.log.Info("replay caught up with the checkpoint", "replayed_events_skipped", f.counted, "first_new_commit_lsn", tx.CommitLSN.String())
	}
}

// logIgnored logs the UPDATEs of outbox rows decode skipped, at the level
// table.op.invalid.behavior names.
func (f *feed) logIgnored(ignored []decode.IgnoredUpdate) {
	for _, u := range ignored {
		level := slog.LevelWarn
		if u.Behavior == decode.OpError {
			level = slog.LevelError
		}
		f.log.Log(context.Background(), level, "ignoring an UPDATE of an outbox row",
			"lsn", u.Row.LSN.String(), "table", u.Row.Table, "event_id", string(u.Row.ID))
	}
}
