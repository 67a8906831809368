package decode

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// Frames of pgoutput protocol version 1, for cases no capture has.
func beginFrame(xid uint32, commit pglogrepl.LSN) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint32(b, xid)
}

func commitFrame(commit, end pglogrepl.LSN) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, 0)
}

func messageFrame(transactional bool, lsn pglogrepl.LSN, prefix, content string) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	b = append(append(b, prefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

func relationFrame(id uint32, schema, table string, cols ...string) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(append(b, schema...), 0)
	b = append(append(b, table...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = append(append(b, c...), 0)
		b = binary.BigEndian.AppendUint32(b, TypeText)
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return b
}

func insertFrame(id uint32, vals ...string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

// A control message is a request of its transaction, handed on with its
// last part, never an outbox event whatever the message prefix; a replay
// of a transaction Kafka has drops it; one emitted outside a transaction
// is refused, in a Tx of its own.
func TestDecodeControlMessages(t *testing.T) {
	cfg := outboxConfig("public", nil)
	cfg.MessagePrefix = AllPrefixes
	cfg.MaxPartEvents = 1
	frames := []frame{
		{0x100, beginFrame(7, 0x200)},
		{0x110, messageFrame(true, 0x110, ControlPrefix, `{"action":"reemit","id":"r-1","stream":"s","table":"public.outbox","where":"aggregatetype = 'Order'"}`)},
		{0x120, messageFrame(true, 0x120, "walstream", `{"id":"m-1","aggregatetype":"A","aggregateid":"k","payload":1}`)},
		{0x130, messageFrame(true, 0x130, "walstream", `{"id":"m-2","aggregatetype":"A","aggregateid":"k","payload":2}`)},
		{0x140, messageFrame(true, 0x140, ControlPrefix, `{"action":"cancel","id":"r-0"}`)},
		{0x200, commitFrame(0x200, 0x210)},
		{0x300, messageFrame(false, 0x300, ControlPrefix, `{"action":"reemit","id":"r-2","table":"public.outbox"}`)},
	}
	txs := decodeAll(t, New(cfg), frames)
	if len(txs) != 3 {
		t.Fatalf("%d transactions, want a part, the last part and the refused message: %+v", len(txs), txs)
	}
	if len(txs[0].Requests) != 0 || txs[0].Final || len(txs[0].Events) != 1 {
		t.Errorf("first part: %+v", txs[0])
	}
	last := txs[1]
	if !last.Final || len(last.Events) != 1 || len(last.Requests) != 2 {
		t.Fatalf("last part: %+v", last)
	}
	want := Request{Action: ActionReemit, ID: "r-1", Stream: "s", Table: "public.outbox", Where: "aggregatetype = 'Order'", Origin: OriginCLI, LSN: 0x110}
	if !reflect.DeepEqual(last.Requests[0], want) {
		t.Errorf("request = %+v, want %+v", last.Requests[0], want)
	}
	if c := last.Requests[1]; c.Action != ActionCancel || c.ID != "r-0" || c.Err != "" {
		t.Errorf("cancel = %+v", c)
	}
	if r := txs[2]; !r.Final || r.EndLSN != 0x301 || len(r.Requests) != 1 || !strings.Contains(r.Requests[0].Err, "not transactional") {
		t.Errorf("non-transactional request: %+v", r)
	}
	// A restart from a checkpoint past the transaction gets no request.
	cfg.Skip = func(lsn pglogrepl.LSN, _ uint64) bool { return lsn < 0x210 }
	for _, tx := range decodeAll(t, New(cfg), frames[:6]) {
		t.Errorf("replay handed on %+v", tx)
	}
	// Nor, after a checkpoint within it, before its last part.
	cfg.Skip = func(lsn pglogrepl.LSN, ord uint64) bool { return lsn == 0x200 && ord <= 1 }
	txs = decodeAll(t, New(cfg), frames[:6])
	if len(txs) != 1 || len(txs[0].Requests) != 2 || len(txs[0].Events) != 1 {
		t.Errorf("replay from within the transaction: %+v", txs)
	}
}

// ParseRequest refuses, with the reason, what the stream cannot act on.
func TestParseRequest(t *testing.T) {
	outboxes := outboxConfig("public", nil).Outboxes
	for _, tc := range []struct{ content, err string }{
		{`{"action":"reemit","id":"r","table":"public.outbox"}`, ""},
		{`{"action":"reemit","id":"r","table":"public.other"}`, `table "public.other" is not an outbox table of this stream (public.outbox)`},
		{`{"action":"reemit","table":"public.outbox"}`, "names no id"},
		{`{"action":"reemit","id":"r","table":"public.outbox","where":"true) OR (true"}`, "closes a parenthesis"},
		{`{"action":"cancel","id":"r"}`, ""},
		{`{"action":"cancel"}`, ""},
		{`{"action":"pause","id":"r"}`, `action "pause" is not reemit or cancel`},
		{`not json`, "is not a request"},
	} {
		r := ParseRequest([]byte(tc.content), 0x10, outboxes)
		if tc.err == "" && r.Err != "" || tc.err != "" && !strings.Contains(r.Err, tc.err) {
			t.Errorf("%s: error %q, want %q", tc.content, r.Err, tc.err)
		}
		if r.ID == "" && r.Action != ActionCancel {
			t.Errorf("%s: a refusal without an id cannot be recorded", tc.content)
		}
	}
}

// A predicate is one expression a query can put in parentheses.
func TestCheckPredicate(t *testing.T) {
	for _, ok := range []string{
		"", "aggregatetype = 'Order' and created_at >= now() - interval '7 days'", "id IN ('a', 'b')",
		`"weird)name" = 'x)'`, "payload->>'a' = 'it''s'", `note = E'\')'`, "a = $$)$$", "a = $t$ ) $t$", "x = 1 -- a comment )",
		"x = 1 /* ) /* nested ) */ */", "(SELECT count(*) FROM t WHERE t.x = outbox.x) > 0", "price$ = 1",
	} {
		if err := CheckPredicate(ok); err != nil {
			t.Errorf("CheckPredicate(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{
		"true) OR (true", "true) UNION SELECT 1 FROM pg_authid WHERE (true", "1=1; DROP TABLE outbox", "(a = 1", "a = 'open",
		`"open = 1`, "a = $$open", "x /* open", "a = 1)", `a = E'\'`, strings.Repeat("x", MaxPredicateBytes+1),
	} {
		if err := CheckPredicate(bad); err == nil {
			t.Errorf("CheckPredicate(%q) accepted it", bad)
		}
	}
}

// Debezium's signals: execute-snapshot of the outbox with its additional
// conditions, several tables, refusals with reasons, stop-snapshot, and
// the signal types walstream does not act on.
func TestSignalRequests(t *testing.T) {
	outboxes := []*Outbox{{Schema: "public", Table: "outbox"}, {Schema: "billing", Table: "outbox"}, {Table: "messages"}}
	got := SignalRequests("ad-hoc-1", SignalExecuteSnapshot, `{"data-collections": ["public.outbox"], "type": "INCREMENTAL",
		"additional-conditions": [{"data-collection": "PUBLIC.OUTBOX", "filter": "aggregatetype = 'Order'"}, {"data-collection": "billing.outbox", "filter": "x"}]}`,
		0x1A2B, outboxes)
	want := []Request{{Action: ActionReemit, ID: "ad-hoc-1@0/1A2B", Table: "public.outbox", Where: "aggregatetype = 'Order'", Origin: "debezium signal ad-hoc-1", LSN: 0x1A2B}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("execute-snapshot = %+v, want %+v", got, want)
	}
	got = SignalRequests("s", SignalExecuteSnapshot, `{"data-collections": [".*\\.outbox", "public.nothing"],
		"additional-conditions": [{"data-collection": ".*", "filter": "a = 1"}, {"data-collection": ".*", "filter": "b = 2"}]}`, 0x10, outboxes)
	if len(got) != 3 || got[0].Table != "public.nothing" || got[0].Err == "" || got[1].Table != "public.outbox" || got[2].Table != "billing.outbox" ||
		got[1].Where != "(a = 1\n) AND (b = 2\n)" || got[1].Err != "" || got[1].ID == got[2].ID || got[0].ID == got[1].ID {
		t.Errorf("regular expressions = %+v", got)
	}
	for _, tc := range []struct{ data, err string }{
		{`{"data-collections": ["public.outbox"], "type": "blocking"}`, "incremental snapshots only"},
		{`{"data-collections": []}`, "names no data-collections"},
		{`{"data-collections": ["public.outbox"], "additional-condition": "a = 1"}`, "additional-condition"},
		{`{"data-collections": ["public.outbox"], "surrogate-key": "x"}`, "primary key only"},
		{`{"data-collections": [1]}`, "not a string"},
		{`{"data-collections": ["("]}`, "not a regular expression"},
		{`not json`, "not JSON"},
		{`{"data-collections": ["public.outbox"], "additional-conditions": [{"data-collection": "public.outbox", "filter": "a = 1; drop table x"}]}`, "semicolon"},
	} {
		got := SignalRequests("s", SignalExecuteSnapshot, tc.data, 0x10, outboxes)
		if len(got) != 1 || got[0].Action != ActionReemit || !strings.Contains(got[0].Err, tc.err) {
			t.Errorf("%s: %+v, want refused with %q", tc.data, got, tc.err)
		}
	}
	stop := SignalRequests("s", SignalStopSnapshot, `{"data-collections": ["billing.outbox"], "type": "incremental"}`, 0x10, outboxes)
	if len(stop) != 1 || stop[0].Action != ActionCancel || stop[0].ID != "" || !reflect.DeepEqual(stop[0].Tables, []string{"billing.outbox"}) {
		t.Errorf("stop-snapshot = %+v", stop)
	}
	if all := SignalRequests("s", SignalStopSnapshot, `{}`, 0x10, outboxes); len(all) != 1 || len(all[0].Tables) != 0 || all[0].Err != "" {
		t.Errorf("stop-snapshot of everything = %+v", all)
	}
	if none := SignalRequests("s", SignalStopSnapshot, `{"data-collections": ["other.t"]}`, 0x10, outboxes); len(none) != 0 {
		t.Errorf("stop-snapshot of another table = %+v", none)
	}
	for _, typ := range []string{"snapshot-window-open", "log", "pause-snapshot"} {
		if got := SignalRequests("s", typ, `{}`, 0x10, outboxes); got != nil {
			t.Errorf("%s = %+v", typ, got)
		}
	}
}

// Rows of Debezium's signal table are requests of their transaction; a
// signal table without Debezium's three columns is refused.
func TestDecodeSignalTable(t *testing.T) {
	cfg := outboxConfig("public", nil)
	cfg.SignalTable = "public.debezium_signal"
	frames := []frame{
		{0x100, beginFrame(7, 0x200)},
		{0, relationFrame(9, "public", "debezium_signal", "id", "type", "data")},
		{0x110, insertFrame(9, "ad-hoc", SignalExecuteSnapshot, `{"data-collections": ["public.outbox"]}`)},
		{0, relationFrame(10, "public", "other", "a")},
		{0x120, insertFrame(10, "x")},
		{0x200, commitFrame(0x200, 0x210)},
		{0x300, beginFrame(8, 0x400)},
		{0, relationFrame(9, "public", "debezium_signal", "id", "type")},
		{0x310, insertFrame(9, "x", "y")},
		{0x400, commitFrame(0x400, 0x410)},
	}
	d := New(cfg)
	txs := decodeAll(t, d, frames)
	if len(txs) != 2 || len(txs[0].Requests) != 1 || txs[0].Requests[0].ID != "ad-hoc@0/110" || txs[0].Requests[0].Err != "" {
		t.Fatalf("signal: %+v", txs)
	}
	if r := txs[1].Requests; len(r) != 1 || !strings.Contains(r[0].Err, "Debezium's has three: id, type and data") {
		t.Errorf("two-column signal table: %+v", r)
	}
	if _, _, ok := d.Unclassified(insertFrame(9, "a", "b")); ok {
		t.Error("the signal table's rows are asked about as a partition's")
	}
}

// A row read by a query maps to the event its INSERT decodes to.
func TestRowsAsInserted(t *testing.T) {
	frames := readFrames(t, "basic")
	cfg := outboxConfig("public", nil)
	live := decodeAll(t, New(cfg), frames)[0].Events[0]
	var rel pglogrepl.RelationMessage
	if err := rel.Decode(frames[1].data[1:]); err != nil {
		t.Fatal(err)
	}
	var cols []Column
	for _, c := range rel.Columns {
		cols = append(cols, Column{Name: c.Name, Type: c.DataType, TypMod: c.TypeModifier})
	}
	rows, err := NewRows(cfg.Outboxes[0], cols, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	vals, _, err := splitTuple(nil, frames[2].data[8:], len(cols))
	if err != nil {
		t.Fatal(err)
	}
	texts := make([][]byte, len(vals))
	for i, v := range vals {
		texts[i] = v.data
	}
	ev, err := rows.Event(texts)
	if err != nil {
		t.Fatal(err)
	}
	live.Identity, ev.Identity = Identity{}, Identity{}
	if !reflect.DeepEqual(ev, live) {
		t.Errorf("row = %+v\nINSERT = %+v", ev, live)
	}
	if _, err := rows.Event(texts[:2]); err == nil {
		t.Error("a row with too few columns mapped")
	}
	if _, err := NewRows(cfg.Outboxes[0], cols[:2], nil, true); err == nil {
		t.Error("a table without the payload column mapped")
	}
}
