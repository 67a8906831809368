package decode

import (
	"strings"
	"testing"
)

// ParseDefault follows Debezium's PostgresDefaultValueConverter:
// extractDefault takes the text inside the first quotes ('(.*?)', so that a doubled quote ends it) or
// the bare constant; a function call (FUNCTION_DEFAULT_PATTERN) or
// current_timestamp and the like give the type's placeholder; NULL::type
// gives no default; types without a mapper (bytea, money) and values that
// do not parse give none either. Debezium 3.6.1 wrote each of these (compat
// case "defaults of every type").
func TestParseDefault(t *testing.T) {
	for _, tc := range []struct {
		typ  uint32
		expr string
		want string // "<none>": no default
	}{
		{TypeText, "'pending'::text", "pending"},
		{TypeText, "'it''s'::text", "it"}, // '(.*?)': Debezium stops at the doubled quote
		{TypeVarchar, "'a b'::character varying", "a b"},
		{TypeJSONB, `'{"a": 1}'::jsonb`, `{"a": 1}`},
		{TypeJSONB, "jsonb_build_object('a', 1)", "{}"},
		{TypeText, "gen_random_uuid()::text", ""},
		{TypeUUID, "gen_random_uuid()", "00000000-0000-0000-0000-000000000000"},
		{TypeUUID, "'6F1A0000-0000-0000-0000-00000000000A'::uuid", "6f1a0000-0000-0000-0000-00000000000a"},
		{TypeInt8, "4711", "4711"},
		{TypeInt4, "'-1'::integer", "-1"},
		{TypeInt4, "nextval('outbox_seq'::regclass)", "0"},
		{TypeInt2, "70000", "<none>"}, // Short.parseShort fails
		{TypeBool, "true", "t"},
		{TypeBool, "false", "f"},
		{TypeNumeric, "12.5", "<none>"}, // no precision: a VariableScaleDecimal struct, which Debezium drops
		{TypeFloat8, "'1e7'::double precision", "1e7"},
		{TypeText, "NULL::text", "<none>"},
		{TypeInt4, "NULL::integer", "<none>"},
		{TypeText, "", "<none>"},
		{TypeBytea, `'\x00'::bytea`, "<none>"},
		{TypeTimestampTZ, "now()", "1970-01-01 00:00:00+00"},
		{TypeTimestampTZ, "'2026-01-01 08:00:00+00'::timestamp with time zone", "2026-01-01 08:00:00+00"},
		{TypeInterval, "'1 day'::interval", "1 day"},
		{TypeInterval, "(now() - now())", "00:00:00"},
		{TypeTime, "'01:02:03.456'::time without time zone", "01:02:03.456"},
		{TypeMoney, "1.5", "<none>"},
		{TypeDate, "'2026-11-23'::date", "2026-11-23"},
		{TypeDate, "CURRENT_DATE", "1970-01-01"},
		{TypeTimestamp, "now()", "1970-01-01 00:00:00"},
		{TypeTimestamp, "'2026-11-23 06:00:01'::timestamp without time zone", "2026-11-23 06:00:01"},
	} {
		got, ok := ParseDefault(Column{Type: tc.typ, TypMod: -1}, tc.expr)
		g := string(got)
		if !ok {
			g = "<none>"
		}
		if g != tc.want {
			t.Errorf("ParseDefault(%d, %q) = %q, want %q", tc.typ, tc.expr, g, tc.want)
		}
	}
}

// Java's String.trim() strips the characters up to U+0020 only:
// EventRouterDelegate's payload.toString().trim().isEmpty().
func TestBlankIsJavaTrim(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, " \t\r\n": true, "\x01\x1f ": true,
		"\u00a0": false, "\u3000": false, "\u0085": false, " x ": false,
	} {
		if got := blank([]byte(s)); got != want {
			t.Errorf("blank(%q) = %v, want %v", s, got, want)
		}
	}
}

// Struct.get versus the typed getters, on captured frames: the router
// reads additional header and envelope fields with Struct.get, which gives
// a NULL column its default (attempts is 3), and the partition with
// getInt32, which does not (so the key picks the partition).
func TestDecodeDefaults(t *testing.T) {
	cat := map[string]Catalog{"attempts": {Default: "3"}, "status": {Default: "'pending'::text"}, "aggregateid": {NotNull: true}}
	for _, tc := range []struct {
		placement   string
		partitioned bool
		fields      string
	}{
		{"attempts:header,status:envelope", false, "attempts=3 status=pending"},
		{"attempts:partition,status:header", false, "status=pending"},
	} {
		cfg := outboxConfig("dbz", func(o *Outbox) {
			o.Catalog = cat
			o.Additional, _ = ParseAdditional(tc.placement)
		})
		txs := decodeAll(t, New(cfg), readFrames(t, "debezium-types"))
		ev := txs[0].Events[0]
		var fields []string
		for _, f := range ev.Fields {
			fields = append(fields, f.Name+"="+string(f.Value))
		}
		if got := strings.Join(fields, " "); got != tc.fields || ev.Partitioned != tc.partitioned {
			t.Errorf("%s: fields %q, partitioned %v; want %q, %v", tc.placement, got, ev.Partitioned, tc.fields, tc.partitioned)
		}
		if !ev.KeyColumn.NotNull || ev.KeyColumn.Type != TypeInt8 || string(ev.AggregateID) != "4711" {
			t.Errorf("key column %+v, key %q", ev.KeyColumn, ev.AggregateID)
		}
	}
}

// A catalog given with SetCatalog applies from the table's next Relation
// message; OutboxRelation finds the outbox table a Relation message names.
func TestSetCatalog(t *testing.T) {
	cfg := outboxConfig("dbz", func(o *Outbox) { o.Additional, _ = ParseAdditional("attempts:header") })
	d := New(cfg)
	frames := readFrames(t, "debezium-types")
	var seen []string
	for _, f := range frames {
		if o, _, ok := d.OutboxRelation(f.data); ok {
			seen = append(seen, o.Name())
			d.SetCatalog(o.Name(), map[string]Catalog{"attempts": {Default: "42"}})
		}
	}
	if strings.Join(seen, ",") != "dbz.outbox" {
		t.Fatalf("OutboxRelation found %q, want dbz.outbox once", seen)
	}
	txs := decodeAll(t, d, frames)
	if f := txs[0].Events[0].Fields[0]; string(f.Value) != "42" {
		t.Fatalf("attempts = %q, want the default from SetCatalog", f.Value)
	}
	if _, _, ok := d.OutboxRelation([]byte{'R', 0, 0}); ok {
		t.Fatal("a truncated Relation message named an outbox table")
	}
}
