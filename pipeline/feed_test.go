package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
)

// fakeQueue is a queue with func fields.
type fakeQueue struct {
	tryPut func(tx *decode.Tx) bool
	put    func(ctx context.Context, tx *decode.Tx) error
}

var _ queue = (*fakeQueue)(nil)

func (q *fakeQueue) TryPut(tx *decode.Tx) bool                    { return q.tryPut(tx) }
func (q *fakeQueue) Put(ctx context.Context, tx *decode.Tx) error { return q.put(ctx, tx) }

// receiverFunc is a receiver as a func.
type receiverFunc func(commitLSN pglogrepl.LSN, commitTime time.Time)

var _ receiver = receiverFunc(nil)

func (f receiverFunc) Received(commitLSN pglogrepl.LSN, commitTime time.Time) {
	f(commitLSN, commitTime)
}

// pgoutput BEGIN and COMMIT messages, as the walsender sends them.
func beginMsg(commitLSN pglogrepl.LSN, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, uint64(commitLSN))
	b = binary.BigEndian.AppendUint64(b, 0) // commit time
	return binary.BigEndian.AppendUint32(b, xid)
}

func commitMsg(commitLSN, endLSN pglogrepl.LSN) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, uint64(commitLSN))
	b = binary.BigEndian.AppendUint64(b, uint64(endLSN))
	return binary.BigEndian.AppendUint64(b, 0)
}

func TestFeed(t *testing.T) {
	var queued []*decode.Tx
	room := false
	q := &fakeQueue{
		tryPut: func(tx *decode.Tx) bool {
			if room {
				queued = append(queued, tx)
			}
			return room
		},
		put: func(_ context.Context, tx *decode.Tx) error { queued = append(queued, tx); return nil },
	}
	var hooks []string
	received := 0
	f := &feed{
		dec: decode.New(decode.Config{MaxPartEvents: 10, MaxPartBytes: 1 << 20}), out: q,
		received: receiverFunc(func(pglogrepl.LSN, time.Time) { received++ }),
		log:      slog.New(slog.DiscardHandler), skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}),
		hook: func(p string) { hooks = append(hooks, p) },
	}

	// Idle: a keepalive is a position marker, handed on once there is room.
	r := f.Keepalive(0x100)
	if !r.OK || !r.CommitTime.IsZero() {
		t.Fatalf("idle keepalive: %+v, want a marker ready", r)
	}
	if f.TryHandOn() {
		t.Fatal("TryHandOn succeeded on a full queue")
	}
	if err := f.HandOn(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(queued) != 1 || queued[0].EndLSN != 0x100 || !queued[0].Final || len(queued[0].Events) != 0 {
		t.Fatalf("queued %+v, want one marker at 0/100", queued)
	}
	// Markers are rate-limited.
	if r := f.Keepalive(0x200); r.OK {
		t.Fatal("a second marker within markerInterval")
	}

	// Inside a transaction no marker is made: the position is not whole.
	f.lastMarkerAt = time.Time{}
	if r, err := f.WAL(0x300, beginMsg(0x400, 7)); err != nil || r.OK {
		t.Fatalf("BEGIN: %+v, %v; want nothing ready", r, err)
	}
	if got, want := len(hooks), 1; got != want || hooks[0] != "mid-transaction" {
		t.Fatalf("hooks %v after BEGIN, want one mid-transaction", hooks)
	}
	if r := f.Keepalive(0x350); r.OK {
		t.Fatal("a marker inside an open transaction")
	}
	r, err := f.WAL(0x400, commitMsg(0x400, 0x450))
	if err != nil || !r.OK || !r.CommitTime.IsZero() {
		t.Fatalf("COMMIT: %+v, %v; want the transaction ready, with no events", r, err)
	}
	room = true
	if !f.TryHandOn() || len(queued) != 2 || queued[1].EndLSN != 0x450 {
		t.Fatalf("queued %+v, want the transaction ending at 0/450", queued)
	}
	if received != 0 {
		t.Fatalf("Received %d times for a transaction without events", received)
	}
}

