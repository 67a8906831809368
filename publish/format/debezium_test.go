package format

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/walstream/walstream/decode"
)

// withCatalog gives o the catalog captured with its frames
// (decode/testdata/<name>/catalog.txt, written from
// replication.DescribeTables), as walstream reads it at startup.
func withCatalog(t *testing.T, name string, o *decode.Outbox) *decode.Outbox {
	t.Helper()
	f, err := os.Open("../../decode/testdata/" + name + "/catalog.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o.Catalog = make(map[string]decode.Catalog)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.SplitN(sc.Text(), "\t", 4)
		if strings.HasPrefix(sc.Text(), "#") || len(p) != 4 || p[0] != o.Name() {
			continue
		}
		o.Catalog[p[1]] = decode.Catalog{NotNull: p[2] == "true", Default: p[3]}
	}
	return o
}

// dbzOutbox is dbz.outbox of the debezium-types frames: a bigint key, a
// nullable jsonb payload, and columns with literal defaults.
func dbzOutbox(t *testing.T, mod func(*decode.Outbox)) *decode.Outbox {
	return withCatalog(t, "debezium-types", outbox("dbz", mod))
}

// textbox is dbz.textbox: an integer key and a text payload whose default
// is 'none'.
func textbox(t *testing.T, mod func(*decode.Outbox)) *decode.Outbox {
	o := outbox("dbz", mod)
	o.Table = "textbox"
	return withCatalog(t, "debezium-types", o)
}

type dbzRecord struct{ topic, key, value, headers string }

// recordsOf decodes the debezium-types frames with the given mappings and
// encodes every event.
func recordsOf(t *testing.T, enc Encoding, outboxes ...*decode.Outbox) []dbzRecord {
	t.Helper()
	r, err := NewRouter(enc, nil, outboxes...)
	if err != nil {
		t.Fatal(err)
	}
	var out []dbzRecord
	for _, ev := range framesEvents(t, "debezium-types", decode.Config{Outboxes: outboxes}) {
		if ev.Bad != nil {
			t.Fatalf("event %s: %v", ev.ID, ev.Bad)
		}
		rec, err := r.Record(context.Background(), &ev)
		if err != nil {
			t.Fatalf("event %s: %v", ev.ID, err)
		}
		var hs []string
		for _, h := range rec.Headers {
			v := string(h.Value)
			if h.Value == nil {
				v = "<null>"
			}
			hs = append(hs, h.Key+"="+v)
		}
		v := string(rec.Value)
		if rec.Value == nil {
			v = "<null>"
		}
		out = append(out, dbzRecord{rec.Topic, string(rec.Key), v, strings.Join(hs, ",")})
	}
	return out
}

func checkRecords(t *testing.T, got, want []dbzRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d:\n%q", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d:\n got %q\nwant %q", i, got[i], want[i])
		}
	}
}

// The payload of d..1 as Postgres 15 sends jsonb: keys by length, then
// bytes; numbers as written.
const dbzPayload = `{"big": 12345678.9, "seq": 1, "long": 3000000000, "none": null, "tags": [], "price": 10.50, "small": 0.001, "nested": {"a": null, "b": [1, 2]}}`

// The tests below fix what Debezium 3.6.1 writes for the debezium-types
// frames; `make compat` runs the same rows and settings through Debezium
// beside walstream (compat/golden_test.go, the "golden debezium ..." and
// "golden textbox ..." cases).

