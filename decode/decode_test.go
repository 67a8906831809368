package decode

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

type frame struct {
	lsn  pglogrepl.LSN
	data []byte
}

// readFrames reads testdata/<name>/frames.txt, captured from Postgres 15
// by replication.TestCaptureFrames.
func readFrames(t testing.TB, name string) []frame {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name, "frames.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var frames []frame
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		lsnText, hexData, _ := strings.Cut(line, " ")
		lsn, err := pglogrepl.ParseLSN(lsnText)
		if err != nil {
			t.Fatal(err)
		}
		data, err := hex.DecodeString(hexData)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, frame{lsn, data})
	}
	return frames
}

// outboxConfig is a decoder config for one outbox table, schema.outbox,
// with Debezium's columns; mod, if not nil, changes its mapping.
func outboxConfig(schema string, mod func(*Outbox)) Config {
	o := &Outbox{Schema: schema, Table: "outbox", Columns: DefaultColumns()}
	if mod != nil {
		mod(o)
	}
	return Config{Outboxes: []*Outbox{o}, MaxPartEvents: 1000, MaxPartBytes: 1 << 20}
}

// decodeAll feeds frames to a decoder and returns what it hands on.
func decodeAll(t *testing.T, d *Decoder, frames []frame) []*Tx {
	t.Helper()
	txs, err := decodeUntilError(d, frames)
	if err != nil {
		t.Fatal(err)
	}
	if d.InTx() {
		t.Fatal("a transaction is still open after the last frame")
	}
	return txs
}

// decodeUntilError feeds frames to a decoder until one fails, and returns
// what it handed on and the failure.
func decodeUntilError(d *Decoder, frames []frame) ([]*Tx, error) {
	var txs []*Tx
	for _, f := range frames {
		tx, err := d.Decode(f.lsn, f.data)
		if err != nil {
			return txs, fmt.Errorf("Decode at %s: %w", f.lsn, err)
		}
		if tx != nil {
			txs = append(txs, tx)
		}
	}
	return txs, nil
}

type wantEvent struct{ id, aggType, aggID, typ, payload string }

func checkEvents(t *testing.T, tx *Tx, want ...wantEvent) {
	t.Helper()
	if len(tx.Events) != len(want) {
		t.Fatalf("transaction %d has %d events, want %d", tx.Xid, len(tx.Events), len(want))
	}
	for i, w := range want {
		ev := tx.Events[i]
		got := wantEvent{string(ev.ID), string(ev.AggregateType), string(ev.AggregateID), string(ev.Type), string(ev.Payload)}
		if got != w {
			t.Errorf("event %d = %+v, want %+v", i, got, w)
		}
	}
}

func TestDecodeBasic(t *testing.T) {
	txs := decodeAll(t, New(outboxConfig("public", nil)), readFrames(t, "basic"))
	if len(txs) != 2 {
		t.Fatalf("got %d transactions, want 2", len(txs))
	}
	checkEvents(t, txs[0],
		wantEvent{"11111111-1111-1111-1111-111111111111", "Order", "o-1", "OrderCreated", `{"seq": 1, "total": 9.5}`},
		wantEvent{"22222222-2222-2222-2222-222222222222", "Order", "o-2", "OrderCreated", `{"seq": 2}`})
	checkEvents(t, txs[1],
		wantEvent{"33333333-3333-3333-3333-333333333333", "Customer", "c-1", "CustomerMoved", `{"seq": 3, "city": "Zürich"}`})
	for _, tx := range txs {
		if !tx.Final || tx.EndLSN <= tx.CommitLSN || tx.CommitTime.IsZero() {
			t.Errorf("transaction %d: Final %v, commit %s, end %s, time %s", tx.Xid, tx.Final, tx.CommitLSN, tx.EndLSN, tx.CommitTime)
		}
		for i, ev := range tx.Events {
			if ev.Ordinal != uint64(i+1) || ev.LSN == 0 {
				t.Errorf("transaction %d event %d: ordinal %d, LSN %s", tx.Xid, i, ev.Ordinal, ev.LSN)
			}
		}
	}
	if txs[0].EndLSN > txs[1].CommitLSN {
		t.Errorf("first transaction ends at %s after the second commits at %s", txs[0].EndLSN, txs[1].CommitLSN)
	}
}

