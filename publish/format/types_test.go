package format

import (
	"testing"

	"github.com/walstream/walstream/decode"
)

// TestDebeziumTypes: each column type as Debezium 3.6.1 wrote it under
// JsonConverter, StringConverter (Struct.toString of an envelope field)
// and SimpleHeaderConverter, from the text pgoutput sends (compat cases
// "new types ..." and "key ..."). A numeric without precision under
// StringConverter is Java's identity hash of its bytes in Debezium, and
// base64 in walstream (docs/debezium.md, Known differences).
func TestDebeziumTypes(t *testing.T) {
	enum := decode.Column{Name: "c", Type: 16400, TypMod: -1, Labels: "sad,ok,happy"}
	col := func(typ uint32, typmod int32) *decode.Column {
		return &decode.Column{Name: "c", Type: typ, TypMod: typmod}
	}
	for _, tc := range []struct {
		col                         *decode.Column
		text                        string
		json, str, header, jsSchema string
	}{
		{col(decode.TypeTime, -1), "10:11:12.123456", "36672123456", "36672123456", "36672123456",
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1}`},
		{col(decode.TypeTime, 3), "23:59:59.999", "86399999", "86399999", "86399999",
			`{"type":"int32","optional":true,"name":"io.debezium.time.Time","version":1}`},
		{col(decode.TypeTimeTZ, -1), "10:11:12.5+02", `"08:11:12.5Z"`, "08:11:12.5Z", "08:11:12.5Z",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTime","version":1}`},
		{col(decode.TypeTimeTZ, -1), "01:00:00+02", `"23:00:00Z"`, "23:00:00Z", "23:00:00Z", ""},
		{col(decode.TypeInterval, -1), "1 year 2 mons 3 days 04:05:06.789", "37091106789000", "37091106789000", "37091106789000",
			`{"type":"int64","optional":true,"name":"io.debezium.time.MicroDuration","version":1}`},
		{col(decode.TypeInterval, -1), "-1 days -00:00:01", "-86401000000", "-86401000000", "-86401000000", ""},
		{col(decode.TypeInterval, -1), "00:00:00.000001", "1", "1", "1", ""},
		{col(decode.TypeMoney, -1), "$1,234.56", `"AeJA"`, "1234.56", "1234.56",
			`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2"}}`},
		{col(decode.TypeMoney, -1), "-$0.01", `"/w=="`, "-0.01", "-0.01", ""},
		{&enum, "happy", `"happy"`, "happy", "happy",
			`{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"sad,ok,happy"}}`},
		{col(decode.TypeTimestampTZ, -1), "2026-11-26 10:11:12+05:30", `"2026-11-26T04:41:12.000000Z"`, "2026-11-26T04:41:12.000000Z", "2026-11-26T04:41:12.000000Z",
			`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1}`},
		{col(decode.TypeTimestampTZ, 3), "2026-11-26 10:11:12.1+00", `"2026-11-26T10:11:12.100Z"`, "2026-11-26T10:11:12.100Z", "2026-11-26T10:11:12.100Z", ""},
		{col(decode.TypeTimestampTZ, 0), "2026-11-26 10:11:12+00", `"2026-11-26T10:11:12Z"`, "2026-11-26T10:11:12Z", "2026-11-26T10:11:12Z", ""},
		{col(decode.TypeTimestampTZ, 0), "infinity", `"infinity"`, "infinity", "infinity", ""},
		{col(decode.TypeNumeric, -1), "1234.5678", `{"scale":4,"value":"ALxhTg=="}`, "Struct{scale=4,value=ALxhTg==}", `{"scale":4,"value":"ALxhTg=="}`,
			`{"type":"struct","fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],` +
				`"optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,"doc":"Variable scaled decimal"}`},
		{col(decode.TypeBytea, -1), `\x00ff`, `"AP8="`, "java.nio.HeapByteBuffer[pos=0 lim=2 cap=2]", "AP8=", `{"type":"bytes","optional":true}`},
		{col(1009, -1), `{a,"b c",NULL,"d\"e"}`, `["a","b c",null,"d\"e"]`, `[a, b c, null, d"e]`, `["a","b c",null,"d\"e"]`,
			`{"type":"array","items":{"type":"string","optional":true},"optional":true}`},
		{col(1007, -1), `{1,2,-3}`, `[1,2,-3]`, `[1, 2, -3]`, `[1,2,-3]`, `{"type":"array","items":{"type":"int32","optional":true},"optional":true}`},
		{col(1007, -1), `{}`, `[]`, `[]`, `[]`, ""},
		{col(1115, 3), `{"2026-11-26 10:11:12.123"}`, `[1795687872123]`, `[1795687872123]`, `[1795687872123]`,
			`{"type":"array","items":{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1},"optional":true}`},
	} {
		if got, err := connectJSON(nil, tc.col, []byte(tc.text)); err != nil || string(got) != tc.json {
			t.Errorf("type %d %q under JsonConverter: %s (%v), want %s", tc.col.Type, tc.text, got, err, tc.json)
		}
		if got, err := javaString(nil, tc.col, []byte(tc.text)); err != nil || string(got) != tc.str {
			t.Errorf("type %d %q under StringConverter: %s (%v), want %s", tc.col.Type, tc.text, got, err, tc.str)
		}
		if got, err := headerString(nil, tc.col, []byte(tc.text)); err != nil || string(got) != tc.header {
			t.Errorf("type %d %q as a header: %s (%v), want %s", tc.col.Type, tc.text, got, err, tc.header)
		}
		if tc.jsSchema != "" {
			if got := string(jsonSchema(nil, tc.col, "")); got != tc.jsSchema {
				t.Errorf("type %d schema %s, want %s", tc.col.Type, got, tc.jsSchema)
			}
		}
	}
	for _, bad := range []struct {
		col  *decode.Column
		text string
	}{
		{col(1007, -1), `{{1,2},{3,4}}`},
		{col(1007, -1), `[0:1]={1,2}`},
		{col(decode.TypeInterval, -1), `P1Y2M`},
		{col(decode.TypeTime, -1), `noon`},
		{col(decode.TypeMoney, -1), `€`},
		{col(decode.TypeBool, -1), ``},
		{col(decode.TypeBool, -1), `true`},
	} {
		if got, err := connectJSON(nil, bad.col, []byte(bad.text)); err == nil {
			t.Errorf("type %d %q: %s, want an error", bad.col.Type, bad.text, got)
		}
	}
	// Every encoder refuses a boolean that is neither t nor f, where
	// reading its first byte would panic on an empty one.
	for name, enc := range map[string]func([]byte, *decode.Column, []byte) ([]byte, error){
		"connectJSON": connectJSON, "javaString": javaString, "avroColumnValue": avroColumnValue,
	} {
		if got, err := enc(nil, col(decode.TypeBool, -1), []byte{}); err == nil {
			t.Errorf("%s of an empty boolean: %q, want an error", name, got)
		}
	}
}
