package format

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"github.com/walstream/walstream/decode"
)

// The schema texts and bodies below are what AvroData of Apicurio's
// AvroConverter (apicurio-registry-utils-converter 2.6.13.Final, the
// converter Debezium documents) gives for the Connect schemas and values
// Debezium's Postgres connector makes of these columns: each Connect
// schema was converted with AvroData.fromConnectData and written with
// Avro's GenericDatumWriter, the way the converter registers and writes
// it.
var avroColumnCases = []struct {
	name     string
	col      decode.Column
	text     string // the column's value as Postgres sends it
	required string // schema of the NOT NULL column
	reqHex   string
	optional string // schema of the nullable column
	optHex   string
}{
	{"text", decode.Column{Type: decode.TypeText, TypMod: -1}, "order-1",
		`"string"`, "0e6f726465722d31", `["null","string"]`, "020e6f726465722d31"},
	{"jsonb", decode.Column{Type: decode.TypeJSONB, TypMod: -1}, `{"seq": 1}`,
		`{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}`, "147b22736571223a20317d",
		`["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]`, "02147b22736571223a20317d"},
	{"uuid", decode.Column{Type: decode.TypeUUID, TypMod: -1}, "f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
		`{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}`, "4866383164346661652d376465632d313164302d613736352d303061306339316536626636",
		`["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Uuid"}]`, "024866383164346661652d376465632d313164302d613736352d303061306339316536626636"},
	{"xml", decode.Column{Type: decode.TypeXML, TypMod: -1}, "<a/>",
		`{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Xml"}`, "083c612f3e",
		`["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Xml"}]`, "02083c612f3e"},
	{"boolean", decode.Column{Type: decode.TypeBool, TypMod: -1}, "t", `"boolean"`, "01", `["null","boolean"]`, "0201"},
	{"int2", decode.Column{Type: decode.TypeInt2, TypMod: -1}, "-3",
		`{"type":"int","connect.type":"int16"}`, "05", `["null",{"type":"int","connect.type":"int16"}]`, "0205"},
	{"int4", decode.Column{Type: decode.TypeInt4, TypMod: -1}, "70000", `"int"`, "e0c508", `["null","int"]`, "02e0c508"},
	{"int8", decode.Column{Type: decode.TypeInt8, TypMod: -1}, "1099511627776", `"long"`, "808080808040", `["null","long"]`, "02808080808040"},
	{"float4", decode.Column{Type: decode.TypeFloat4, TypMod: -1}, "1.5", `"float"`, "0000c03f", `["null","float"]`, "020000c03f"},
	{"float8", decode.Column{Type: decode.TypeFloat8, TypMod: -1}, "2.25", `"double"`, "0000000000000240", `["null","double"]`, "020000000000000240"},
	{"numeric(10,2)", decode.Column{Type: decode.TypeNumeric, TypMod: 10<<16 | 2 + 4}, "-12.34",
		`{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}`, "04fb2e",
		`["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}]`, "0204fb2e"},
	{"date", decode.Column{Type: decode.TypeDate, TypMod: -1}, "2022-01-08",
		`{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}`, "f0a802",
		`["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}]`, "02f0a802"},
	{"timestamp(3)", decode.Column{Type: decode.TypeTimestamp, TypMod: 3}, "2023-11-14 22:13:20.123",
		`{"type":"long","connect.version":1,"connect.name":"io.debezium.time.Timestamp"}`, "f6a1abfef962",
		`["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.Timestamp"}]`, "02f6a1abfef962"},
	{"timestamp", decode.Column{Type: decode.TypeTimestamp, TypMod: -1}, "2023-11-14 22:13:20.123456",
		`{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}`, "8089818283898506",
		`["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}]`, "028089818283898506"},
	{"text default 'x'", decode.Column{Type: decode.TypeText, TypMod: -1, Default: []byte("x")}, "order-1",
		`{"type":"string","connect.default":"x"}`, "0e6f726465722d31", `[{"type":"string","connect.default":"x"},"null"]`, "000e6f726465722d31"},
	{"integer default 5", decode.Column{Type: decode.TypeInt4, TypMod: -1, Default: []byte("5")}, "7",
		`{"type":"int","connect.default":5}`, "0e", `[{"type":"int","connect.default":5},"null"]`, "000e"},
	{"jsonb default '{}'", decode.Column{Type: decode.TypeJSONB, TypMod: -1, Default: []byte("{}")}, `{"a": 1}`,
		`{"type":"string","connect.version":1,"connect.default":"{}","connect.name":"io.debezium.data.Json"}`, "107b2261223a20317d",
		`[{"type":"string","connect.version":1,"connect.default":"{}","connect.name":"io.debezium.data.Json"},"null"]`, "00107b2261223a20317d"},
	{"smallint default 5", decode.Column{Type: decode.TypeInt2, TypMod: -1, Default: []byte("5")}, "5",
		`{"type":"int","connect.default":5,"connect.type":"int16"}`, "0a", `[{"type":"int","connect.default":5,"connect.type":"int16"},"null"]`, "000a"},
	{"numeric(10,2) default 1.50", decode.Column{Type: decode.TypeNumeric, TypMod: 10<<16 | 2 + 4, Default: []byte("1.50")}, "1.50",
		`{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.default":"` + "\\u0000\u0096" + `","connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}`, "040096",
		`[{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.default":"` + "\\u0000\u0096" + `","connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"},"null"]`, "00040096"},
	{"boolean default true", decode.Column{Type: decode.TypeBool, TypMod: -1, Default: []byte("t")}, "t",
		`{"type":"boolean","connect.default":true}`, "01", `[{"type":"boolean","connect.default":true},"null"]`, "0001"},
	{"timestamp default", decode.Column{Type: decode.TypeTimestamp, TypMod: -1, Default: []byte("1970-01-01 00:00:00.000007")}, "1970-01-01 00:00:00.000007",
		`{"type":"long","connect.version":1,"connect.default":7,"connect.name":"io.debezium.time.MicroTimestamp"}`, "0e",
		`[{"type":"long","connect.version":1,"connect.default":7,"connect.name":"io.debezium.time.MicroTimestamp"},"null"]`, "000e"},
	// The types below are Debezium's records under the converter in compat
	// (cases new types avro, defaults of every type avro, key ... avro).
	{"time", decode.Column{Type: decode.TypeTime, TypMod: -1}, "10:11:12.123456",
		`{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTime"}`, "80c9a19d9102",
		`["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTime"}]`, "0280c9a19d9102"},
	{"time(3)", decode.Column{Type: decode.TypeTime, TypMod: 3}, "10:11:12.123",
		`{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Time"}`, "f6c9fc22",
		`["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Time"}]`, "02f6c9fc22"},
	{"timetz", decode.Column{Type: decode.TypeTimeTZ, TypMod: -1}, "10:11:12.5+02",
		`{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTime"}`, "1630383a31313a31322e355a",
		`["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTime"}]`, "021630383a31313a31322e355a"},
	{"timestamptz", decode.Column{Type: decode.TypeTimestampTZ, TypMod: -1}, "2026-11-26 10:11:12.5+01",
		`{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}`, "36323032362d31312d32365430393a31313a31322e3530303030305a",
		`["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}]`, "0236323032362d31312d32365430393a31313a31322e3530303030305a"},
	{"interval", decode.Column{Type: decode.TypeInterval, TypMod: -1}, "1 day",
		`{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroDuration"}`, "8080bbdd8305",
		`["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroDuration"}]`, "028080bbdd8305"},
	{"money", decode.Column{Type: decode.TypeMoney, TypMod: -1}, "$1,234.56",
		`{"type":"bytes","scale":2,"precision":64,"connect.version":1,"connect.parameters":{"scale":"2"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}`, "0601e240",
		`["null",{"type":"bytes","scale":2,"precision":64,"connect.version":1,"connect.parameters":{"scale":"2"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}]`, "020601e240"},
	{"enum", decode.Column{Type: 16385, TypMod: -1, Labels: "sad,ok,happy"}, "ok",
		`{"type":"string","connect.version":1,"connect.parameters":{"allowed":"sad,ok,happy"},"connect.name":"io.debezium.data.Enum"}`, "046f6b",
		`["null",{"type":"string","connect.version":1,"connect.parameters":{"allowed":"sad,ok,happy"},"connect.name":"io.debezium.data.Enum"}]`, "02046f6b"},
	{"bytea", decode.Column{Type: decode.TypeBytea, TypMod: -1}, `\x00ff`, `"bytes"`, "0400ff", `["null","bytes"]`, "020400ff"},
	{"text[]", decode.Column{Type: 1009, TypMod: -1}, `{a,NULL,"b c"}`,
		`{"type":"array","items":["null","string"]}`, "0602026100020662206300",
		`["null",{"type":"array","items":["null","string"]}]`, "020602026100020662206300"},
	{"empty integer[]", decode.Column{Type: 1007, TypMod: -1}, `{}`,
		`{"type":"array","items":["null","int"]}`, "00", `["null",{"type":"array","items":["null","int"]}]`, "0200"},
	{"numeric", decode.Column{Type: decode.TypeNumeric, TypMod: -1}, "1234.5678",
		variableScaleRecord, "080800bc614e", `["null",` + variableScaleRecord + `]`, "02080800bc614e"},
	{"double NaN", decode.Column{Type: decode.TypeFloat8, TypMod: -1}, "NaN", `"double"`, "000000000000f87f", `["null","double"]`, "02000000000000f87f"},
	{"real NaN", decode.Column{Type: decode.TypeFloat4, TypMod: -1}, "NaN", `"float"`, "0000c07f", `["null","float"]`, "020000c07f"},
}