// Keys, NULL payloads and an empty route-by value, under each converter.
//
//   - Key: EventRouterDelegate.defineRecordKey puts the key column's value
//     with the column's schema (defineRecordKeySchema) in the record; a
//     bigint is an INT64, which JsonConverter.convertToJson writes as a JSON
//     number and StringConverter as Long.toString.
//   - A NULL payload: with route.tombstone.on.empty.payload off the router
//     keeps the value null with the payload column's schema;
//     StringConverter.fromConnectData writes null (no value), JsonConverter
//     the JSON null, or with schemas {"schema":...,"payload":null}.
//   - An empty aggregatetype: RegexRouter's (?<routedByValue>.*) matches the
//     empty string, so the topic is outbox.event.
func TestDebeziumKeysAndNulls(t *testing.T) {
	const (
		id1 = "id=d0000000-0000-0000-0000-000000000001"
		id2 = "id=d0000000-0000-0000-0000-000000000002"
		id3 = "id=d0000000-0000-0000-0000-000000000003"
		p3  = `{"items": [{"n": 1}, {"n": 2}], "mixed": [1, "a"]}`
	)
	t.Run("string converter", func(t *testing.T) {
		checkRecords(t, recordsOf(t, Encoding{}, dbzOutbox(t, nil)), []dbzRecord{
			{"outbox.event.Order", "4711", dbzPayload, id1},
			{"outbox.event.Order", "-5", "<null>", id2},
			{"outbox.event.", "9", p3, id3},
		})
	})
	t.Run("json converter", func(t *testing.T) {
		checkRecords(t, recordsOf(t, Encoding{Key: JSON, Value: JSON}, dbzOutbox(t, nil)), []dbzRecord{
			{"outbox.event.Order", "4711", jsonText(dbzPayload), id1},
			{"outbox.event.Order", "-5", "null", id2},
			{"outbox.event.", "9", jsonText(p3), id3},
		})
	})
	// JsonConverter.asJsonSchema: type, optional, name, version, in that
	// order; Debezium names jsonb io.debezium.data.Json, version 1
	// (SchemaFactory.datatypeJsonSchema); the key column is NOT NULL, so
	// its schema is required.
	t.Run("json converter with schemas", func(t *testing.T) {
		const key = `{"schema":{"type":"int64","optional":false},"payload":`
		const val = `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":`
		checkRecords(t, recordsOf(t, Encoding{Key: JSONSchema, Value: JSONSchema}, dbzOutbox(t, nil)), []dbzRecord{
			{"outbox.event.Order", key + "4711}", val + jsonText(dbzPayload) + "}", id1},
			{"outbox.event.Order", key + "-5}", val + "null}", id2},
			{"outbox.event.", key + "9}", val + jsonText(p3) + "}", id3},
		})
	})
	// A Connect worker sets key.converter and value.converter apart: a
	// string key with a JSON value keys by "4711", as StringConverter does.
	t.Run("string key, json value with schemas", func(t *testing.T) {
		got := recordsOf(t, Encoding{Key: String, Value: JSONSchema}, dbzOutbox(t, nil))
		if got[0].key != "4711" || !strings.HasPrefix(got[0].value, `{"schema":{"type":"string"`) {
			t.Fatalf("record 0 = %q", got[0])
		}
	})
}

func jsonText(s string) string { return string(jsonString(nil, []byte(s))) }

