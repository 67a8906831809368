package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/walstream/walstream/decode"
)

// insertMsg is an INSERT of row n into relation relID, public.outbox with
// Debezium's columns, as version 1 sends it.
func insertMsg(relID uint32, n int) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'I'}, relID)
	b = append(b, 'N')
	vals := []string{fmt.Sprintf("00000000-0000-0000-0000-%012d", n), "Order", "o-1", "Created", fmt.Sprintf(`{"seq": %d}`, n)}
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func inStream(v1 []byte, xid uint32) []byte {
	return append(append([]byte{v1[0]}, binary.BigEndian.AppendUint32(nil, xid)...), v1[1:]...)
}

// A streamed transaction is spooled to a file until its commit, then
// handed on part by part by HandOn; the spool's bytes are counted and
// freed. An error reading a spool back ends the session and stays.
func TestFeedStreamed(t *testing.T) {
	dir := t.TempDir()
	spooled := prometheus.NewGauge(prometheus.GaugeOpts{Name: "s"})
	var queued []*decode.Tx
	q := &fakeQueue{
		tryPut: func(tx *decode.Tx) bool { queued = append(queued, tx); return true },
		put:    func(_ context.Context, tx *decode.Tx) error { queued = append(queued, tx); return nil },
	}
	o := &decode.Outbox{Schema: "public", Table: "outbox", Columns: decode.DefaultColumns()}
	var hooks []string
	f := &feed{
		dec: decode.New(decode.Config{Outboxes: []*decode.Outbox{o}, MaxPartEvents: 10, MaxPartBytes: 1 << 20}), out: q,
		received: receiverFunc(func(pglogrepl.LSN, time.Time) {}), log: slog.New(slog.DiscardHandler),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}), hook: func(p string) { hooks = append(hooks, p) },
		streams: decode.NewStreams(func(xid uint32) (decode.Spool, error) { return newFileSpool(dir, xid, spooled) }, nil),
	}
	wal := func(lsn pglogrepl.LSN, data []byte) bool {
		t.Helper()
		r, err := f.WAL(lsn, data)
		if err != nil {
			t.Fatal(err)
		}
		return r.OK
	}
	start := binary.BigEndian.AppendUint32([]byte{'S'}, 9)
	wal(0x10, append(start, 1))
	wal(0, inStream(relationMsg(16385, "public", "outbox", "id", "aggregatetype", "aggregateid", "type", "payload"), 9))
	for i := 1; i <= 35; i++ {
		if wal(pglogrepl.LSN(0x100+i), inStream(insertMsg(16385, i), 9)) {
			t.Fatal("a row of a transaction in progress was made ready")
		}
	}
	wal(0x200, []byte{'E'})
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the spool file is in %s: %v, want it unlinked", dir, entries)
	}
	if v := gaugeValue(t, spooled); v <= 0 {
		t.Fatalf("walstream_stream_spool_bytes = %v while a transaction is spooled", v)
	}
	if len(queued) != 0 || len(hooks) != 37 || hooks[0] != "mid-stream" {
		t.Fatalf("before the commit: %d queued, hooks %v", len(queued), hooks)
	}
	commit := binary.BigEndian.AppendUint32([]byte{'c'}, 9)
	commit = append(commit, 0)
	commit = binary.BigEndian.AppendUint64(commit, 0x300)
	commit = binary.BigEndian.AppendUint64(commit, 0x308)
	commit = binary.BigEndian.AppendUint64(commit, 0)
	if !wal(0x300, commit) {
		t.Fatal("nothing ready at the commit")
	}
	if f.TryHandOn() {
		t.Fatal("TryHandOn handed on a whole streamed transaction of 4 parts")
	}
	if err := f.HandOn(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, tx := range queued {
		n += len(tx.Events)
		if tx.CommitLSN != 0x300 || tx.Final != (i == len(queued)-1) {
			t.Fatalf("part %d: %+v", i, tx)
		}
	}
	if n != 35 || len(queued) != 4 || queued[3].EndLSN != 0x308 {
		t.Fatalf("%d events in %d parts, want 35 in 4 ending at 0/308", n, len(queued))
	}
	if v := gaugeValue(t, spooled); v != 0 {
		t.Fatalf("walstream_stream_spool_bytes = %v after the commit", v)
	}

	// A spool that cannot be read back ends the session, for good.
	wal(0x400, append(binary.BigEndian.AppendUint32([]byte{'S'}, 10), 1))
	wal(0x410, inStream(insertMsg(16385, 36), 10))
	wal(0x420, []byte{'E'})
	broken := errors.New("disk gone")
	f.streams = decode.NewStreams(func(uint32) (decode.Spool, error) { return nil, broken }, nil)
	if _, err := f.WAL(0x430, append(binary.BigEndian.AppendUint32([]byte{'S'}, 11), 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WAL(0x440, inStream(insertMsg(16385, 37), 11)); !errors.Is(err, broken) {
		t.Fatalf("spooling without a spool: %v", err)
	}
	if _, err := f.WAL(0x450, []byte{'E'}); !errors.Is(err, broken) {
		t.Fatalf("after a spool failed: %v, want the failure again", err)
	}
	if err := f.HandOn(context.Background()); !errors.Is(err, broken) {
		t.Fatalf("HandOn after a spool failed: %v", err)
	}
	f.close()
}

// Rows that arrive under a partition's name are asked about once per
// Relation message, and published as the outbox table's when they are
// its partition's. A relation that is no partition now, whose columns
// fit the mapping and that the publication does not publish (detached) or
// the catalog no longer has (dropped), brings bad events naming it; a
// table the publication publishes, or one no mapping fits, stays ignored.
func TestFeedPartitionRows(t *testing.T) {
	o := &decode.Outbox{Schema: "public", Table: "outbox", Columns: decode.DefaultColumns()}
	var queued []*decode.Tx
	var asked []uint32
	states := map[uint32]relationState{
		30: {root: o, exists: true, published: true}, // a partition now
		31: {exists: true, published: true},          // another table of the publication
		32: {exists: true},                           // detached
		33: {},                                       // dropped
		34: {},                                       // dropped, not fitting the mapping
	}
	f := &feed{
		dec:      decode.New(decode.Config{Outboxes: []*decode.Outbox{o}, MaxPartEvents: 10, MaxPartBytes: 1 << 20}),
		out:      &fakeQueue{tryPut: func(tx *decode.Tx) bool { queued = append(queued, tx); return true }},
		received: receiverFunc(func(pglogrepl.LSN, time.Time) {}), log: slog.New(slog.DiscardHandler),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}),
		relationOf: func(oid uint32) (relationState, error) {
			asked = append(asked, oid)
			return states[oid], nil
		},
	}
	cols := []string{"id", "aggregatetype", "aggregateid", "type", "payload"}
	for i, m := range [][]byte{
		beginMsg(0x200, 5),
		relationMsg(30, "public", "outbox_2010", cols...),
		relationMsg(31, "public", "audit", cols...),
		relationMsg(32, "public", "outbox_2009", cols...),
		relationMsg(33, "public", "outbox_2008", cols...),
		relationMsg(34, "public", "scratch", "a", "b", "c", "d", "e"),
		insertMsg(30, 1), insertMsg(31, 2), insertMsg(34, 3), insertMsg(30, 4), insertMsg(32, 5), insertMsg(31, 6), insertMsg(33, 7), insertMsg(32, 8),
		commitMsg(0x200, 0x208),
	} {
		if _, err := f.WAL(pglogrepl.LSN(0x100+i), m); err != nil {
			t.Fatal(err)
		}
	}
	if !f.TryHandOn() || len(queued) != 1 {
		t.Fatalf("queued %d transactions", len(queued))
	}
	evs := queued[0].Events
	if len(evs) != 5 {
		t.Fatalf("%d events, want 5: the partition's two rows, the detached one's two, the dropped one's", len(evs))
	}
	for i, want := range []struct {
		table   string
		seq     int
		oid     uint32
		dropped bool
	}{{"public.outbox", 1, 0, false}, {"public.outbox", 4, 0, false}, {"public.outbox_2009", 5, 32, false}, {"public.outbox_2008", 7, 33, true}, {"public.outbox_2009", 8, 32, false}} {
		ev := evs[i]
		if ev.Table != want.table || ev.Source != o || string(ev.ID) != fmt.Sprintf("00000000-0000-0000-0000-%012d", want.seq) || ev.Ordinal != uint64(i+1) {
			t.Fatalf("event %d: %+v, want row %d of %s as public.outbox's event %d", i, ev.Identity, want.seq, want.table, i+1)
		}
		var ue *decode.UnattachedError
		switch {
		case want.oid == 0 && ev.Bad != nil:
			t.Fatalf("event %d of the partition is bad: %v", i, ev.Bad)
		case want.oid == 0:
		case ev.Bad == nil || !errors.As(ev.Bad, &ue) || ev.Bad.Unmapped:
			t.Fatalf("event %d of relation %d: Bad = %v, want an UnattachedError that dead-letter mode takes", i, want.oid, ev.Bad)
		case ue.OID != want.oid || ue.Relation != want.table || ue.Table != "public.outbox" || ue.Dropped != want.dropped:
			t.Fatalf("event %d: %+v, want relation %s (OID %d) of public.outbox, dropped %v", i, ue, want.table, want.oid, want.dropped)
		}
	}
	msg := evs[3].Bad.Error()
	for _, s := range []string{"at LSN ", "table public.outbox_2008", "event id 00000000-0000-0000-0000-000000000007", "OID 33", "was dropped", "Dead-letter its rows", "docs/busy-primaries.md, Partitioned outbox tables"} {
		if !strings.Contains(msg, s) {
			t.Errorf("the dropped partition's row reads %q, missing %q", msg, s)
		}
	}
	if msg := evs[2].Bad.Error(); !strings.Contains(msg, "ATTACH PARTITION public.outbox_2009") {
		t.Errorf("the detached partition's row reads %q, want how to attach it again", msg)
	}
	if len(asked) != 5 {
		t.Fatalf("asked about relations %v, want each once", asked)
	}
}