// A record's second numeric without precision names the first's record,
// as Avro writes a named type once.
func TestAvroNamedTypes(t *testing.T) {
	a := decode.Column{Name: "a", Type: decode.TypeNumeric, TypMod: -1}
	b := decode.Column{Name: "b", Type: decode.TypeNumeric, TypMod: -1, NotNull: true}
	var scope avroScope
	s, err := avroField([]byte(`{"type":"record","name":"Value","fields":[`), "a", &a, &scope)
	if err == nil {
		s, err = avroField(append(s, ','), "b", &b, &scope)
	}
	if err != nil {
		t.Fatal(err)
	}
	s = append(s, "]}"...)
	want := `{"type":"record","name":"Value","fields":[{"name":"a","type":["null",` + variableScaleRecord + `],"default":null},` +
		`{"name":"b","type":"io.debezium.data.VariableScaleDecimal"}]}`
	if string(s) != want {
		t.Errorf("schema\n got %s\nwant %s", s, want)
	}
	body, err := avroColumnValue(nil, &a, []byte("-0.5"))
	if err == nil {
		body, err = avroColumnValue(body, &b, []byte("10"))
	}
	if err != nil {
		t.Fatal(err)
	}
	v := checkAvro(t, string(s), body)
	if m, ok := v.(map[string]any); !ok || m["b"] == nil {
		t.Errorf("read %#v", v)
	}
}