// Additional fields take their column's Connect type and, for a NULL, the
// column's default: EventRouterDelegate reads them with Struct.get, which
// returns the schema's default for a null value, and Debezium's
// PostgresDefaultValueConverter gives the schema the column's literal
// default ('pending'::text is "pending", 3, true; numeric 12.5 at scale 2).
// Struct.toString leaves null fields out; SimpleHeaderConverter writes a
// header as the value's string form. A numeric(10,2) is a Connect Decimal:
// JsonConverter (decimal.format=BASE64) writes the unscaled value's
// BigInteger.toByteArray in base64, 123450 = 01 E2 3A = "AeI6", and 1250 =
// 04 E2 = "BOI="; StringConverter BigDecimal.toString, 1234.50. A double
// precision 0.1 is Double.toString's 0.1, and 1e7 is 1.0E7.
func TestDebeziumAdditionalFieldsAndDefaults(t *testing.T) {
	mod := func(o *decode.Outbox) {
		o.Additional = placement(t, "amount:envelope,ratio:envelope,urgent:envelope,status:header,attempts:header,note:header")
	}
	t.Run("string converter", func(t *testing.T) {
		got := recordsOf(t, Encoding{}, dbzOutbox(t, mod))
		checkRecords(t, got, []dbzRecord{
			{"outbox.event.Order", "4711", "Struct{payload=" + dbzPayload + ",amount=1234.50,ratio=0.1,urgent=true}",
				"id=d0000000-0000-0000-0000-000000000001,status=pending,attempts=3,note=n"},
			// The payload is NULL, so Struct.toString leaves it out.
			{"outbox.event.Order", "-5", "Struct{amount=12.50,ratio=1.0E7,urgent=true}",
				"id=d0000000-0000-0000-0000-000000000002,status=pending,attempts=3,note=<null>"},
			{"outbox.event.", "9", `Struct{payload={"items": [{"n": 1}, {"n": 2}], "mixed": [1, "a"]},amount=12.50,urgent=true}`,
				"id=d0000000-0000-0000-0000-000000000003,status=pending,attempts=3,note=<null>"},
		})
	})
	t.Run("json converter", func(t *testing.T) {
		got := recordsOf(t, Encoding{Key: JSON, Value: JSON}, dbzOutbox(t, mod))
		checkRecords(t, got[:2], []dbzRecord{
			{"outbox.event.Order", "4711", `{"payload":` + jsonText(dbzPayload) + `,"amount":"AeI6","ratio":0.1,"urgent":true}`,
				"id=d0000000-0000-0000-0000-000000000001,status=pending,attempts=3,note=n"},
			{"outbox.event.Order", "-5", `{"payload":null,"amount":"BOI=","ratio":1.0E7,"urgent":true}`,
				"id=d0000000-0000-0000-0000-000000000002,status=pending,attempts=3,note=<null>"},
		})
	})
	// The envelope is a struct named after the after-struct's schema with
	// the route-by value spliced in (EventRouterDelegate.getSchemaName:
	// <topic.prefix>.<schema>.<table>.<value>.Value), required; its fields
	// are payload and the envelope columns with their column schemas,
	// defaults included (asJsonSchema writes "default" after "parameters").
	t.Run("json converter with schemas", func(t *testing.T) {
		got := recordsOf(t, Encoding{Key: JSONSchema, Value: JSONSchema, SchemaPrefix: "dbserver1"}, dbzOutbox(t, mod))
		want := `{"schema":{"type":"struct","fields":[` +
			`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
			`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"default":"BOI=","field":"amount"},` +
			`{"type":"double","optional":true,"field":"ratio"},` +
			`{"type":"boolean","optional":true,"default":true,"field":"urgent"}` +
			`],"optional":false,"name":"dbserver1.dbz.outbox.Order.Value"},"payload":{"payload":null,"amount":"BOI=","ratio":1.0E7,"urgent":true}}`
		if got[1].value != want {
			t.Fatalf("value\n got %s\nwant %s", got[1].value, want)
		}
	})
}

// table.expand.json.payload, as EventRouterDelegate and JsonSchemaData do
// it. Jackson reads 12345678.9 and 10.50 as doubles, which Jackson writes
// with Double.toString: 1.23456789E7 and 10.5; 3000000000 does not fit an
// int, so it is a long (INT64). With the default behaviours a null field
// and an empty array get no schema and are dropped (toConnectSchema returns
// null for them); optional_bytes and optional_string keep them. An object
// is a struct named by its path (payload.nested). A mixed array [1, "a"]
// makes toConnectSchema throw, so d..3's payload stays a string.
func TestDebeziumExpandJSONPayload(t *testing.T) {
	expand := func(o *decode.Outbox) { o.ExpandJSONPayload = true }
	const dropped = `{"big":1.23456789E7,"seq":1,"long":3000000000,"price":10.5,"small":0.001,"nested":{"b":[1,2]}}`
	t.Run("json converter", func(t *testing.T) {
		got := recordsOf(t, Encoding{Key: JSON, Value: JSON}, dbzOutbox(t, expand))
		checkRecords(t, got, []dbzRecord{
			{"outbox.event.Order", "4711", dropped, "id=d0000000-0000-0000-0000-000000000001"},
			{"outbox.event.Order", "-5", "null", "id=d0000000-0000-0000-0000-000000000002"},
			{"outbox.event.", "9", jsonText(`{"items": [{"n": 1}, {"n": 2}], "mixed": [1, "a"]}`), "id=d0000000-0000-0000-0000-000000000003"},
		})
	})
	t.Run("null and empty array behaviours keep them", func(t *testing.T) {
		got := recordsOf(t, Encoding{Key: JSON, Value: JSON}, dbzOutbox(t, func(o *decode.Outbox) {
			o.ExpandJSONPayload, o.ExpandJSONNulls, o.ExpandJSONEmptyArrays = true, true, true
		}))
		const want = `{"big":1.23456789E7,"seq":1,"long":3000000000,"none":null,"tags":[],"price":10.5,"small":0.001,"nested":{"a":null,"b":[1,2]}}`
		if got[0].value != want {
			t.Fatalf("value\n got %s\nwant %s", got[0].value, want)
		}
	})
	// JsonConverter.asJsonSchema of the inferred schema: every field
	// optional (JsonSchemaData uses the OPTIONAL_* schemas), field last.
	t.Run("json converter with schemas", func(t *testing.T) {
		got := recordsOf(t, Encoding{Key: JSONSchema, Value: JSONSchema}, dbzOutbox(t, expand))
		const want = `{"schema":{"type":"struct","fields":[` +
			`{"type":"double","optional":true,"field":"big"},{"type":"int32","optional":true,"field":"seq"},` +
			`{"type":"int64","optional":true,"field":"long"},{"type":"double","optional":true,"field":"price"},` +
			`{"type":"double","optional":true,"field":"small"},` +
			`{"type":"struct","fields":[{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"b"}],"optional":true,"name":"payload.nested","field":"nested"}` +
			`],"optional":true,"name":"payload"},"payload":` + dropped + `}`
		if got[0].value != want {
			t.Fatalf("value\n got %s\nwant %s", got[0].value, want)
		}
	})
	// Struct.toString under StringConverter: nulls left out, lists as
	// List.toString.
	t.Run("string converter", func(t *testing.T) {
		got := recordsOf(t, Encoding{}, dbzOutbox(t, expand))
		const want = `Struct{big=1.23456789E7,seq=1,long=3000000000,price=10.5,small=0.001,nested=Struct{b=[1, 2]}}`
		if got[0].value != want {
			t.Fatalf("value\n got %s\nwant %s", got[0].value, want)
		}
	})
}

// "Empty" is Java's String.trim().isEmpty(): EventRouterDelegate makes a
// tombstone of a payload that is null or trims to nothing, and trim strips
// only characters up to U+0020, so U+0001 and tab are blank, and NBSP,
// U+3000 and U+0085 are not. A NULL payload whose column has a default is
// the default (Struct.get), not a tombstone. The integer key is a JSON
// number; the column is nullable, so its schema is optional.
func TestDebeziumTombstonesAndTrim(t *testing.T) {
	tomb := func(o *decode.Outbox) { o.TombstoneOnEmptyPayload = true }
	got := recordsOf(t, Encoding{Key: JSONSchema, Value: JSON}, textbox(t, tomb))
	key := func(n string) string { return `{"schema":{"type":"int32","optional":true},"payload":` + n + `}` }
	checkRecords(t, got, []dbzRecord{
		{"outbox.event.Text", key("1"), "<null>", "id=t-1"},
		{"outbox.event.Text", key("2"), "<null>", "id=t-2"},
		{"outbox.event.Text", key("3"), "\"\u00a0\"", "id=t-3"},
		{"outbox.event.Text", key("4"), "\"\u3000\"", "id=t-4"},
		{"outbox.event.Text", key("5"), "\"\u0085\"", "id=t-5"},
		{"outbox.event.Text", key("6"), `"none"`, "id=t-6"},
	})
	// Without the option, a blank payload is published as it is, and its
	// column schema carries the default.
	got = recordsOf(t, Encoding{Key: String, Value: JSONSchema}, textbox(t, nil))
	if w := `{"schema":{"type":"string","optional":true,"default":"none"},"payload":"   "}`; got[0].value != w || got[0].key != "1" {
		t.Fatalf("record 0 = %q, want key 1 and value %s", got[0], w)
	}
}

// A timestamp column is Debezium's io.debezium.time.MicroTimestamp
// (time.precision.mode=adaptive, precision 6): microseconds since the
// epoch, the value read as UTC, an INT64 that JsonConverter writes as a
// number and StringConverter as Long.toString. A timestamptz is a
// ZonedTimestamp string: the instant in UTC with the column's precision in
// fraction digits, 6 for a timestamptz without one (compat case "new
// types json schemas").
func TestDebeziumTimestampField(t *testing.T) {
	cfg := decode.Config{Outboxes: []*decode.Outbox{outbox("public", func(o *decode.Outbox) {
		o.Additional = placement(t, "occurred_at:envelope")
	})}}
	r, err := NewRouter(Encoding{Key: JSON, Value: JSONSchema, SchemaPrefix: "p"}, nil, cfg.Outboxes...)
	if err != nil {
		t.Fatal(err)
	}
	evs := framesEvents(t, "additional-fields", cfg)
	rec, err := r.Record(context.Background(), &evs[0])
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"occurred_at"}],"optional":false,"name":"p.public.outbox.Order.Value"},` +
		`"payload":{"payload":"{\"seq\": 12}","occurred_at":1795413601000000}}`
	if string(rec.Value) != want {
		t.Fatalf("value\n got %s\nwant %s", rec.Value, want)
	}
	cfg.Outboxes[0].Additional = placement(t, "created_at:header")
	r, err = NewRouter(Encoding{}, nil, cfg.Outboxes...)
	if err != nil {
		t.Fatal(err)
	}
	evs = framesEvents(t, "additional-fields", cfg)
	if rec, err = r.Record(context.Background(), &evs[0]); err != nil {
		t.Fatal(err)
	}
	if got, want := string(rec.Headers[1].Value), "2026-11-23T06:00:00.123456Z"; rec.Headers[1].Key != "created_at" || got != want {
		t.Fatalf("header %s=%s, want created_at=%s", rec.Headers[1].Key, got, want)
	}
}

