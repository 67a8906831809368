package decode

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
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
	var txs []*Tx
	for _, f := range frames {
		tx, err := d.Decode(f.lsn, f.data)
		if err != nil {
			t.Fatalf("Decode at %s: %v", f.lsn, err)
		}
		if tx != nil {
			txs = append(txs, tx)
		}
	}
	if d.InTx() {
		t.Fatal("a transaction is still open after the last frame")
	}
	return txs
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

func TestDecodeNullAggregateType(t *testing.T) {
	d := New(outboxConfig("public", nil))
	var err error
	var at pglogrepl.LSN
	for _, f := range readFrames(t, "null-aggregatetype") {
		if _, err = d.Decode(f.lsn, f.data); err != nil {
			at = f.lsn
			break
		}
	}
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
	var err error
	for _, f := range readFrames(t, "basic") {
		if _, err = d.Decode(f.lsn, f.data); err != nil {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "column aggregate_id: outbox column is missing") || !strings.Contains(err.Error(), "table public.outbox") {
		t.Fatalf("err = %v, want the missing column named", err)
	}
}

// Large transactions are handed on in parts of MaxPartEvents; only the
// last is Final and carries the end LSN.
func TestDecodeSplit(t *testing.T) {
	cfg := outboxConfig("public", nil)
	cfg.MaxPartEvents = 2
	txs := decodeAll(t, New(cfg), readFrames(t, "multirow"))
	var sizes []int
	for _, tx := range txs {
		sizes = append(sizes, len(tx.Events))
	}
	if len(txs) != 3 || sizes[0] != 2 || sizes[1] != 2 || sizes[2] != 1 {
		t.Fatalf("parts of %v events, want [2 2 1]", sizes)
	}
	if txs[0].Final || txs[1].Final || !txs[2].Final || txs[2].EndLSN == 0 {
		t.Fatal("only the last part may be Final")
	}
	if txs[0].CommitLSN != txs[2].CommitLSN || txs[1].Events[0].Ordinal != 3 {
		t.Fatal("parts must share the commit LSN and continue the ordinals")
	}
}

// Replays at or below the checkpoint are dropped: whole transactions
// before it, and the published events of a partly published transaction.
func TestDecodeResume(t *testing.T) {
	frames := readFrames(t, "basic")
	all := decodeAll(t, New(outboxConfig("public", nil)), frames)

	cfg := outboxConfig("public", nil)
	cfg.Skip = skipBefore(all[0].EndLSN, 0, 0)
	d := New(cfg)
	txs := decodeAll(t, d, frames)
	if len(txs) != 1 || string(txs[0].Events[0].ID) != "33333333-3333-3333-3333-333333333333" || d.Skipped() != 2 {
		t.Fatalf("resuming after the first transaction: %d transactions, %d skipped", len(txs), d.Skipped())
	}

	cfg.Skip = skipBefore(1, all[0].CommitLSN, 1)
	d = New(cfg)
	txs = decodeAll(t, d, frames)
	if len(txs) != 2 || len(txs[0].Events) != 1 || txs[0].Events[0].Ordinal != 2 || d.Skipped() != 1 {
		t.Fatalf("resuming inside the first transaction: got %d transactions, %d skipped", len(txs), d.Skipped())
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
// with the rows of their transaction; a non-transactional one is refused.
func TestDecodeLogicalMessages(t *testing.T) {
	cfg := outboxConfig("public", nil)
	cfg.MessagePrefix = "walstream"
	d := New(cfg)
	var txs []*Tx
	var err error
	for _, f := range readFrames(t, "logical-message") {
		var tx *Tx
		if tx, err = d.Decode(f.lsn, f.data); err != nil {
			break
		}
		if tx != nil {
			txs = append(txs, tx)
		}
	}
	if len(txs) != 1 {
		t.Fatalf("got %d transactions before the error, want 1", len(txs))
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
	if err == nil || !strings.Contains(err.Error(), `prefix "walstream" is not transactional`) {
		t.Fatalf("non-transactional message: err = %v", err)
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
		d := New(cfg)
		var err error
		var txs []*Tx
		for _, f := range readFrames(t, "insert-delete-update") {
			var tx *Tx
			if tx, err = d.Decode(f.lsn, f.data); err != nil {
				break
			}
			if tx != nil {
				txs = append(txs, tx)
			}
		}
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
			var err error
			for _, f := range readFrames(t, "additional-fields") {
				if _, err = d.Decode(f.lsn, f.data); err != nil {
					break
				}
			}
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