// A multi-row INSERT gives each row its own ordinal: the checkpoint names
// events by (commit LSN, ordinal), never by the row's LSN.
func TestDecodeMultiRow(t *testing.T) {
	txs := decodeAll(t, New(outboxConfig("public", nil)), readFrames(t, "multirow"))
	if len(txs) != 1 || len(txs[0].Events) != 5 {
		t.Fatalf("got %d transactions, want 1 with 5 events", len(txs))
	}
	for i, ev := range txs[0].Events {
		if ev.Ordinal != uint64(i+1) {
			t.Errorf("event %d has ordinal %d", i, ev.Ordinal)
		}
	}
}

// A row inserted and deleted in one transaction is still published; UPDATE
// and DELETE publish nothing.
func TestDecodeInsertDeleteUpdate(t *testing.T) {
	txs := decodeAll(t, New(outboxConfig("public", nil)), readFrames(t, "insert-delete-update"))
	if len(txs) != 1 {
		t.Fatalf("got %d transactions, want 1", len(txs))
	}
	checkEvents(t, txs[0],
		wantEvent{"44444444-4444-4444-4444-444444444444", "Order", "o-4", "Created", `{"seq": 4}`},
		wantEvent{"55555555-5555-5555-5555-555555555555", "Order", "o-5", "Created", `{"seq": 5}`})
}

func TestDecodeOtherTableAndMessages(t *testing.T) {
	txs := decodeAll(t, New(outboxConfig("public", nil)), readFrames(t, "other-table-and-messages"))
	if len(txs) != 1 {
		t.Fatalf("got %d transactions, want 1", len(txs))
	}
	checkEvents(t, txs[0], wantEvent{"66666666-6666-6666-6666-666666666666", "Order", "o-6", "Created", `{"seq": 6}`})
}

func TestDecodeNullType(t *testing.T) {
	txs := decodeAll(t, New(outboxConfig("public", nil)), readFrames(t, "null-type-column"))
	checkEvents(t, txs[0], wantEvent{"88888888-8888-8888-8888-888888888888", "Order", "o-8", "", `{"seq": 8}`})
	if txs[0].Events[0].Type != nil {
		t.Error("NULL type decoded as non-nil")
	}
}

// A bytea payload reaches Kafka as its raw bytes, not bytea's hex text.
func TestDecodeBytea(t *testing.T) {
	cfg := outboxConfig("bin", nil)
	txs := decodeAll(t, New(cfg), readFrames(t, "bytea-payload"))
	checkEvents(t, txs[0], wantEvent{"b-1", "Blob", "k-1", "", "\x00\xff\x10"})
}

// firstProblem decodes frames and returns the first bad event's error or
// decode error, in stream order, with the LSN of the frame it came at.
func firstProblem(t *testing.T, d *Decoder, frames []frame) (pglogrepl.LSN, error) {
	t.Helper()
	for _, f := range frames {
		tx, err := d.Decode(f.lsn, f.data)
		if err != nil {
			return f.lsn, err
		}
		if tx == nil {
			continue
		}
		for _, ev := range tx.Events {
			if ev.Bad != nil {
				return ev.LSN, ev.Bad
			}
		}
	}
	return 0, nil
}

func TestDecodeNullAggregateType(t *testing.T) {
	d := New(outboxConfig("public", nil))
	at, err := firstProblem(t, d, readFrames(t, "null-aggregatetype"))
	var de *Error
	if !errors.As(err, &de) {
		t.Fatalf("err = %v, want a *decode.Error", err)
	}
	if de.Event.LSN != at || string(de.Event.ID) != "77777777-7777-7777-7777-777777777777" || de.Column != "aggregatetype" || de.Event.Table != "public.outbox" {
		t.Fatalf("error %+v does not name LSN %s, the event id, table and column", de, at)
	}
	if msg := err.Error(); !strings.Contains(msg, "at LSN "+at.String()) || !strings.Contains(msg, "no topic can be derived") {
		t.Fatalf("message %q", msg)
	}
}