func TestAvroColumn(t *testing.T) {
	for _, tc := range avroColumnCases {
		for _, notNull := range []bool{true, false} {
			col := tc.col
			col.Name, col.NotNull = "c", notNull
			wantSchema, wantHex := tc.optional, tc.optHex
			if notNull {
				wantSchema, wantHex = tc.required, tc.reqHex
			}
			t.Run(tc.name+map[bool]string{true: " not null", false: ""}[notNull], func(t *testing.T) {
				s, err := avroColumn(nil, &col, &avroScope{})
				if err != nil {
					t.Fatal(err)
				}
				if got := string(s); got != wantSchema {
					t.Errorf("schema\n got %s\nwant %s", got, wantSchema)
				}
				b, err := avroColumnValue(nil, &col, []byte(tc.text))
				if err != nil {
					t.Fatal(err)
				}
				if got := hex.EncodeToString(b); got != wantHex {
					t.Errorf("body %s, want %s", got, wantHex)
				}
				checkAvro(t, string(s), b)
			})
		}
	}
}

// checkAvro reads body with schema through hamba/avro, a reader written
// apart from walstream's writer, one byte at a time, so that a body longer
// or shorter than its schema says fails.
func checkAvro(t *testing.T, schema string, body []byte) any {
	t.Helper()
	s, err := avro.Parse(schema)
	if err != nil {
		t.Fatalf("parsing %s: %v", schema, err)
	}
	in := bytes.NewReader(body)
	r := avro.NewReader(in, 1)
	var v any
	r.ReadVal(s, &v)
	if r.Error != nil {
		t.Fatalf("reading %x with %s: %v", body, schema, r.Error)
	}
	if in.Len() > 0 {
		t.Fatalf("reading %x with %s left %d bytes", body, schema, in.Len())
	}
	return v
}

