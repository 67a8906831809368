package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
		streams: decode.NewStreams(func(xid uint32) (decode.Spool, error) { return newFileSpool(dir, xid, spooled) }),
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
	f.streams = decode.NewStreams(func(uint32) (decode.Spool, error) { return nil, broken })
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
// its partition's; another table's rows stay ignored.
func TestFeedPartitionRows(t *testing.T) {
	o := &decode.Outbox{Schema: "public", Table: "outbox", Columns: decode.DefaultColumns()}
	var queued []*decode.Tx
	var asked []uint32
	f := &feed{
		dec:      decode.New(decode.Config{Outboxes: []*decode.Outbox{o}, MaxPartEvents: 10, MaxPartBytes: 1 << 20}),
		out:      &fakeQueue{tryPut: func(tx *decode.Tx) bool { queued = append(queued, tx); return true }},
		received: receiverFunc(func(pglogrepl.LSN, time.Time) {}), log: slog.New(slog.DiscardHandler),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}),
		partitionOf: func(oid uint32) (*decode.Outbox, error) {
			asked = append(asked, oid)
			if oid == 30 {
				return o, nil
			}
			return nil, nil
		},
	}
	cols := []string{"id", "aggregatetype", "aggregateid", "type", "payload"}
	for i, m := range [][]byte{
		beginMsg(0x200, 5),
		relationMsg(30, "public", "outbox_2010", cols...),
		relationMsg(31, "public", "audit", cols...),
		insertMsg(30, 1), insertMsg(31, 2), insertMsg(30, 3), insertMsg(31, 4),
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
	if len(evs) != 2 || evs[0].Table != "public.outbox" || evs[0].Source != o || string(evs[1].ID) != "00000000-0000-0000-0000-000000000003" {
		t.Fatalf("events %+v, want the partition's two rows as public.outbox's", evs)
	}
	if len(asked) != 2 {
		t.Fatalf("asked about relations %v, want each once", asked)
	}
}