// Input that cannot be decoded is handed on as a stop, behind whatever was
// decoded before it, so that the producer reports the first problem in
// commit order; after it nothing is decoded and no position is marked.
func TestFeedStop(t *testing.T) {
	var queued []*decode.Tx
	q := &fakeQueue{tryPut: func(tx *decode.Tx) bool { queued = append(queued, tx); return true }}
	f := &feed{
		dec: decode.New(decode.Config{MaxPartEvents: 10, MaxPartBytes: 1 << 20}), out: q,
		received: receiverFunc(func(pglogrepl.LSN, time.Time) {}),
		log:      slog.New(slog.DiscardHandler), skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}),
	}
	r, err := f.WAL(0x300, commitMsg(0x400, 0x450)) // COMMIT outside a transaction
	if err != nil || !r.OK || !f.TryHandOn() {
		t.Fatalf("bad input: %+v, %v; want a stop ready", r, err)
	}
	var de *decode.Error
	if len(queued) != 1 || !errors.As(queued[0].Stop, &de) || de.Event.LSN != 0x300 {
		t.Fatalf("queued %+v, want a stop naming 0/300", queued)
	}
	f.lastMarkerAt = time.Time{}
	if r := f.Keepalive(0x900); r.OK {
		t.Fatal("a position marker after a stop")
	}
	if r, err := f.WAL(0x500, beginMsg(0x600, 8)); err != nil || r.OK || f.dec.InTx() {
		t.Fatalf("after a stop: %+v, %v, decoding %v; want nothing decoded", r, err, f.dec.InTx())
	}
}

// The transactions a resume checkpoint covers, replayed from the slot,
// are checked against the last one it records: on the history published,
// the replay is dropped and the position marked past it; on another (a
// transaction of another xid at its LSN), the feed hands on a stop naming
// both, and nothing after it, and the slot's position is all Postgres is
// told.
func TestFeedRewritten(t *testing.T) {
	y2k := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // the messages' commit time
	resume := checkpoint.Checkpoint{LSN: 0x600, Last: checkpoint.Last{Xid: 7, CommitLSN: 0x400, CommitTime: y2k}}
	for _, tc := range []struct {
		name string
		xid  uint32
		stop string // "" for none
	}{
		{"the history published", 7, ""},
		{"another history", 8, "has transaction 8 committed at 0/400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tracker := checkpoint.NewTracker(resume, true, 0x100)
			tracker.ServerWALEnd(0x1000)
			var queued []*decode.Tx
			f := &feed{out: &fakeQueue{tryPut: func(tx *decode.Tx) bool { queued = append(queued, tx); return true }},
				received: tracker, witness: tracker,
				log: slog.New(slog.DiscardHandler), skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})}
			f.dec = decode.New(decode.Config{MaxPartEvents: 10, MaxPartBytes: 1 << 20, Skip: tracker.Replayed, Replayed: f.sent})
			if _, err := f.WAL(0x300, beginMsg(0x400, tc.xid)); err != nil {
				t.Fatal(err)
			}
			r, err := f.WAL(0x400, commitMsg(0x400, 0x450))
			if err != nil {
				t.Fatal(err)
			}
			if tc.stop == "" {
				if r.OK {
					t.Fatalf("the replay of the last transaction published is handed on: %+v", f.ready)
				}
				if r := f.Keepalive(0x700); !r.OK || !f.TryHandOn() || len(queued) != 1 || queued[0].EndLSN != 0x700 {
					t.Fatalf("past the checkpoint: %+v, queued %+v; want a marker at 0/700", r, queued)
				}
				if c, _ := tracker.Confirm(); c != 0x600 {
					t.Fatalf("Confirm() = %s once the replay was found the one published, want the checkpoint's 0/600", c)
				}
				return
			}
			var re *checkpoint.ReplayError
			if !r.OK || !f.TryHandOn() || len(queued) != 1 || !errors.As(queued[0].Stop, &re) || !strings.Contains(re.Error(), tc.stop) ||
				!strings.Contains(re.Error(), "records transaction 7 committed at 0/400") {
				t.Fatalf("ready %+v, queued %+v; want a stop saying %q", r, queued, tc.stop)
			}
			f.lastMarkerAt = time.Time{}
			if r := f.Keepalive(0x700); r.OK {
				t.Fatal("a position marker after the stop")
			}
			if c, _ := tracker.Confirm(); c != 0x100 {
				t.Fatalf("Confirm() = %s on another history, want the slot's 0/100", c)
			}
		})
	}
}

// relationMsg is a pgoutput Relation message for schema.table with text
// columns.
func relationMsg(id uint32, schema, table string, columns ...string) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'R'}, id)
	b = append(append(b, schema...), 0)
	b = append(append(b, table...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(columns)))
	for _, c := range columns {
		b = append(append(append(b, 0), c...), 0)
		b = binary.BigEndian.AppendUint32(b, 25) // text
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return b
}