// Payloads Debezium does not expand, from EventRouterDelegate.apply:
// parseJsonPayload throws for a payload not starting with { or [, and a
// throwing toConnectSchema (a mixed array) keeps the string with the
// column's schema. When toConnectSchema succeeds but toConnectData fails
// (a top-level array, an integer beyond 64 bits), the payload stays a
// string with the inferred schema: StringConverter ignores schemas and
// writes the string, JsonConverter's convertToJson throws and Debezium
// stops, which walstream reports as bad input. A top-level [] gets a null
// schema: JsonConverter writes the string with "schema":null.
func TestDebeziumExpandFallbacks(t *testing.T) {
	jsonb := &decode.Column{Name: "payload", Type: decode.TypeJSONB, TypMod: -1}
	for _, tc := range []struct {
		payload               string
		str, json, jsonSchema string // "<error>": bad input
	}{
		{` {"a": 1}`, ` {"a": 1}`, `" {\"a\": 1}"`, `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":" {\"a\": 1}"}`},
		{`{"m": [1, "a"]}`, `{"m": [1, "a"]}`, `"{\"m\": [1, \"a\"]}"`, `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"m\": [1, \"a\"]}"}`},
		{`[1, 2]`, `[1, 2]`, "<error>", "<error>"},
		{`{"n": 123456789012345678901234567890}`, `{"n": 123456789012345678901234567890}`, "<error>", "<error>"},
		{`[]`, `[]`, `"[]"`, `{"schema":null,"payload":"[]"}`},
	} {
		o := outbox("public", func(o *decode.Outbox) { o.ExpandJSONPayload = true })
		ev := decode.Event{Source: o, Identity: decode.Identity{ID: []byte("e-1")}, AggregateType: []byte("Order"), AggregateID: []byte("o-1"),
			Payload: []byte(tc.payload), PayloadColumn: jsonb}
		for _, f := range []struct {
			format Converter
			want   string
		}{{String, tc.str}, {JSON, tc.json}, {JSONSchema, tc.jsonSchema}} {
			r, err := NewRouter(Encoding{Value: f.format}, nil, o)
			if err != nil {
				t.Fatal(err)
			}
			got := "<error>"
			if rec, err := r.Record(context.Background(), &ev); err == nil {
				got = string(rec.Value)
			}
			if got != f.want {
				t.Errorf("%s under %v = %s, want %s", tc.payload, f.format, got, f.want)
			}
		}
	}
}