// fakeRegistry is srfake counting registrations, each answered by
// answer when set.
type fakeRegistry struct {
	*srfake.Registry
	registered atomic.Int32
	answer     atomic.Pointer[func(w http.ResponseWriter) bool]
}

// registered splits a value framed as the registry's serializers frame it
// into the schema its id names in the registry and its Avro body.
func registered(t *testing.T, ss *sr.Client, b []byte) (id int, schema string, body []byte) {
	t.Helper()
	var h sr.ConfluentHeader
	id, body, err := h.DecodeID(b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ss.SchemaByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return id, s.Schema, body
}

func newFakeRegistry(t *testing.T) *fakeRegistry {
	f := &fakeRegistry{Registry: srfake.New()}
	t.Cleanup(f.Close)
	f.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/versions") {
			f.registered.Add(1)
		}
		if a := f.answer.Load(); a != nil {
			return (*a)(w)
		}
		return false
	})
	return f
}

func (f *fakeRegistry) fail(status int, body string) {
	a := func(w http.ResponseWriter) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
		return true
	}
	f.answer.Store(&a)
}

func avroEncoding(url string) Encoding {
	return Encoding{Key: Avro, Value: Avro, SchemaPrefix: "dbz",
		Registry: RegistrySettings{URLs: []string{url}, AutoRegister: true}}
}