// The catalog is read anew when an outbox table's Relation message comes
// again in a session (an ALTER TABLE), not for its first one, which the
// session's start covers, and not for other tables.
func TestFeedRefreshesCatalog(t *testing.T) {
	o := &decode.Outbox{Schema: "public", Table: "outbox", Columns: decode.DefaultColumns()}
	var reads []string
	f := &feed{
		dec: decode.New(decode.Config{Outboxes: []*decode.Outbox{o}, MaxPartEvents: 10, MaxPartBytes: 1 << 20}),
		catalog: func(o *decode.Outbox, oid uint32) (map[string]decode.Catalog, error) {
			reads = append(reads, fmt.Sprintf("%s/%d", o.Name(), oid))
			return map[string]decode.Catalog{"payload": {Default: "'{}'::text"}}, nil
		},
	}
	cols := []string{"id", "aggregatetype", "aggregateid", "type", "payload"}
	for _, m := range [][]byte{relationMsg(1, "public", "outbox", cols...), relationMsg(2, "public", "audit", "n"),
		relationMsg(1, "public", "outbox", cols...)} {
		if _, err := f.WAL(0x10, m); err != nil {
			t.Fatal(err)
		}
	}
	if len(reads) != 1 || reads[0] != "public.outbox/1" {
		t.Fatalf("catalog reads %q, want one for public.outbox's second Relation message, relation 1", reads)
	}
}

// A Relation message decoded after its table was dropped (decoding lags the
// catalog) keeps the catalog read before, with a warning, instead of
// stopping the stream at rows that are still to be sent; any other failure
// to read the catalog stops it.
func TestFeedRelationGoneFromCatalog(t *testing.T) {
	cols := []string{"id", "aggregatetype", "aggregateid", "type", "payload"}
	for _, tc := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"dropped", fmt.Errorf("%w: table public.outbox has OID 0, the relation 1", errRelationGone), false},
		{"unreachable", errors.New("connection refused"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			o := &decode.Outbox{Schema: "public", Table: "outbox", Columns: decode.DefaultColumns()}
			f := &feed{
				dec:     decode.New(decode.Config{Outboxes: []*decode.Outbox{o}, MaxPartEvents: 10, MaxPartBytes: 1 << 20}),
				log:     slog.New(slog.NewTextHandler(&logs, nil)),
				catalog: func(*decode.Outbox, uint32) (map[string]decode.Catalog, error) { return nil, tc.err },
			}
			_, err := f.WAL(0x10, relationMsg(1, "public", "outbox", cols...))
			if err == nil {
				_, err = f.WAL(0x20, relationMsg(1, "public", "outbox", cols...))
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("WAL: %v, want an error: %v", err, tc.wantErr)
			}
			if !tc.wantErr && !strings.Contains(logs.String(), "outbox table dropped after the rows being decoded") {
				t.Fatalf("no warning logged: %s", logs.String())
			}
		})
	}
}

// The messages of a block of a transaction streamed in progress come in a
// burst, with nothing to hand on: the stream may read them in large
// chunks. Outside a block, it reads as messages come.
func TestFeedReadsStreamBlocksInBulk(t *testing.T) {
	f := &feed{
		dec: decode.New(decode.Config{MaxPartEvents: 10, MaxPartBytes: 1 << 20}), out: &fakeQueue{},
		log: slog.New(slog.DiscardHandler), skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}),
		streams: decode.NewStreams(func(xid uint32) (decode.Spool, error) {
			return newFileSpool(t.TempDir(), xid, prometheus.NewGauge(prometheus.GaugeOpts{Name: "y"}))
		}, nil),
	}
	defer f.close()
	start := binary.BigEndian.AppendUint32([]byte{'S'}, 7)
	start = append(start, 1) // first segment
	// A Type message, which a block may carry, with the xid version 2 adds.
	typ := binary.BigEndian.AppendUint32([]byte{'Y'}, 7)
	typ = binary.BigEndian.AppendUint32(typ, 16384)
	typ = append(typ, "public\x00mood\x00"...)
	for _, m := range []struct {
		data []byte
		bulk bool
	}{
		{start, true},
		{typ, true},
		{[]byte{'E'}, false}, // Stream Stop
		{beginMsg(0x400, 8), false},
	} {
		r, err := f.WAL(0x100, m.data)
		if err != nil {
			t.Fatalf("message %q: %v", m.data[0], err)
		}
		if r.Bulk != m.bulk {
			t.Fatalf("message %q: Bulk = %v, want %v", m.data[0], r.Bulk, m.bulk)
		}
	}
}