// jsonbColumn is a nullable jsonb payload column, and textColumn a
// nullable text column.
var (
	jsonbColumn = &decode.Column{Name: "payload", Type: decode.TypeJSONB, TypMod: -1}
	textColumn  = &decode.Column{Name: "aggregateid", Type: decode.TypeText, TypMod: -1}
)

// astralEvent is an event of compat's astral cases: key, payload as
// Postgres sends the jsonb, and the type column as the eventType header.
func astralEvent(o *decode.Outbox, id, key, eventType, payload string) decode.Event {
	return decode.Event{Source: o, Identity: decode.Identity{ID: []byte(id)}, AggregateType: []byte("Astral"),
		AggregateID: []byte(key), KeyColumn: textColumn, Payload: []byte(payload), PayloadColumn: jsonbColumn,
		Fields: []decode.Field{{Name: "eventType", Placement: decode.PlaceHeader, Column: textColumn, Value: []byte(eventType)}}}
}

// Characters outside the Basic Multilingual Plane, as Debezium 3.6.1 on
// Kafka Connect 4.3.1 wrote them (compat cases "astral json", "astral
// expand json", "astral expand json schemas"): JsonConverter's Jackson
// escapes each as its surrogate pair, in keys, string values, expanded
// payloads' values, field names and struct names alike;
// SimpleHeaderConverter and StringConverter write their UTF-8 bytes.
func TestDebeziumAstral(t *testing.T) {
	const a1 = `{"n": 1, "emoji": "😀", "nested": {"list": ["🎉", "x", "é"], "deeper": {"text": "a😀b 🚀 𝄞 🎉"}}}`
	const a4 = `{"😀key": {"🚀": [1]}}`
	plain := outbox("public", nil)
	expanded := outbox("public", func(o *decode.Outbox) { o.ExpandJSONPayload = true })
	for _, tc := range []struct {
		name                       string
		o                          *decode.Outbox
		enc                        Encoding
		key, payload               string
		wantKey, wantValue, header string
	}{
		{"json", plain, Encoding{Key: JSON, Value: JSON}, "😀-1", a1, `"\uD83D\uDE00-1"`,
			`"{\"n\": 1, \"emoji\": \"\uD83D\uDE00\", \"nested\": {\"list\": [\"\uD83C\uDF89\", \"x\", \"é\"], \"deeper\": {\"text\": \"a\uD83D\uDE00b \uD83D\uDE80 \uD834\uDD1E \uD83C\uDF89\"}}}"`, "🚀 launched"},
		{"expanded json", expanded, Encoding{Key: JSON, Value: JSON}, "😀-1", a1, `"\uD83D\uDE00-1"`,
			`{"n":1,"emoji":"\uD83D\uDE00","nested":{"list":["\uD83C\uDF89","x","é"],"deeper":{"text":"a\uD83D\uDE00b \uD83D\uDE80 \uD834\uDD1E \uD83C\uDF89"}}}`, "🚀 launched"},
		{"expanded json, a field name", expanded, Encoding{Key: JSON, Value: JSON}, "𝄞", a4, `"\uD834\uDD1E"`,
			`{"\uD83D\uDE00key":{"\uD83D\uDE80":[1]}}`, "plain"},
		{"expanded json with schemas, a field name", expanded, Encoding{Key: JSONSchema, Value: JSONSchema}, "k-4", a4,
			`{"schema":{"type":"string","optional":true},"payload":"k-4"}`,
			`{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"\uD83D\uDE80"}],` +
				`"optional":true,"name":"payload.\uD83D\uDE00key","field":"\uD83D\uDE00key"}],"optional":true,"name":"payload"},"payload":{"\uD83D\uDE00key":{"\uD83D\uDE80":[1]}}}`, "plain"},
		{"expanded string", expanded, Encoding{}, "😀-1", a1, "😀-1",
			`Struct{n=1,emoji=😀,nested=Struct{list=[🎉, x, é],deeper=Struct{text=a😀b 🚀 𝄞 🎉}}}`, "🚀 launched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRouter(tc.enc, nil, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			ev := astralEvent(tc.o, "a1", tc.key, tc.header, tc.payload)
			rec, err := r.Record(context.Background(), &ev)
			if err != nil {
				t.Fatal(err)
			}
			if string(rec.Key) != tc.wantKey || string(rec.Value) != tc.wantValue {
				t.Errorf("key %s value %s\nwant key %s value %s", rec.Key, rec.Value, tc.wantKey, tc.wantValue)
			}
			if h := rec.Headers[len(rec.Headers)-1]; h.Key != "eventType" || string(h.Value) != tc.header {
				t.Errorf("header %s=%s, want eventType=%s", h.Key, h.Value, tc.header)
			}
		})
	}
}