// TestAvroRecords checks the records of the converter's cases in
// /work-free terms: the envelope with a version, the expanded payload, and
// the wire format with the registry's ids, registered once per subject.
func TestAvroRecords(t *testing.T) {
	reg := newFakeRegistry(t)
	jsonb := &decode.Column{Name: "payload", Type: decode.TypeJSONB, TypMod: -1}
	key := &decode.Column{Name: "aggregateid", Type: decode.TypeText, TypMod: -1}
	eventType := &decode.Column{Name: "type", Type: decode.TypeText, TypMod: -1}
	n := &decode.Column{Name: "n", Type: decode.TypeInt4, TypMod: -1, NotNull: true}

	plain := outbox("public", nil)
	env := outbox("public", func(o *decode.Outbox) {
		o.Table = "envbox"
		o.Additional = placement(t, "type:envelope:eventType,n:envelope")
	})
	exp := outbox("public", func(o *decode.Outbox) {
		o.Table = "expbox"
		o.ExpandJSONPayload, o.ExpandJSONNulls, o.ExpandJSONEmptyArrays = true, true, true
	})
	expEnv := outbox("public", func(o *decode.Outbox) {
		o.Table = "expenvbox"
		o.ExpandJSONPayload, o.ExpandJSONNulls, o.ExpandJSONEmptyArrays = true, true, true
		o.Additional = placement(t, "type:envelope:eventType")
	})
	r, err := NewRouter(avroEncoding(reg.URL()), nil, plain, env, exp, expEnv)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(o *decode.Outbox, payload string) decode.Event {
		e := decode.Event{Identity: decode.Identity{ID: []byte("1")}, Source: o, AggregateType: []byte("Order"),
			AggregateID: []byte("order-1"), KeyColumn: key, PayloadColumn: jsonb, Payload: []byte(payload)}
		e.Identity.Table = o.Name()
		return e
	}
	expanded := `{"seq":1,"big":1099511627776,"f":1.5,"ok":true,"s":"x","nul":null,"customer":{"name":"n"},"tags":["a",null,"b"],"items":[{"sku":"k","qty":2},null],"empty":[]}`
	expandedSchema := `{"type":"record","name":"payload","fields":[{"name":"seq","type":["null","int"],"default":null},{"name":"big","type":["null","long"],"default":null},{"name":"f","type":["null","double"],"default":null},{"name":"ok","type":["null","boolean"],"default":null},{"name":"s","type":["null","string"],"default":null},{"name":"nul","type":["null","bytes"],"default":null},{"name":"customer","type":["null",{"type":"record","name":"customer","namespace":"payload","fields":[{"name":"name","type":["null","string"],"default":null}],"connect.name":"payload.customer"}],"default":null},{"name":"tags","type":["null",{"type":"array","items":["null","string"]}],"default":null},{"name":"items","type":["null",{"type":"array","items":["null",{"type":"record","name":"items","namespace":"payload","fields":[{"name":"sku","type":["null","string"],"default":null},{"name":"qty","type":["null","int"],"default":null}],"connect.name":"payload.items"}]}],"default":null},{"name":"empty","type":["null",{"type":"array","items":["null","string"]}],"default":null}],"connect.name":"payload"}`
	expandedHex := "02020280808080804002000000000000f83f0201020278000202026e0206020261000202620002040202026b020400000200"

	versioned := ev(env, `{"seq": 1}`)
	versioned.SchemaVersion = []byte("3")
	versioned.Fields = []decode.Field{{Name: "eventType", Placement: decode.PlaceEnvelope, Column: eventType, Value: []byte("OrderCreated")},
		{Name: "n", Placement: decode.PlaceEnvelope, Column: n, Value: []byte("4")}}
	withType := ev(expEnv, expanded)
	withType.Fields = []decode.Field{{Name: "eventType", Placement: decode.PlaceEnvelope, Column: eventType, Value: []byte("E")}}

	for _, tc := range []struct {
		name, topic, subject, schema, body string
		ev                                 decode.Event
	}{
		{"payload", "outbox.event.Order", "outbox.event.Order-value",
			`["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]`, "02127b22736571223a317d", ev(plain, `{"seq":1}`)},
		{"envelope with a schema version", "outbox.event.Order", "outbox.event.Order-value",
			`{"type":"record","name":"Value","namespace":"dbz.public.envbox.Order","fields":[{"name":"payload","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}],"default":null},{"name":"eventType","type":["null","string"],"default":null},{"name":"n","type":"int"}],"connect.version":3,"connect.name":"dbz.public.envbox.Order.Value"}`,
			"02147b22736571223a20317d02184f726465724372656174656408", versioned},
		{"expanded payload", "outbox.event.Order", "outbox.event.Order-value", expandedSchema, expandedHex, ev(exp, expanded)},
		{"envelope of an expanded payload", "outbox.event.Order", "outbox.event.Order-value",
			`{"type":"record","name":"Value","namespace":"dbz.public.expenvbox.Order","fields":[{"name":"payload","type":["null",` +
				strings.Replace(expandedSchema, `"name":"payload",`, `"name":"payload","namespace":"",`, 1) +
				`],"default":null},{"name":"eventType","type":["null","string"],"default":null}],"connect.name":"dbz.public.expenvbox.Order.Value"}`,
			"02" + expandedHex + "020245", withType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := r.Record(context.Background(), &tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Topic != tc.topic {
				t.Fatalf("topic %s, want %s", rec.Topic, tc.topic)
			}
			ss, err := sr.NewClient(sr.URLs(reg.URL()))
			if err != nil {
				t.Fatal(err)
			}
			id, schema, body := registered(t, ss, rec.Value)
			if schema != tc.schema {
				t.Errorf("schema %d\n got %s\nwant %s", id, schema, tc.schema)
			}
			if got := hex.EncodeToString(body); got != tc.body {
				t.Errorf("body\n got %s\nwant %s", got, tc.body)
			}
			checkAvro(t, schema, body)
			var h sr.ConfluentHeader
			kid, kbody, err := h.DecodeID(rec.Key)
			if err != nil {
				t.Fatal(err)
			}
			if ks, err := ss.SchemaByID(context.Background(), kid); err != nil || ks.Schema != `["null","string"]` {
				t.Errorf("key schema %d = %q (%v), want [\"null\",\"string\"]", kid, ks.Schema, err)
			}
			if got, want := hex.EncodeToString(kbody), "020e6f726465722d31"; got != want {
				t.Errorf("key body %s, want %s", got, want)
			}
		})
	}
	// Again: every id comes from the cache.
	before := reg.registered.Load()
	for range 3 {
		e := ev(plain, `{"seq":2}`)
		if _, err := r.Record(context.Background(), &e); err != nil {
			t.Fatal(err)
		}
	}
	if got := reg.registered.Load(); got != before {
		t.Errorf("%d more registrations for known schemas, want none", got-before)
	}
}