func TestDecodeMissingColumn(t *testing.T) {
	cfg := outboxConfig("public", func(o *Outbox) { o.Columns.AggregateID = "aggregate_id" })
	d := New(cfg)
	at, err := firstProblem(t, d, readFrames(t, "basic"))
	if err == nil || !strings.Contains(err.Error(), "column aggregate_id: outbox column is missing") || !strings.Contains(err.Error(), "table public.outbox") {
		t.Fatalf("err = %v, want the missing column named", err)
	}
	// The Relation message comes at 0/0; the row names the real position
	// and event.
	for _, want := range []string{"at LSN " + at.String(), "event id 11111111-1111-1111-1111-111111111111", "event 0/29CA470:1"} {
		if at == 0 || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	var de *Error
	if !errors.As(err, &de) || !de.Unmapped {
		t.Errorf("err = %#v, want a *decode.Error that blames the table", err)
	}
}

// Large transactions are handed on in parts of MaxPartEvents; only the
// last is Final and carries the end LSN, and it always has events, also
// when the transaction is an exact multiple of the limit: an event-less
// Final part would leave the whole-transaction checkpoint to a timer.
func TestDecodeSplit(t *testing.T) {
	frames := readFrames(t, "multirow") // one transaction of 5 rows
	for _, tc := range []struct {
		name     string
		maxPart  int
		maxBytes int
		want     []int
	}{
		{"5 x 1", 1, 1 << 20, []int{1, 1, 1, 1, 1}},
		{"1 x 5", 5, 1 << 20, []int{5}},
		{"2 x 2 + 1", 2, 1 << 20, []int{2, 2, 1}},
		{"1 x 4 + 1", 4, 1 << 20, []int{4, 1}},
		{"under the limit", 6, 1 << 20, []int{5}},
		{"bytes: one event each", 1000, 1, []int{1, 1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := outboxConfig("public", nil)
			cfg.MaxPartEvents, cfg.MaxPartBytes = tc.maxPart, tc.maxBytes
			txs := decodeAll(t, New(cfg), frames)
			var sizes []int
			for _, tx := range txs {
				sizes = append(sizes, len(tx.Events))
			}
			if !slices.Equal(sizes, tc.want) {
				t.Fatalf("parts of %v events, want %v", sizes, tc.want)
			}
			var ordinal uint64
			for i, tx := range txs {
				if last := i == len(txs)-1; tx.Final != last || (last && tx.EndLSN == 0) {
					t.Fatalf("part %d: Final = %v, EndLSN %s: only the last part may be Final and carry the end LSN", i, tx.Final, tx.EndLSN)
				}
				if tx.CommitLSN != txs[0].CommitLSN {
					t.Fatalf("part %d: commit LSN %s, want %s", i, tx.CommitLSN, txs[0].CommitLSN)
				}
				for _, ev := range tx.Events {
					if ordinal++; ev.Ordinal != ordinal {
						t.Fatalf("part %d: ordinal %d, want %d", i, ev.Ordinal, ordinal)
					}
				}
			}
		})
	}
}

// Replays at or below the checkpoint are dropped: whole transactions
// before it, and the published events of a partly published transaction.
func TestDecodeResume(t *testing.T) {
	frames := readFrames(t, "basic")
	all := decodeAll(t, New(outboxConfig("public", nil)), frames)

	cfg := outboxConfig("public", nil)
	cfg.Skip = skipBefore(all[0].EndLSN, 0, 0)
	// Each transaction dropped whole is told, as the server sent it, with
	// the number of its events.
	var replayed []Tx
	var events []uint64
	cfg.Replayed = func(tx *Tx, n uint64) { replayed, events = append(replayed, *tx), append(events, n) }
	d := New(cfg)
	txs := decodeAll(t, d, frames)
	if len(txs) != 1 || string(txs[0].Events[0].ID) != "33333333-3333-3333-3333-333333333333" || d.Skipped() != 2 {
		t.Fatalf("resuming after the first transaction: %d transactions, %d skipped", len(txs), d.Skipped())
	}
	first := all[0]
	if len(replayed) != 1 || events[0] != 2 || replayed[0].Xid != first.Xid || replayed[0].CommitLSN != first.CommitLSN ||
		!replayed[0].CommitTime.Equal(first.CommitTime) || replayed[0].EndLSN != first.EndLSN || first.Xid == 0 {
		t.Fatalf("replayed %+v with %v events, want transaction %d at %s with 2", replayed, events, first.Xid, first.CommitLSN)
	}

	cfg.Skip = skipBefore(1, all[0].CommitLSN, 1)
	replayed = nil
	d = New(cfg)
	txs = decodeAll(t, d, frames)
	if len(txs) != 2 || len(txs[0].Events) != 1 || txs[0].Events[0].Ordinal != 2 || d.Skipped() != 1 {
		t.Fatalf("resuming inside the first transaction: got %d transactions, %d skipped", len(txs), d.Skipped())
	}
	if len(replayed) != 0 {
		t.Fatalf("a transaction published in part was told as dropped whole: %+v", replayed)
	}
}

// skipBefore skips what a checkpoint at lsn, with ordinal events of the
// transaction at partial published, covers.
func skipBefore(lsn, partial pglogrepl.LSN, ordinal uint64) func(pglogrepl.LSN, uint64) bool {
	return func(commitLSN pglogrepl.LSN, n uint64) bool {
		return commitLSN < lsn || (partial != 0 && commitLSN == partial && n <= ordinal)
	}
}

func TestDecodeBadInput(t *testing.T) {
	basic := readFrames(t, "basic")
	relation, begin, insert := basic[1].data, basic[0].data, basic[2].data
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   string
	}{
		{"empty", [][]byte{{}}, "empty pgoutput message"},
		{"truncated relation", [][]byte{relation[:20]}, "Relation message"},
		{"truncated begin", [][]byte{begin[:10]}, "decoding BEGIN"},
		{"insert before relation", [][]byte{begin, insert}, "before its Relation message"},
		{"insert outside transaction", [][]byte{relation, insert}, "INSERT outside a transaction"},
		{"truncated insert", [][]byte{relation, begin, insert[:len(insert)-3]}, "decoding INSERT tuple"},
		{"short insert", [][]byte{relation, begin, insert[:6]}, "want at least 8"},
		{"commit outside transaction", [][]byte{basic[4].data}, "COMMIT outside a transaction"},
		{"nested begin", [][]byte{begin, begin}, "BEGIN inside transaction"},
		{"streaming message", [][]byte{{'S', 0, 0, 0, 1, 0}}, "streaming of in-progress transactions"},
		{"unknown type", [][]byte{{'Z'}}, `unexpected pgoutput message type 'Z'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New(outboxConfig("public", nil))
			var err error
			for i, f := range tc.frames {
				if _, err = d.Decode(pglogrepl.LSN(0x100+i), f); err != nil {
					break
				}
			}
			var de *Error
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "at LSN 0/10") {
				t.Fatalf("err = %v, want a decode.Error at LSN 0/10x mentioning %q", err, tc.want)
			}
		})
	}
}

// FuzzDecode feeds arbitrary messages after the real Relation and BEGIN
// of an outbox transaction: decoding may fail, never panic, and whatever
// it hands on must be well formed.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"basic", "multirow", "insert-delete-update", "other-table-and-messages", "bytea-payload"} {
		for _, fr := range readFrames(f, name) {
			f.Add(fr.data)
		}
	}
	basic := readFrames(f, "basic")
	f.Fuzz(func(t *testing.T, data []byte) {
		d := New(outboxConfig("public", nil))
		for _, fr := range basic[:2] {
			if _, err := d.Decode(fr.lsn, fr.data); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := d.Decode(0x200, data)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Event.LSN != 0x200 {
				t.Fatalf("error %v does not name the LSN", err)
			}
			return
		}
		if tx != nil && tx.Final && tx.EndLSN == 0 {
			t.Fatal("a Final transaction without an end LSN")
		}
	})
}

// Logical-message outbox events are published like rows, in commit order
// with the rows of their transaction; a non-transactional one is a bad
// event of its own, placed at its LSN with ordinal 0.
func TestDecodeLogicalMessages(t *testing.T) {
	cfg := outboxConfig("public", nil)
	cfg.MessagePrefix = "walstream"
	d := New(cfg)
	txs, err := decodeUntilError(d, readFrames(t, "logical-message"))
	if err != nil {
		t.Fatal(err)
	}
	if len(txs) != 2 {
		t.Fatalf("got %d transactions, want 2", len(txs))
	}
	checkEvents(t, txs[0],
		wantEvent{"99999999-9999-9999-9999-999999999999", "Order", "o-9", "OrderPlaced", `{"seq": 9}`},
		wantEvent{"m-1", "Order", "o-9", "OrderShipped", `{"carrier": "DHL", "seq": 10}`},
		wantEvent{"m-2", "Note", "n-1", "Text", `plain "text"`})
	if h := txs[0].Events[1].Headers; len(h) != 1 || h[0] != (Header{"x-source", "shipping"}) {
		t.Errorf("envelope headers = %v", h)
	}
	for i, ev := range txs[0].Events {
		if ev.Ordinal != uint64(i+1) {
			t.Errorf("event %d has ordinal %d: rows and messages share the order", i, ev.Ordinal)
		}
	}
	nontx := txs[1]
	if len(nontx.Events) != 1 || !nontx.Final || nontx.EndLSN != nontx.CommitLSN+1 {
		t.Fatalf("non-transactional message: %+v", nontx)
	}
	ev := nontx.Events[0]
	if ev.Bad == nil || !strings.Contains(ev.Bad.Error(), `prefix "walstream" is not transactional`) || ev.Ordinal != 0 || ev.CommitLSN != ev.LSN {
		t.Fatalf("non-transactional message: %+v, bad %v", ev.Identity, ev.Bad)
	}
	if got, want := ev.Ref().String(), ev.LSN.String()+":0"; got != want {
		t.Fatalf("Ref = %s, want %s", got, want)
	}
	// Once a checkpoint covers it, a restart drops it as a replay.
	d = New(cfg)
	d.cfg.Skip = func(lsn pglogrepl.LSN, _ uint64) bool { return lsn < nontx.EndLSN }
	var replayed []pglogrepl.LSN
	d.cfg.Replayed = func(tx *Tx, n uint64) {
		if tx.Xid == 0 && n == 1 {
			replayed = append(replayed, tx.CommitLSN)
		}
	}
	for _, f := range readFrames(t, "logical-message") {
		if tx, err := d.Decode(f.lsn, f.data); err != nil || tx != nil {
			t.Fatalf("replay: tx %v, err %v", tx, err)
		}
	}
	if len(replayed) != 1 || replayed[0] != nontx.CommitLSN {
		t.Fatalf("the non-transactional messages told as dropped: %v, want the one at %s", replayed, nontx.CommitLSN)
	}
	// Without a prefix, logical messages are not outbox events.
	if txs := decodeAll(t, New(outboxConfig("public", nil)), readFrames(t, "logical-message")); len(txs[0].Events) != 1 {
		t.Fatalf("messages published with no prefix configured")
	}
}

// The trace context is read only from a configured tracing column:
// Debezium's default image (no OpenTelemetry on the classpath,
// ActivateTracingSpan.isOpenTelemetryAvailable false) adds no traceparent.
func TestDecodeTracing(t *testing.T) {
	txs := decodeAll(t, New(outboxConfig("public", func(o *Outbox) { o.Columns.Tracing = "tracingspancontext" })), readFrames(t, "tracing"))
	ev := txs[len(txs)-1].Events[0]
	if got := string(ev.TraceParent); got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Fatalf("traceparent = %q", got)
	}
	txs = decodeAll(t, New(outboxConfig("public", nil)), readFrames(t, "tracing"))
	if ev := txs[len(txs)-1].Events[0]; ev.TraceParent != nil {
		t.Fatalf("traceparent %q without a tracing column configured", ev.TraceParent)
	}
}

func TestDecodeTombstone(t *testing.T) {
	cfg := outboxConfig("public", func(o *Outbox) { o.TombstoneOnEmptyPayload = true })
	d := New(cfg)
	basic := readFrames(t, "basic")
	relation, begin := basic[1], basic[0]
	for _, f := range []frame{relation, begin} {
		if _, err := d.Decode(f.lsn, f.data); err != nil {
			t.Fatal(err)
		}
	}
	// The first INSERT with its payload column made NULL.
	insert := append([]byte(nil), basic[2].data...)
	i := bytes.LastIndexByte(insert[:len(insert)-24], 't') // the payload column's kind byte
	insert = append(insert[:i:i], 'n')
	if _, err := d.Decode(basic[2].lsn, insert); err != nil {
		t.Fatal(err)
	}
	if ev := d.tx.Events[0]; ev.Payload != nil || !ev.Tombstone || ev.Bad != nil {
		t.Fatalf("NULL payload with tombstones on: payload %q, tombstone %v, bad %v", ev.Payload, ev.Tombstone, ev.Bad)
	}
}

// table.op.invalid.behavior: warn and error skip the UPDATE and report it
// on its transaction, naming the row, for the caller to log; fatal stops
// at it.
func TestDecodeUpdateBehavior(t *testing.T) {
	for _, tc := range []struct {
		op InvalidOp
	}{{OpWarn}, {OpError}, {OpFatal}} {
		cfg := outboxConfig("public", func(o *Outbox) { o.OnUpdate = tc.op })
		txs, err := decodeUntilError(New(cfg), readFrames(t, "insert-delete-update"))
		const id = "55555555-5555-5555-5555-555555555555"
		if tc.op == OpFatal {
			var de *Error
			if !errors.As(err, &de) || string(de.Event.ID) != id || de.Event.Table != "public.outbox" || !strings.Contains(err.Error(), "UPDATE of an outbox row") {
				t.Fatalf("fatal: err = %v, want the UPDATE named with its event id", err)
			}
			continue
		}
		if err != nil || len(txs) != 1 || len(txs[0].Events) != 2 {
			t.Fatalf("%v: err %v, %d transactions", tc.op, err, len(txs))
		}
		ign := txs[0].Ignored
		if len(ign) != 1 || ign[0].Behavior != tc.op || string(ign[0].Row.ID) != id || ign[0].Row.Table != "public.outbox" ||
			ign[0].Row.CommitLSN != txs[0].CommitLSN || ign[0].Row.LSN == 0 {
			t.Errorf("%v: ignored updates %+v, want the one UPDATE of %s", tc.op, ign, id)
		}
	}
}

// An UPDATE of a table without the mapping's event id column is reported
// without an id, and its inserts as rows of a table the mapping does not
// fit.
func TestDecodeUpdateWithoutIDColumn(t *testing.T) {
	cfg := outboxConfig("public", func(o *Outbox) { o.Columns.ID = "event_id" })
	txs, err := decodeUntilError(New(cfg), readFrames(t, "insert-delete-update"))
	if err != nil || len(txs) != 1 {
		t.Fatalf("err %v, %d transactions; want one", err, len(txs))
	}
	for _, ev := range txs[0].Events {
		if ev.Bad == nil || !ev.Bad.Unmapped {
			t.Errorf("event at %s: Bad = %v, want the table unmapped", ev.LSN, ev.Bad)
		}
	}
	if ign := txs[0].Ignored; len(ign) != 1 || ign[0].Row.ID != nil || ign[0].Row.LSN == 0 || ign[0].Row.Table != "public.outbox" {
		t.Errorf("ignored updates %+v, want the one UPDATE, without an id", ign)
	}
}

// EventRouterConfigDefinition.parseAdditionalFieldsConfig trims each part
// of an entry; EventRouterDelegate.apply sets the partition once per
// partition entry, in order, so the last one wins.
func TestParseAdditional(t *testing.T) {
	got, err := ParseAdditional("type : header : eventType, shard:PARTITION ,note:envelope, n2 :partition,x:header:")
	want := []Additional{{"type", PlaceHeader, "eventType"}, {"note", PlaceEnvelope, "note"}, {"n2", PlacePartition, "n2"}, {"x", PlaceHeader, "x"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ParseAdditional = %v, %v; want %v", got, err, want)
	}
	// AdditionalFieldsValidator.isListOfStringPairs: 2 or 3 parts each.
	for _, bad := range []string{"type", "type:body", "a:b:c:d", ":header", "a:header,,b:header"} {
		if _, err := ParseAdditional(bad); err == nil {
			t.Errorf("ParseAdditional(%q) accepted", bad)
		}
	}
}

// A mapping the table cannot satisfy is refused at its Relation message,
// naming the table and column; a missing additional column may be skipped.
func TestDecodeMappingRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Outbox)
		want string // empty: accepted
	}{
		{"missing additional column", func(o *Outbox) { o.Additional = []Additional{{"nope", PlaceHeader, "nope"}} }, "column nope: additional column"},
		{"missing additional column skipped", func(o *Outbox) {
			o.Additional, o.AdditionalOptional = []Additional{{"nope", PlaceHeader, "nope"}}, true
		}, ""},
		{"partition from a text column", func(o *Outbox) { o.Additional = []Additional{{"note", PlacePartition, "note"}} }, "column note: additional column placed in the partition has type OID 25"},
		{"timestamp from a text column", func(o *Outbox) { o.Columns.Timestamp = "note" }, "column note: timestamp column"},
		{"missing timestamp column", func(o *Outbox) { o.Columns.Timestamp = "created" }, "column created: timestamp column"},
		{"jsonb column as an additional header", func(o *Outbox) { o.Additional = []Additional{{"payload", PlaceHeader, "p"}} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New(outboxConfig("public", tc.mod))
			_, err := firstProblem(t, d, readFrames(t, "additional-fields"))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "table public.outbox")):
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseTimestamp(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-23 06:00:01":           "2026-11-23T06:00:01Z",
		"2026-11-23 06:00:00.123456+00": "2026-11-23T06:00:00.123456Z",
		"2026-11-23 11:30:00.5+05:30":   "2026-11-23T06:00:00.5Z",
		"2026-11-23 03:00:00-03":        "2026-11-23T06:00:00Z",
	} {
		got, err := ParseTimestamp([]byte(in))
		if err != nil || got.UTC().Format(time.RFC3339Nano) != want {
			t.Errorf("ParseTimestamp(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"infinity", "11/23/2026 06:00:00", "2026-11-23 06:00:00 BC"} {
		if _, err := ParseTimestamp([]byte(bad)); err == nil {
			t.Errorf("ParseTimestamp(%q) accepted", bad)
		}
	}
}

// withRelID returns a copy of a Relation or INSERT frame naming relation
// id instead: the same table, recreated.
func withRelID(f frame, id uint32) frame {
	data := slices.Clone(f.data)
	data[1], data[2], data[3], data[4] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	return frame{f.lsn, data}
}

// A table that comes back with another OID stops the stream at its first
// row, naming the table, both OIDs and the row's LSN; an accepted one does
// not.
func TestDecodeTableRecreated(t *testing.T) {
	basic := readFrames(t, "basic") // B R I I C, B I C
	recreated := []frame{basic[0], basic[1], basic[2], basic[3], basic[4], basic[5], withRelID(basic[1], 99999), withRelID(basic[6], 99999), basic[7]}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string // empty: no stop
	}{
		{"seen in the session", nil, "OID 16454, now 99999"},
		{"catalog knows the new one", func(c *Config) { c.OIDs = map[string]uint32{"public.outbox": 99999} }, "OID 99999, now 16454"},
		{"accepted", func(c *Config) {
			c.OIDs, c.Recreated = map[string]uint32{"public.outbox": 99999}, map[string]bool{"public.outbox": true}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := outboxConfig("public", nil)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			d := New(cfg)
			var err error
			var at pglogrepl.LSN
			events := 0
			for _, f := range recreated {
				var tx *Tx
				if tx, err = d.Decode(f.lsn, f.data); err != nil {
					at = f.lsn
					break
				}
				if tx != nil {
					events += len(tx.Events)
				}
			}
			if tc.want == "" {
				if err != nil || events != 3 {
					t.Fatalf("err = %v after %d events, want 3 events", err, events)
				}
				return
			}
			var re *TableRecreatedError
			if !errors.As(err, &re) || re.LSN != at || re.Table != "public.outbox" {
				t.Fatalf("err = %v, want a TableRecreatedError at %s", err, at)
			}
			for _, want := range []string{tc.want, "at LSN " + at.String(), "table public.outbox", "in one transaction"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want %q", err, want)
				}
			}
		})
	}
}

// Under the JSON converter a text payload that is not UTF-8 is a bad
// event, never malformed JSON; the string converter passes the bytes on.
func TestDecodeInvalidUTF8Payload(t *testing.T) {
	frames := readFrames(t, "basic")
	insert := slices.Clone(frames[2].data)
	i := bytes.Index(insert, []byte(`{"seq": 1`))
	insert[i+1] = 0xff // the payload's first quote
	frames[2].data = insert
	for _, jsonText := range []bool{false, true} {
		cfg := outboxConfig("public", nil)
		cfg.JSONText = jsonText
		at, err := firstProblem(t, New(cfg), frames)
		switch {
		case !jsonText && err != nil:
			t.Errorf("string converter: %v", err)
		case jsonText && (err == nil || at != frames[2].lsn || !strings.Contains(err.Error(), "column payload: payload is not valid UTF-8") ||
			!strings.Contains(err.Error(), "event id 11111111-1111-1111-1111-111111111111")):
			t.Errorf("JSON converter: err = %v at %s, want the payload named at %s", err, at, frames[2].lsn)
		}
	}
}

func TestCheckTable(t *testing.T) {
	cols := []Column{{Name: "id", Type: 2950}, {Name: "aggregatetype", Type: 25}, {Name: "aggregateid", Type: 25}, {Name: "type", Type: 25}, {Name: "payload", Type: 3802}}
	o := &Outbox{Schema: "public", Table: "outbox", Columns: DefaultColumns()}
	if err := CheckTable(o, cols); err != nil {
		t.Fatalf("CheckTable = %v", err)
	}
	o.Columns.Timestamp = "created_at"
	err := CheckTable(o, cols)
	var de *Error
	if !errors.As(err, &de) || de.Column != "created_at" || de.Event.Table != "public.outbox" || strings.Contains(err.Error(), "LSN") {
		t.Fatalf("CheckTable = %v, want the missing timestamp column named, no LSN", err)
	}
}

func TestParseRef(t *testing.T) {
	r, err := ParseRef("0/16B3748:3")
	if err != nil || r != (Ref{0x16B3748, 3}) || r.String() != "0/16B3748:3" {
		t.Fatalf("ParseRef = %v, %v", r, err)
	}
	for _, bad := range []string{"", "0/16B3748", "0/0:1", "x:1", "0/1:-1"} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) accepted", bad)
		}
	}
}

// A logical message is read as Debezium's DecodeLogicalDecodingMessageContent
// and outbox router read it: a JSON object whose fields are named as the
// router's columns; where Debezium's task stops (a field missing, or null
// and dropped by the decoder, a route-by value that is not a string, a
// content that is not an object), the event is bad, naming the field.
func TestDecodeMessageAsDebezium(t *testing.T) {
	for _, tc := range []struct {
		content, bad string
		nulls        bool
		mod          func(*Outbox)
	}{
		{`{"id": "m", "aggregatetype": "A", "aggregateid": 7, "payload": {"x": 1}}`, "", false, nil},
		{`{"id": 5, "aggregatetype": "A", "aggregateid": "k", "payload": "s"}`, "", false, nil},
		{`{"aggregatetype": "A", "aggregateid": "k", "payload": {}}`, "column id: field is missing", false, nil},
		{`{"id": null, "aggregatetype": "A", "aggregateid": "k", "payload": {}}`, "column id: field is missing", false, nil},
		{`{"id": null, "aggregatetype": "A", "aggregateid": null, "payload": null}`, "", true, nil},
		{`{"id": "m", "aggregatetype": 1, "aggregateid": "k", "payload": {}}`, "not a string", false, nil},
		{`{"id": "m", "aggregatetype": "A", "aggregateid": "k"}`, "column payload: field is missing", false, nil},
		{`["id"]`, "not a JSON object", false, nil},
		{` {"id": "m"}`, "not a JSON object", false, nil},
		{`{"id": {"a": 1}, "aggregatetype": "A", "aggregateid": "k", "payload": 1}`, "not a string, number or boolean", false, nil},
		{`{"event_id": "m", "aggregatetype": "A", "aggregateid": "k", "payload": 1}`, "", false, func(o *Outbox) { o.Columns.ID = "event_id" }},
		{`{"id": "m", "aggregatetype": "A", "aggregateid": "k", "payload": 1}`, "table.field.event.timestamp", false, func(o *Outbox) { o.Columns.Timestamp = "ts" }},
	} {
		cfg := outboxConfig("public", tc.mod)
		cfg.Outboxes[0].MessageNullFields = tc.nulls
		cfg.MessagePrefix = AllPrefixes
		d := New(cfg)
		d.tx = &Tx{CommitLSN: 0x100}
		ev := d.envelopeEvent(0x90, "p", []byte(tc.content))
		switch {
		case tc.bad == "" && ev.Bad != nil:
			t.Errorf("%s: bad: %v", tc.content, ev.Bad)
		case tc.bad != "" && (ev.Bad == nil || !strings.Contains(ev.Bad.Error(), tc.bad)):
			t.Errorf("%s: %v, want it bad naming %q", tc.content, ev.Bad, tc.bad)
		case tc.bad == "" && string(ev.Message) != tc.content:
			t.Errorf("%s: the event's content is %s", tc.content, ev.Message)
		}
	}
}

// An event timestamp Kafka Connect refuses (before 1970, where Debezium
// stops) or the Kafka client cannot write (after 2262) makes the event
// bad, naming the column; others are the record's timestamp.
func TestDecodeEventTimestampRange(t *testing.T) {
	cfg := outboxConfig("public", func(o *Outbox) { o.Columns.Timestamp = "created_at" })
	rel := relationFrame(1, "public", "outbox", "id", "aggregatetype", "aggregateid", "type", "payload", "created_at")
	binary.BigEndian.PutUint32(rel[len(rel)-8:], TypeTimestamp)
	for ts, bad := range map[string]bool{
		"2026-12-05 10:00:00": false, "1970-01-01 00:00:00": false, "1969-12-31 23:59:59.999": false, // -1 ms: no timestamp
		"1969-12-31 23:59:59.998": true, "1900-01-01 00:00:00": true, "2300-01-01 00:00:00": true,
	} {
		txs := decodeAll(t, New(cfg), []frame{{0x100, beginFrame(7, 0x200)}, {0x110, rel},
			{0x120, insertFrame(1, "e-1", "A", "k", "T", `{}`, ts)}, {0x200, commitFrame(0x200, 0x210)}})
		ev := txs[0].Events[0]
		switch {
		case bad && (ev.Bad == nil || ev.Bad.Column != "created_at" || !strings.Contains(ev.Bad.Error(), ts)):
			t.Errorf("%s: Bad = %v, want the timestamp refused, naming its column", ts, ev.Bad)
		case !bad && ev.Bad != nil:
			t.Errorf("%s: Bad = %v", ts, ev.Bad)
		case !bad && ev.Timestamp.Format("2006-01-02 15:04:05.999") != ts:
			t.Errorf("%s: the record's timestamp is %s", ts, ev.Timestamp)
		}
	}
}