// Payloads Debezium 3.6.1 does not expand, as it wrote them (compat cases
// "expand unexpandable string", "... json", "... json schemas"): the
// router logs "JSON expansion failed" and publishes the payload as a
// string with its column's schema, whatever came before. The first is the
// issue's {"b": [1, 2.50, 0.0, 1e21]} as jsonb sends it: an array of an
// int and doubles (and an integer beyond 64 bits), which toConnectSchema
// refuses before anything looks at the big integer.
func TestDebeziumUnexpandable(t *testing.T) {
	deep := strings.Repeat(`{"a": `, 1000) + `{"n": 1}` + strings.Repeat("}", 1000)
	long := `{"n": 1` + strings.Repeat("0", 1000) + `}`
	o := outbox("public", func(o *decode.Outbox) { o.ExpandJSONPayload = true })
	for _, payload := range []string{`{"b": [1, 2.50, 0.0, 1000000000000000000000]}`, `{"a": [1, 123456789012345678901234567890]}`,
		`{"a": [{"x": 1}, 2]}`, `{"a": [null]}`, `{"b": [3000000000, 1]}`, long, deep} {
		for _, f := range []struct {
			format Converter
			want   string
		}{
			{String, payload},
			{JSON, jsonText(payload)},
			{JSONSchema, `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":` + jsonText(payload) + `}`},
		} {
			r, err := NewRouter(Encoding{Value: f.format}, nil, o)
			if err != nil {
				t.Fatal(err)
			}
			ev := astralEvent(o, "p1", "k-1", "T", payload)
			rec, err := r.Record(context.Background(), &ev)
			if err != nil {
				t.Errorf("%.60s under %v: %v", payload, f.format, err)
				continue
			}
			if string(rec.Value) != f.want {
				t.Errorf("%.60s under %v = %.200s, want %.200s", payload, f.format, rec.Value, f.want)
			}
		}
	}
	// The first as Debezium wrote it, not through jsonText.
	r, err := NewRouter(Encoding{Value: JSON}, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	ev := astralEvent(o, "p1", "k-1", "T", `{"b": [1, 2.50, 0.0, 1000000000000000000000]}`)
	if rec, err := r.Record(context.Background(), &ev); err != nil || string(rec.Value) != `"{\"b\": [1, 2.50, 0.0, 1000000000000000000000]}"` {
		t.Errorf("the issue's payload: %s, %v", rec.Value, err)
	}
}

// Debezium's router keeps one envelope schema per
// table.field.event.schema.version, made for the first event of the
// version (compat case "expand schema version json schemas"): a later
// event of that version whose expanded payload has another schema stops
// Debezium (Struct.put: "Struct schemas do not match"), so walstream
// stops there too; the records before it are Debezium's.
func TestDebeziumSchemaVersionPayloads(t *testing.T) {
	o := outbox("public", func(o *decode.Outbox) {
		o.ExpandJSONPayload = true
		o.Columns.SchemaVersion = "version"
		o.Additional = placement(t, "type:envelope")
	})
	r, err := NewRouter(Encoding{Key: JSONSchema, Value: JSONSchema, SchemaPrefix: "p"}, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	schema := func(field string, v int) string {
		return fmt.Sprintf(`{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":true,"field":"%s"}],"optional":true,"name":"payload","field":"payload"},`+
			`{"type":"string","optional":true,"field":"type"}],"optional":false,"name":"p.public.outbox.Payload.Value","version":%d},"payload":{"payload":`, field, v)
	}
	for i, tc := range []struct{ payload, version, want string }{
		{`{"a": 1}`, "1", schema("a", 1) + `{"a":1},"type":"T"}}`},
		{`{"a": 2}`, "1", schema("a", 1) + `{"a":2},"type":"T"}}`},
		{`{"n": 1}`, "2", schema("n", 2) + `{"n":1},"type":"T"}}`},
		{`{"b": "x"}`, "1", ""},
	} {
		ev := decode.Event{Source: o, Identity: decode.Identity{ID: []byte("v"), Table: "public.outbox"}, AggregateType: []byte("Payload"), AggregateID: []byte("k"),
			Payload: []byte(tc.payload), PayloadColumn: jsonbColumn, SchemaVersion: []byte(tc.version),
			Fields: []decode.Field{{Name: "type", Placement: decode.PlaceEnvelope, Column: textColumn, Value: []byte("T")}}}
		rec, err := r.Record(context.Background(), &ev)
		var ve *VersionSchemaError
		switch {
		case tc.want == "" && !errors.As(err, &ve):
			t.Errorf("event %d: %v, want a VersionSchemaError", i+1, err)
		case tc.want != "" && err != nil:
			t.Errorf("event %d: %v", i+1, err)
		case tc.want != "" && string(rec.Value) != tc.want:
			t.Errorf("event %d:\n got %s\nwant %s", i+1, rec.Value, tc.want)
		}
	}
}

// Jackson writes nothing nested deeper than 1,000 (compat cases "expand
// deep ..."): with schemas, a payload object nested 499 deep is written
// and one 500 deep stops Debezium; without, 1,000 deep is written, and one
// 1,001 deep Jackson does not read, so it stays a string.
func TestDebeziumExpandDepth(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`{"a": `, n-1) + `{"n": 1}` + strings.Repeat("}", n-1) }
	o := outbox("public", func(o *decode.Outbox) { o.ExpandJSONPayload = true })
	for _, tc := range []struct {
		format Converter
		depth  int
		ok     bool
	}{{JSONSchema, 499, true}, {JSONSchema, 500, false}, {JSON, 1000, true}, {JSON, 1001, true}} {
		r, err := NewRouter(Encoding{Value: tc.format}, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		ev := astralEvent(o, "p1", "k-1", "T", deep(tc.depth))
		_, err = r.Record(context.Background(), &ev)
		if (err == nil) != tc.ok {
			t.Errorf("%d deep under %v: %v, want ok %v", tc.depth, tc.format, err, tc.ok)
		}
	}
}