// TestAvroMessages: a logical message's key and value as the converter
// writes the decoded struct's fields (compat case messages avro): the key
// and a string payload under their optional schemas, a payload object as
// its record.
func TestAvroMessages(t *testing.T) {
	reg := newFakeRegistry(t)
	o, err := decode.NewOutbox("", "logical message walstream")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(avroEncoding(reg.URL()), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	read := func(b []byte) (string, string) {
		t.Helper()
		_, schema, body := registered(t, ss, b)
		checkAvro(t, schema, body)
		return schema, hex.EncodeToString(body)
	}
	for _, tc := range []struct {
		content, schema, body string
	}{
		{`{"id": "m-1", "aggregatetype": "Msg", "aggregateid": "a-1", "payload": {"x": 1, "s": "t", "o": {"p": true}}}`,
			`{"type":"record","name":"payload","fields":[{"name":"x","type":["null","int"],"default":null},{"name":"s","type":["null","string"],"default":null},` +
				`{"name":"o","type":["null",{"type":"record","name":"o","namespace":"payload","fields":[{"name":"p","type":["null","boolean"],"default":null}],"connect.name":"payload.o"}],"default":null}],"connect.name":"payload"}`,
			"02020202740202" + "01"},
		{`{"id": "m-2", "aggregatetype": "Msg", "aggregateid": "a-1", "payload": "a string"}`, `["null","string"]`, "02106120737472696e67"},
		{`{"id": "m-3", "aggregatetype": "Msg", "aggregateid": "a-1", "payload": {"empty": []}}`,
			`{"type":"record","name":"payload","fields":[],"connect.name":"payload"}`, ""},
	} {
		ev := decode.Event{Identity: decode.Identity{ID: []byte("m"), Table: o.Name()}, Source: o, AggregateType: []byte("Msg"), Message: []byte(tc.content)}
		rec, err := r.Record(context.Background(), &ev)
		if err != nil {
			t.Fatalf("%s: %v", tc.content, err)
		}
		if s, b := read(rec.Key); s != `["null","string"]` || b != "0206612d31" {
			t.Errorf("%s: key %s %s", tc.content, s, b)
		}
		if s, b := read(rec.Value); s != tc.schema || b != tc.body {
			t.Errorf("%s: value\n got %s %s\nwant %s %s", tc.content, s, b, tc.schema, tc.body)
		}
	}
}

func TestAvroRegistryFailures(t *testing.T) {
	reg := newFakeRegistry(t)
	o := outbox("public", nil)
	promReg := prometheus.NewRegistry()
	r, err := NewRouter(avroEncoding(reg.URL()), NewRegistryMetrics(promReg), o)
	if err != nil {
		t.Fatal(err)
	}
	key := &decode.Column{Name: "aggregateid", Type: decode.TypeText, TypMod: -1}
	jsonb := &decode.Column{Name: "payload", Type: decode.TypeJSONB, TypMod: -1}
	ev := decode.Event{Identity: decode.Identity{ID: []byte("1"), Table: "public.outbox"}, Source: o, AggregateType: []byte("Order"),
		AggregateID: []byte("o"), KeyColumn: key, PayloadColumn: jsonb, Payload: []byte("{}")}

	reg.fail(http.StatusServiceUnavailable, `{"error_code":50003,"message":"unavailable"}`)
	_, err = r.Record(context.Background(), &ev)
	var re *RegistryError
	if !errors.As(err, &re) || re.Permanent {
		t.Fatalf("registry answering 503: %v, want a RegistryError to retry", err)
	}
	var ee *EncodingError
	if errors.As(err, &ee) {
		t.Fatalf("registry answering 503 is bad input: %v", err)
	}

	reg.fail(http.StatusConflict, `{"error_code":409,"message":"Incompatible artifact: outbox.event.Order-key [AVRO]"}`)
	_, err = r.Record(context.Background(), &ev)
	if !errors.As(err, &re) || !re.Permanent {
		t.Fatalf("registry refusing the schema: %v, want a permanent RegistryError", err)
	}
	for _, want := range []string{"subject outbox.event.Order-key", "compatibility level", "PUT /config/outbox.event.Order-key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	reg.answer.Store(nil)
	if _, err := r.Record(context.Background(), &ev); err != nil {
		t.Fatalf("registry back: %v", err)
	}
	if err := r.CheckRegistry(context.Background()); err != nil {
		t.Fatalf("CheckRegistry: %v", err)
	}
	// 503 and 409 on the key's registration (the 409 also reads the
	// subject's level), the key and value registered, then the check.
	families, err := promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]float64)
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "walstream_schema_registry_") {
			continue
		}
		for _, mt := range f.GetMetric() {
			name := f.GetName()
			for _, l := range mt.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			got[name] = mt.GetCounter().GetValue() + float64(mt.GetHistogram().GetSampleCount())
		}
	}
	want := map[string]float64{
		"walstream_schema_registry_requests_total{register}": 4, "walstream_schema_registry_errors_total{register}": 2,
		"walstream_schema_registry_requests_total{config}": 2, "walstream_schema_registry_errors_total{config}": 1,
		"walstream_schema_registry_request_duration_seconds": 6,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// TestAvroBadInput: a payload Debezium's Avro converter cannot write is bad
// input naming the column, not a registry failure.
func TestAvroBadInput(t *testing.T) {
	reg := newFakeRegistry(t)
	o := outbox("public", func(o *decode.Outbox) { o.ExpandJSONPayload = true })
	r, err := NewRouter(avroEncoding(reg.URL()), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	key := &decode.Column{Name: "aggregateid", Type: decode.TypeText, TypMod: -1}
	jsonb := &decode.Column{Name: "payload", Type: decode.TypeJSONB, TypMod: -1}
	for _, payload := range []string{`{"first-name": "a"}`, `{"1st": 1}`, `{"a": 99999999999999999999999}`} {
		ev := decode.Event{Identity: decode.Identity{ID: []byte("1"), Table: "public.outbox"}, Source: o, AggregateType: []byte("Order"),
			AggregateID: []byte("o"), KeyColumn: key, PayloadColumn: jsonb, Payload: []byte(payload)}
		_, err := r.Record(context.Background(), &ev)
		var ee *EncodingError
		if !errors.As(err, &ee) || ee.Column != "payload" {
			t.Errorf("payload %s: %v, want an EncodingError of column payload", payload, err)
		}
	}
	if n := reg.registered.Load(); n != 1 { // the key's schema only
		t.Errorf("%d registrations, want 1 (the key's)", n)
	}
}

func TestSubjectStrategy(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		key      bool
		want     string
	}{
		{"topic", true, "t-key"},
		{"io.confluent.kafka.serializers.subject.TopicNameStrategy", false, "t-value"},
		{"record", false, "dbz.public.outbox.Order.Value"},
		{"io.apicurio.registry.serde.avro.strategy.TopicRecordIdStrategy", false, "t-dbz.public.outbox.Order.Value"},
	} {
		s, err := ParseSubjectStrategy(tc.strategy)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.subject("t", tc.key, "dbz.public.outbox.Order.Value"); got != tc.want {
			t.Errorf("%s: subject %s, want %s", tc.strategy, got, tc.want)
		}
	}
	if _, err := ParseSubjectStrategy("io.confluent.Nope"); err == nil {
		t.Error("an unknown strategy parsed")
	}
	for text, want := range map[string]string{`"string"`: "string", `["null","string"]`: "union",
		`{"type":"record","name":"Value","namespace":"a.b","fields":[]}`: "a.b.Value", `{"type":"record","name":"payload","fields":[]}`: "payload",
		`{"type":"string","connect.version":1}`: "string"} {
		if got := avroFullName([]byte(text)); got != want {
			t.Errorf("avroFullName(%s) = %q, want %q", text, got, want)
		}
	}
}

// TestAvroAstralAndUnexpandable: what AvroConverter wrote behind Debezium
// 3.6.1 (compat cases "astral avro" and "expand unexpandable avro").
// Avro's schema text keeps characters outside the Basic Multilingual Plane
// as they are, in an enum's labels and in defaults, where JsonConverter
// escapes them; a payload Debezium does not expand is its jsonb string;
// a top-level [] it leaves with no schema, which AvroData writes as its
// Anything record.
func TestAvroAstralAndUnexpandable(t *testing.T) {
	reg := newFakeRegistry(t)
	ss, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	text := &decode.Column{Name: "aggregateid", Type: decode.TypeText, TypMod: -1}
	mood := &decode.Column{Name: "mood", Type: decode.TypeText, TypMod: -1, Labels: "😀,ok"}
	note := &decode.Column{Name: "note", Type: decode.TypeText, TypMod: -1, Default: []byte("😀 default")}
	env := outbox("public", func(o *decode.Outbox) { o.Additional = placement(t, "mood:envelope,note:envelope,type:envelope:kind") })
	exp := outbox("public", func(o *decode.Outbox) { o.ExpandJSONPayload = true })
	const a1 = `{"n": 1, "emoji": "😀", "nested": {"list": ["🎉", "x", "é"], "deeper": {"text": "a😀b 🚀 𝄞 🎉"}}}`
	for _, tc := range []struct {
		name, schema, body string
		ev                 decode.Event
	}{
		{"astral envelope", `{"type":"record","name":"Value","namespace":"dbz.public.outbox.Astral","fields":[` +
			`{"name":"payload","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}],"default":null},` +
			`{"name":"mood","type":["null",{"type":"string","connect.version":1,"connect.parameters":{"allowed":"😀,ok"},"connect.name":"io.debezium.data.Enum"}],"default":null},` +
			`{"name":"note","type":[{"type":"string","connect.default":"😀 default"},"null"],"default":"😀 default"},` +
			`{"name":"kind","type":["null","string"],"default":null}],"connect.name":"dbz.public.outbox.Astral.Value"}`,
			"02de017b226e223a20312c2022656d6f6a69223a2022f09f9880222c20226e6573746564223a207b226c697374223a205b22f09f8e89222c202278222c2022c3a9225d2c2022646565706572223a207b2274657874223a202261f09f98806220f09f9a8020f09d849e20f09f8e89227d7d7d0208f09f98800018f09f98802064656661756c74021af09f9a80206c61756e63686564",
			decode.Event{Identity: decode.Identity{ID: []byte("a1"), Table: "public.outbox"}, Source: env, AggregateType: []byte("Astral"),
				AggregateID: []byte("😀-1"), KeyColumn: text, PayloadColumn: jsonbColumn, Payload: []byte(a1), Fields: []decode.Field{
					{Name: "mood", Placement: decode.PlaceEnvelope, Column: mood, Value: []byte("😀")},
					{Name: "note", Placement: decode.PlaceEnvelope, Column: note, Value: []byte("😀 default")},
					{Name: "kind", Placement: decode.PlaceEnvelope, Column: text, Value: []byte("🚀 launched")}}}},
		{"the issue's payload", `["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]`,
			"025a7b2262223a205b312c20322e35302c20302e302c20313030303030303030303030303030303030303030305d7d",
			decode.Event{Identity: decode.Identity{ID: []byte("p1"), Table: "public.outbox"}, Source: exp, AggregateType: []byte("Payload"),
				AggregateID: []byte("k-1"), KeyColumn: text, PayloadColumn: jsonbColumn, Payload: []byte(`{"b": [1, 2.50, 0.0, 1000000000000000000000]}`)}},
		{"a top-level []", `{"type":"record","name":"Anything","namespace":"io.confluent.connect.avro","fields":[` +
			`{"name":"boolean","type":["null","boolean"],"default":null},{"name":"bytes","type":["null","bytes"],"default":null},` +
			`{"name":"double","type":["null","double"],"default":null},{"name":"float","type":["null","float"],"default":null},` +
			`{"name":"int","type":["null","int"],"default":null},{"name":"long","type":["null","long"],"default":null},` +
			`{"name":"string","type":["null","string"],"default":null},{"name":"array","type":["null",{"type":"array","items":"Anything"}],"default":null},` +
			`{"name":"map","type":["null",{"type":"array","items":{"type":"record","name":"MapEntry","fields":[{"name":"key","type":"Anything"},{"name":"value","type":"Anything"}]}}],"default":null}]}`,
			"00000000000002045b5d0000",
			decode.Event{Identity: decode.Identity{ID: []byte("p12"), Table: "public.outbox"}, Source: exp, AggregateType: []byte("Payload"),
				AggregateID: []byte("k-12"), KeyColumn: text, PayloadColumn: jsonbColumn, Payload: []byte(`[]`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRouter(avroEncoding(reg.URL()), nil, tc.ev.Source)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := r.Record(context.Background(), &tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			_, schema, body := registered(t, ss, rec.Value)
			if schema != tc.schema {
				t.Errorf("schema\n got %s\nwant %s", schema, tc.schema)
			}
			if got := hex.EncodeToString(body); got != tc.body {
				t.Errorf("body\n got %s\nwant %s", got, tc.body)
			}
		})
	}
}
