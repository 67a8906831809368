package compat

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Format is the form a case's connector config is handed to walstream in.
type Format int

// Forms of a connector config.
const (
	JSON       Format = iota // the body of POST /connectors
	Properties               // a properties file, as ConnectStandalone reads it
	Strimzi                  // a Strimzi KafkaConnector resource
)

// Case is one entry of the corpus.
type Case struct {
	Name string
	// DDL creates the outbox table; {t} stands for its name, {s} for its
	// schema (the case's own).
	DDL string
	// Settings are the connector's settings over the harness's
	// (testenv.Connect.DebeziumConnector): the router's, the converters'.
	Settings map[string]string
	// SQL writes the rows, once both tools' slots exist; {t} is the table.
	SQL []string
	// CI runs the case in make test; make compat runs every case.
	CI bool
	// Format is how walstream is given the connector config.
	Format Format
	// Timestamps compares the records' timestamps: the case sets
	// table.field.event.timestamp and every row has one.
	Timestamps bool
	// Stops, when Debezium's task fails on the corpus, is what walstream's
	// stop must say (which row); walstream's records must be Debezium's,
	// or the first of them (the transactions it committed before the row).
	Stops string
	// DebeziumStops says Debezium's task fails on a row walstream
	// publishes (a known difference): Debezium's records must be the first
	// of walstream's.
	DebeziumStops bool
	// WalstreamStops, when walstream stops at a row Debezium publishes (a
	// known difference), is what its stop must say; its records must be
	// the first of Debezium's.
	WalstreamStops string
	// Known are the differences docs/debezium.md lists that the case's
	// records show.
	Known []Known
}

// Known is a difference docs/debezium.md lists (Known differences): where
// Debezium's bytes cannot be had, the values each tool wrote are rewritten
// to one form, so that the rest of each record is still compared.
type Known struct {
	Why                 string
	Debezium, Walstream *regexp.Regexp // in the value and headers, replaced by <known>
	// WalstreamHeaders are headers walstream adds that Debezium does not
	// write.
	WalstreamHeaders []string
}

// identityHash: StringConverter prints a VariableScaleDecimal's bytes as a
// Java array's identity hash, which differs per run.
var identityHash = Known{Why: "a numeric without precision under StringConverter",
	Debezium: regexp.MustCompile(`value=\[B@[0-9a-f]+\}`), Walstream: regexp.MustCompile(`value=[A-Za-z0-9+/=]*\}`)}

// Converters, as a connector config overrides the worker's.
var (
	stringConverters = map[string]string{
		"key.converter":   "org.apache.kafka.connect.storage.StringConverter",
		"value.converter": "org.apache.kafka.connect.storage.StringConverter",
	}
	jsonConverters = map[string]string{
		"key.converter":                  "org.apache.kafka.connect.json.JsonConverter",
		"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
		"key.converter.schemas.enable":   "false",
		"value.converter.schemas.enable": "false",
	}
	schemaConverters = map[string]string{
		"key.converter":                  "org.apache.kafka.connect.json.JsonConverter",
		"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
		"key.converter.schemas.enable":   "true",
		"value.converter.schemas.enable": "true",
	}
	// Apicurio's AvroConverter writing the Confluent wire format, set as
	// Debezium's documentation sets it, both tools registering into the
	// harness's registry.
	avroConverters = with(apicurio("key"), apicurio("value"))
	converters     = []struct {
		name     string
		settings map[string]string
	}{{"string", stringConverters}, {"json", jsonConverters}, {"json schemas", schemaConverters}, {"avro", avroConverters}}
)

// registryURL stands for the harness registry's URL in a case's settings.
const registryURL = "{registry}"

// apicurio is the key's or the value's Avro converter.
func apicurio(side string) map[string]string {
	p := side + ".converter"
	return map[string]string{
		p:                                        "io.apicurio.registry.utils.converter.AvroConverter",
		p + ".apicurio.registry.url":             registryURL,
		p + ".apicurio.registry.auto-register":   "true",
		p + ".apicurio.registry.find-latest":     "true",
		p + ".apicurio.registry.as-confluent":    "true",
		p + ".apicurio.registry.use-id":          "contentId",
		p + ".apicurio.registry.headers.enabled": "false",
	}
}

// with merges settings, later ones winning.
func with(ms ...map[string]string) map[string]string {
	out := make(map[string]string)
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// router prefixes the outbox router's settings with its transform's name.
func router(kv ...string) map[string]string {
	out := make(map[string]string)
	for i := 0; i+1 < len(kv); i += 2 {
		out["transforms.outbox."+kv[i]] = kv[i+1]
	}
	return out
}

// outboxDDL is the outbox table of Debezium's documentation.
const outboxDDL = `CREATE TABLE {t} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
	type text NOT NULL, payload jsonb)`

// basicRows are events as an application writes them: one per
// transaction and several in one, two aggregate types, payloads with
// non-ASCII text, escapes, numbers as written and nesting.
var basicRows = []string{
	`INSERT INTO {t} VALUES ('10000000-0000-0000-0000-000000000001', 'Order', 'o-1', 'Created', '{"b": 2, "a": "x\u00e9\u4e16", "n": 1.50, "big": 12345678901234567890}')`,
	`BEGIN;
	INSERT INTO {t} VALUES ('10000000-0000-0000-0000-000000000002', 'Order', 'o-2', 'Created', '{"quote": "say \"hi\"\\n\ttab", "nested": {"list": [1, 2.5, "three", null, true], "empty": {}}}');
	INSERT INTO {t} VALUES ('10000000-0000-0000-0000-000000000003', 'Customer', 'c-1', 'Registered', '"just a string"');
	INSERT INTO {t} VALUES ('10000000-0000-0000-0000-000000000004', 'Order', 'o-1', 'Paid', '[1, 2, 3]');
	COMMIT`,
	`INSERT INTO {t} VALUES ('10000000-0000-0000-0000-000000000005', 'Order', 'o-3', 'Created', 'null'), ('10000000-0000-0000-0000-000000000006', 'Order', 'o-3', 'Deleted', NULL)`,
	`UPDATE {t} SET type = 'Changed' WHERE id = '10000000-0000-0000-0000-000000000001'`,
	`DELETE FROM {t} WHERE id = '10000000-0000-0000-0000-000000000002'`,
	`INSERT INTO {t} VALUES ('10000000-0000-0000-0000-000000000007', 'Order', 'o-4', 'Created', '{}')`,
}

// typedColumns are columns of every type walstream encodes, as
// additional fields: placed in the envelope and in headers, they are
// written as keys are (the same Connect schema and value).
type typed struct{ name, typ, a, b string }

var typedColumns = []typed{
	{"c_smallint", "smallint", "1", "-32768"},
	{"c_int", "integer", "2", "-2147483648"},
	{"c_bigint", "bigint", "3", "9223372036854775807"},
	{"c_real", "real", "1.5", "'NaN'"},
	{"c_double", "double precision", "2.25", "1e-7"},
	{"c_double_inf", "double precision", "'Infinity'", "12345678.9"},
	{"c_numeric", "numeric(10,2)", "1234.5", "-0.01"},
	{"c_bool", "boolean", "true", "false"},
	{"c_text", "text", "'text é 世'", "''"},
	{"c_varchar", "varchar(20)", "'vc'", "' spaced '"},
	{"c_char", "char(5)", "'ch'", "'abcde'"},
	{"c_name", "name", "'nm'", "'x'"},
	{"c_uuid", "uuid", "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "'00000000-0000-0000-0000-000000000000'"},
	{"c_json", "json", `'{"a":  1}'`, `'[1, "x"]'`},
	{"c_jsonb", "jsonb", `'{"b": [1, 2], "a": null}'`, `'"s"'`},
	{"c_xml", "xml", "'<x>1</x>'", "'<y/>'"},
	{"c_inet", "inet", "'192.168.0.1'", "'::1/128'"},
	{"c_cidr", "cidr", "'10.0.0.0/8'", "'2001:db8::/32'"},
	{"c_macaddr", "macaddr", "'08:00:2b:01:02:03'", "'ff-ff-ff-ff-ff-ff'"},
	{"c_macaddr8", "macaddr8", "'08:00:2b:01:02:03:04:05'", "'08002b0102030405'"},
	{"c_date", "date", "'2026-11-26'", "'1969-12-31'"},
	{"c_ts", "timestamp", "'2026-11-26 10:11:12.123456'", "'1969-12-31 23:59:59.5'"},
	{"c_ts3", "timestamp(3)", "'2026-11-26 10:11:12.123'", "'2000-01-01 00:00:00'"},
	{"c_ts0", "timestamp(0)", "'2026-11-26 10:11:12'", "'1900-01-01 00:00:00'"},
}

// typesCase places every column of cols in the envelope and, under an
// alias, in a header, and writes a row of each column's first values, one
// of its second, and one of NULLs.
func typesCase(name string, cols []typed, extraDDL string, conv map[string]string) Case {
	var ddl, place, a, b, nulls []string
	for _, c := range cols {
		ddl = append(ddl, c.name+" "+c.typ)
		place = append(place, c.name+":envelope", c.name+":header:h"+c.name)
		a, b, nulls = append(a, c.a), append(b, c.b), append(nulls, "NULL")
	}
	row := func(n int, vals []string) string {
		return fmt.Sprintf(`INSERT INTO {t} VALUES ('20000000-0000-0000-0000-00000000000%d', 'Typed', 'k-%d', 'T', '{"n": %d}', %s)`, n, n, n, strings.Join(vals, ", "))
	}
	return Case{Name: name, DDL: extraDDL + `CREATE TABLE {t} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
		type text NOT NULL, payload jsonb, ` + strings.Join(ddl, ", ") + ")",
		Settings: with(conv, router("table.fields.additional.placement", strings.Join(place, ","))),
		SQL:      []string{row(1, a), row(2, b), row(3, nulls)}}
}

// newTypes are the column types walstream refused before Debezium ran
// beside it.
var newTypes = []typed{
	{"c_time", "time", "'10:11:12.123456'", "'00:00:00'"},
	{"c_time3", "time(3)", "'10:11:12.123'", "'23:59:59.999'"},
	{"c_timetz", "timetz", "'10:11:12.5+02'", "'00:00:00Z'"},
	{"c_interval", "interval", "'1 year 2 mons 3 days 04:05:06.789'", "'-1 day -00:00:01'"},
	{"c_money", "money", "'1234.56'", "'-0.01'"},
	{"c_enum", "{s}.mood", "'happy'", "'sad'"},
	{"c_text_array", "text[]", `'{a,"b c",NULL,"d\"e"}'`, "'{}'"},
	{"c_int_array", "integer[]", "'{1,2,-3}'", "'{NULL}'"},
	{"c_tstz", "timestamptz", "'2026-11-26 10:11:12.123456+00'", "'2026-11-26 10:11:12+05:30'"},
	{"c_numeric_any", "numeric", "'1234.5678'", "'-1e-20'"},
	{"c_tstz3", "timestamptz(3)", "'2026-11-26 10:11:12.1+00'", "'1969-12-31 23:59:59.999+00'"},
	{"c_tstz0", "timestamptz(0)", "'2026-11-26 10:11:12+00'", "'infinity'"},
	{"c_time0", "time(0)", "'10:11:12'", "'23:59:59'"},
	{"c_interval2", "interval", "'2 years'", "'00:00:00.000001'"},
	{"c_bytea", "bytea", `'\x00ff'`, "''"},
	{"c_uuid_array", "uuid[]", "'{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}'", "'{}'"},
	{"c_date_array", "date[]", "'{2026-11-26,NULL}'", "'{1969-12-31}'"},
	{"c_bool_array", "boolean[]", "'{t,f}'", "'{NULL}'"},
	{"c_float_array", "double precision[]", "'{1.5,NaN,1e-7}'", "'{}'"},
	{"c_jsonb_array", "jsonb[]", `ARRAY['{"a": 1}'::jsonb, '[]']`, "'{}'"},
	{"c_varchar_array", "varchar(10)[]", `'{"x,y"," "}'`, "'{}'"},
	{"c_ts_array", "timestamp(3)[]", `'{"2026-11-26 10:11:12.123"}'`, "'{}'"},
	{"c_numeric_any2", "numeric", "'-2'", "'1e3'"},
}

// defaultsCase is a column of each type with a default, in the envelope,
// written with its default and as NULL.
func defaultsCase(name string, conv map[string]string) Case {
	return Case{Name: name, DDL: `CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy');
		CREATE TABLE {t} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text, payload jsonb,
		d_interval interval DEFAULT '1 day', d_money money DEFAULT 1.5, d_enum {s}.mood DEFAULT 'ok', d_time time DEFAULT '12:00',
		d_timetz timetz DEFAULT '12:00+01', d_tstz timestamptz DEFAULT now(), d_ts timestamp DEFAULT '2026-01-01 00:00', d_date date DEFAULT '2026-01-01',
		d_array text[] DEFAULT '{a}', d_numeric numeric DEFAULT 1.5, d_numeric2 numeric(5,2) DEFAULT 1.5, d_bytea bytea DEFAULT '\x01',
		d_uuid uuid DEFAULT gen_random_uuid(), d_int int DEFAULT 7, d_bool bool DEFAULT false, d_float real DEFAULT 2.5, d_json json DEFAULT '{}',
		d_varchar varchar(5) DEFAULT 'v', d_inet inet DEFAULT '10.0.0.1', d_quote text DEFAULT 'it''s', d_tstz2 timestamptz(3) DEFAULT '2026-01-01 10:00+02',
		d_interval2 interval DEFAULT now() - now(), d_time3 time(3) DEFAULT '01:02:03.456')`,
		Settings: with(conv, router("table.fields.additional.placement",
			"d_interval:envelope,d_money:envelope,d_enum:envelope,d_time:envelope,d_timetz:envelope,d_tstz:envelope,d_ts:envelope,d_date:envelope,"+
				"d_array:envelope,d_numeric:envelope,d_numeric2:envelope,d_bytea:envelope,d_uuid:envelope,d_int:envelope,d_bool:envelope,d_float:envelope,"+
				"d_json:envelope,d_varchar:envelope,d_inet:envelope,d_quote:envelope,d_tstz2:envelope,d_interval2:envelope,d_time3:envelope")),
		SQL: []string{`INSERT INTO {t} (id, aggregatetype, aggregateid, payload) VALUES ('50000000-0000-0000-0000-000000000001', 'Defaults', 'k', '{}')`,
			`INSERT INTO {t} VALUES ('50000000-0000-0000-0000-000000000002', 'Defaults', 'k', 'T', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
				NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`}}
}

// keyCase is a table whose key column has type typ, with rows keyed a, b
// and NULL.
func keyCase(name, typ, a, b string, conv map[string]string) Case {
	ddl := ""
	if strings.Contains(typ, "mood") {
		ddl = "CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy');"
	}
	return Case{Name: name, DDL: ddl + `CREATE TABLE {t} (id text PRIMARY KEY, aggregatetype text NOT NULL, aggregateid ` + typ + `,
		type text, payload jsonb)`, Settings: conv, SQL: []string{
		`INSERT INTO {t} VALUES ('k1', 'Keyed', ` + a + `, 'T', '{"n": 1}')`,
		`INSERT INTO {t} VALUES ('k2', 'Keyed', ` + b + `, 'T', '{"n": 2}')`,
		`INSERT INTO {t} VALUES ('k3', 'Keyed', NULL, 'T', '{"n": 3}')`,
	}}
}

// nullDDL is an outbox table where every column but the route-by one may
// be NULL.
const nullDDL = `CREATE TABLE {t} (id text, aggregatetype text NOT NULL, aggregateid text, type text, payload jsonb)`

var nullRows = []string{
	`INSERT INTO {t} VALUES (NULL, 'Nulls', 'k-1', 'T', '{"n": 1}')`,
	`INSERT INTO {t} VALUES ('e-2', 'Nulls', NULL, 'T', '{"n": 2}')`,
	`INSERT INTO {t} VALUES ('e-3', 'Nulls', 'k-3', NULL, NULL)`,
	`INSERT INTO {t} VALUES (NULL, 'Nulls', NULL, NULL, NULL)`,
}

// payloadCase is a table whose payload column has type typ.
func payloadCase(name, typ string, rows []string, settings map[string]string) Case {
	return Case{Name: name, DDL: `CREATE TABLE {t} (id text PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
		type text, payload ` + typ + `)`, Settings: settings, SQL: rows}
}

func payloadRows(vals ...string) []string {
	var rows []string
	for i, v := range vals {
		rows = append(rows, fmt.Sprintf(`INSERT INTO {t} VALUES ('p%d', 'Payload', 'k-%d', 'T', %s)`, i+1, i+1, v))
	}
	return rows
}

// expandRows are payloads table.expand.json.payload rebuilds: numbers of
// each Java type, nulls, empty arrays, nesting, arrays of objects.
var expandRows = payloadRows(
	`'{"int": 1, "long": 3000000000, "double": 10.50, "exp": 1e3, "big": 12345678.9, "small": 0.001, "neg": -7}'`,
	`'{"none": null, "tags": [], "nested": {"a": null, "b": [1, 2], "c": {"d": "e"}}, "flag": true}'`,
	`'{"items": [{"n": 1, "s": "x"}, {"n": 2, "s": "y"}], "names": ["a", "b"]}'`,
	`'{"s": "text", "u": "\u00e9\n"}'`,
	`'"a string"'`,
	`'{}'`,
	`NULL`,
)

// astralDDL is an outbox with an enum whose label, and a text default,
// are characters outside the Basic Multilingual Plane, which JsonConverter
// (Jackson) writes as escaped surrogate pairs and everything else as UTF-8.
const astralDDL = `CREATE TYPE {s}.mood AS ENUM ('😀', 'ok');
	CREATE TABLE {t} (id text PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text, type text, payload jsonb,
	mood {s}.mood, note text DEFAULT '😀 default', tags text[])`

// astralRows put emoji and other 4-byte characters in the key, headers,
// envelope fields and nested payload objects and arrays; a payload's
// \u escapes of a pair are the character to Postgres.
var astralRows = []string{
	`INSERT INTO {t} (id, aggregatetype, aggregateid, type, payload, mood, tags) VALUES ('a1', 'Astral', '😀-1', '🚀 launched',
		'{"emoji": "😀", "nested": {"deeper": {"text": "a😀b 🚀 𝄞 \ud83c\udf89"}, "list": ["🎉", "x", "\u00e9"]}, "n": 1}', '😀', '{"😀","b 🚀"}')`,
	`INSERT INTO {t} VALUES ('a2', 'Astral', 'k-2', 'plain', U&'{"s": "!+10FFFF !+010000 x", "q": "\"😀\""}' UESCAPE '!', 'ok', 'note 𝄞', '{}')`,
	`INSERT INTO {t} VALUES ('a3', 'Astral', '𝄞', NULL, '"😀"', NULL, NULL, NULL)`,
}

// astralCases are the 4-byte characters under each converter, the
// payload as it is and expanded; the JSON ones expand a field name too
// (Avro refuses it as a name).
func astralCases() []Case {
	envelope := router("table.fields.additional.placement", "type:header:eventType,tags:header,mood:envelope,note:envelope,type:envelope:kind")
	headers := router("table.fields.additional.placement", "type:header:eventType,tags:header,mood:header,note:header", "table.expand.json.payload", "true")
	named := append(slices.Clone(astralRows), `INSERT INTO {t} (id, aggregatetype, aggregateid, payload) VALUES ('a4', 'Astral', 'k-4', '{"😀key": {"🚀": [1]}}')`,
		// The payload: Debezium keeps it a string.
		`INSERT INTO {t} (id, aggregatetype, aggregateid, payload) VALUES ('a5', 'Astral', 'k-5', '{"b": [1, 2.50, 0.0, 1e21], "😀": 1}')`)
	var cs []Case
	for _, conv := range converters {
		rows := astralRows
		if conv.name != "avro" {
			rows = named
		}
		cs = append(cs,
			Case{Name: "astral " + conv.name, DDL: astralDDL, Settings: with(conv.settings, envelope), SQL: astralRows},
			Case{Name: "astral expand " + conv.name, DDL: astralDDL, Settings: with(conv.settings, headers), SQL: rows, CI: conv.name == "json schemas"})
	}
	return cs
}

// deepPayload is a jsonb object nested n deep.
func deepPayload(n int) string {
	return fmt.Sprintf(`(repeat('{"a": ', %d) || '{"n": 1}' || repeat('}', %d))::jsonb`, n-1, n-1)
}

// unexpandable are payloads Debezium 3.6.1 does not expand
// (EventRouterDelegate logs "JSON expansion failed") and publishes as a
// string with the payload column's schema under every converter, with
// and without an envelope: arrays whose elements differ in JSON or number
// type (the first has the 1e21, which jsonb writes as an integer
// beyond 64 bits), a top-level string, an array of nulls, a number of more
// than 1,000 digits and an object nested 1,001 deep (past Jackson's
// limits), each around an expanded payload.
var unexpandableValues = []string{`'{"b": [1, 2.50, 0.0, 1e21]}'`, `'{"n": 1}'`, `'{"b": [1, 2.50, 0.0, 1e21]}'`, `'"str"'`,
	`'{"a": [1, 123456789012345678901234567890]}'`, `'{"a": [{"x": 1}, 2]}'`, `'{"a": [null]}'`, `'{"b": [3000000000, 1]}'`,
	`'{"n": 1e1000}'`, deepPayload(1001), `'{"n": 2}'`}

// halfExpanded are payloads whose schema Debezium infers but whose values
// it does not fit (toConnectData throws): an integer beyond 64 bits, alone
// or after a double; objects of an array whose fields differ in type;
// arrays of arrays that do; a top-level array; and a top-level [], which
// gets no schema. The payload stays a string with that schema (or none):
// StringConverter writes it, and without an envelope so do JsonConverter
// and AvroConverter a string with no schema; everything else stops
// Debezium.
var halfExpanded = []string{`'{"n": 123456789012345678901234567890}'`, `'{"a": [1.5, 123456789012345678901234567890]}'`,
	`'{"items": [{"a": 1}, {"a": "x"}]}'`, `'{"a": [[1], ["x"]]}'`, `'[{"a": 1}]'`, `'[]'`}

// unexpandableCases: what Debezium does with each payload it does not
// expand, under each converter, after earlier such payloads; where it
// stops, walstream stops at the same event.
func unexpandableCases() []Case {
	expand := router("table.expand.json.payload", "true")
	envelope := router("table.expand.json.payload", "true", "table.fields.additional.placement", "type:envelope")
	var cs []Case
	for _, conv := range converters {
		var rows []string
		stop := ""
		switch conv.name {
		case "string":
			rows = payloadRows(append(slices.Clone(unexpandableValues), halfExpanded...)...)
		default:
			// A string with no schema is written; the first half-expanded
			// payload with one stops Debezium.
			rows = payloadRows(append(slices.Clone(unexpandableValues), `'[]'`, `'{"n": 3}'`, halfExpanded[0])...)
			stop = fmt.Sprintf("event id p%d", len(rows))
		}
		cs = append(cs, withStop(payloadCase("expand unexpandable "+conv.name, "jsonb", rows, with(conv.settings, expand)), stop))
	}
	for _, conv := range converters {
		// In an envelope Struct.put refuses any of the half-expanded
		// payloads, whatever the converter; a [] first.
		rows := payloadRows(append(slices.Clone(unexpandableValues), `'[]'`)...)
		cs = append(cs, withStop(payloadCase("expand unexpandable envelope "+conv.name, "jsonb", rows, with(conv.settings, envelope)),
			fmt.Sprintf("event id p%d", len(rows))))
	}
	for i, p := range halfExpanded[1:4] {
		rows := payloadRows(`'{"n": 1}'`, p)
		cs = append(cs, withStop(payloadCase(fmt.Sprintf("expand half expanded %d", i+2), "jsonb", rows, with(jsonConverters, expand)), "event id p2"))
	}
	// Debezium's router keeps one envelope schema per schema version, made
	// for the version's first event: a later event of that version whose
	// payload has another schema stops it, whatever the converter; the
	// failure depends on what came before.
	versioned := `CREATE TABLE {t} (id text PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text, payload jsonb, version int)`
	vrows := func(rows ...string) []string {
		var out []string
		for i := 0; i+1 < len(rows); i += 2 {
			out = append(out, fmt.Sprintf(`INSERT INTO {t} VALUES ('v%d', 'Payload', 'k-%d', 'T', '%s', %s)`, i/2+1, i/2+1, rows[i], rows[i+1]))
		}
		return out
	}
	version := router("table.expand.json.payload", "true", "table.fields.additional.placement", "type:envelope", "table.field.event.schema.version", "version")
	cs = append(cs,
		// Two shapes of one version.
		withStop(Case{Name: "expand schema version json schemas", DDL: versioned, Settings: with(schemaConverters, version),
			SQL: vrows(`{"a": 1}`, "1", `{"a": 2}`, "1", `{"n": 1}`, "2", `{"b": "x"}`, "1")}, "event id v4"),
		// A string kept, then an expanded payload of the same version.
		withStop(Case{Name: "expand schema version string", DDL: versioned, Settings: with(stringConverters, version),
			SQL: vrows(`{"b": [1, 2.50]}`, "1", `{"b": [1, 2.50]}`, "1", `{"n": 1}`, "2", `{"a": 1}`, "1")}, "event id v4"),
		// The reverse.
		withStop(Case{Name: "expand schema version avro", DDL: versioned, Settings: with(avroConverters, version),
			SQL: vrows(`{"a": 1}`, "1", `{"n": 1}`, "2", `{"b": [1, 2.50]}`, "1")}, "event id v3"),
	)
	// Jackson writes nothing nested deeper than 1,000: with schemas, a
	// payload 500 deep; in an envelope 1,000; under Avro, 251 (its
	// schema's text).
	cs = append(cs,
		withStop(payloadCase("expand deep json schemas", "jsonb", payloadRows(deepPayload(499), deepPayload(500)), with(schemaConverters, expand)), "event id p2"),
		withStop(payloadCase("expand deep envelope", "jsonb", payloadRows(deepPayload(999), deepPayload(1000)), with(jsonConverters, envelope)), "event id p2"),
		withStop(payloadCase("expand deep avro", "jsonb", payloadRows(deepPayload(250), deepPayload(251)), with(avroConverters, expand)), "event id p2"),
		payloadCase("expand deep json", "jsonb", payloadRows(deepPayload(1000), `'{"n": 1}'`), with(jsonConverters, expand)),
	)
	return cs
}

// messagesCase is an outbox of logical messages only, decoded by
// DecodeLogicalDecodingMessageContent before the router.
func messagesCase(name string, conv map[string]string, extra map[string]string) Case {
	return Case{Name: name, DDL: outboxDDL, Settings: with(conv, map[string]string{
		"transforms":             "decode,outbox",
		"transforms.decode.type": "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent",
	}, extra), SQL: []string{
		`SELECT pg_logical_emit_message(true, 'outbox', '{"id": "m-1", "aggregatetype": "Msg", "aggregateid": "a-1", "type": "Created", "payload": {"x": 1, "s": "t", "d": 2.50, "n": null, "l": [1, 2], "o": {"p": true}}}')`,
		`BEGIN;
		INSERT INTO {t} VALUES ('30000000-0000-0000-0000-000000000001', 'Msg', 'a-1', 'Row', '{"row": 1}');
		SELECT pg_logical_emit_message(true, 'other', '{"id": "m-2", "aggregatetype": "Msg", "aggregateid": "a-1", "type": "Changed", "payload": "a string"}');
		COMMIT`,
		`SELECT pg_logical_emit_message(true, 'outbox', '{"aggregatetype": "Msg", "id": "m-3", "payload": {"empty": []}, "aggregateid": "a-2"}')`,
	}}
}

func withKnown(c Case, k Known) Case {
	c.Known = append(c.Known, k)
	return c
}

func withStop(c Case, stop string) Case {
	c.Stops = stop
	return c
}

// corpus is every case.
func corpus() []Case {
	var cs []Case
	for _, conv := range converters {
		cs = append(cs, Case{Name: "defaults " + conv.name, DDL: outboxDDL, Settings: conv.settings, SQL: basicRows, CI: conv.name == "json schemas"})
	}
	cs = append(cs,
		Case{Name: "extended headers off", DDL: outboxDDL, Settings: with(stringConverters, map[string]string{"extended.headers.enabled": "false"}),
			SQL: basicRows, Format: Properties},
		Case{Name: "strimzi", DDL: outboxDDL, Settings: jsonConverters, SQL: basicRows[:1], Format: Strimzi},
		// A string key with a JSON value, and the reverse: Connect sets them apart.
		Case{Name: "string key json value", DDL: outboxDDL, Settings: with(schemaConverters, map[string]string{
			"key.converter": "org.apache.kafka.connect.storage.StringConverter"}), SQL: basicRows[:3]},
	)
	for _, conv := range converters {
		c := typesCase("types "+conv.name, typedColumns, "", conv.settings)
		c.CI = conv.name == "json schemas"
		n := typesCase("new types "+conv.name, newTypes, "CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy');", conv.settings)
		n.CI = conv.name == "json" || conv.name == "avro"
		if conv.name == "string" {
			n.Known = []Known{identityHash}
		}
		cs = append(cs, c, n)
	}
	cs = append(cs,
		keyCase("key uuid", "uuid", "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "'00000000-0000-0000-0000-000000000001'", stringConverters),
		keyCase("key bigint", "bigint", "4711", "-5", schemaConverters),
		keyCase("key numeric", "numeric(10,2)", "1234.5", "-0.01", schemaConverters),
		keyCase("key timestamp", "timestamp(3)", "'2026-11-26 10:11:12.123'", "'1970-01-01 00:00:00'", jsonConverters),
		keyCase("key double", "double precision", "1e7", "-0.0", stringConverters),
		keyCase("key enum", "{s}.mood", "'ok'", "'sad'", schemaConverters),
		keyCase("key timestamptz", "timestamptz", "'2026-11-26 10:11:12.5+01'", "'2026-11-26 10:11:12+00'", schemaConverters),
		keyCase("key interval array", "interval", "'1 mon'", "'-3 days'", stringConverters),
		keyCase("key text array", "text[]", `'{a,b}'`, "'{}'", jsonConverters),
		keyCase("key bigint avro", "bigint", "4711", "-5", avroConverters),
		keyCase("key numeric avro", "numeric(10,2)", "1234.5", "-0.01", avroConverters),
		keyCase("key uuid avro", "uuid", "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "'00000000-0000-0000-0000-000000000001'", avroConverters),
		keyCase("key timestamptz avro", "timestamptz", "'2026-11-26 10:11:12.5+01'", "'2026-11-26 10:11:12+00'", avroConverters),
		keyCase("key enum avro", "{s}.mood", "'ok'", "'sad'", avroConverters),
		keyCase("key text array avro", "text[]", `'{a,NULL}'`, "'{}'", avroConverters),
		// Avro for the key or the value only: Connect sets them apart.
		Case{Name: "string key avro value", DDL: outboxDDL, Settings: with(stringConverters, apicurio("value")), SQL: basicRows[:3], Format: Strimzi},
		Case{Name: "avro key json value", DDL: nullDDL, Settings: with(jsonConverters, apicurio("key")), SQL: nullRows, Format: Properties},
	)
	for _, conv := range converters {
		cs = append(cs, Case{Name: "nulls " + conv.name, DDL: nullDDL, Settings: conv.settings, SQL: nullRows, CI: conv.name == "string"})
	}
	cs = append(cs, defaultsCase("defaults of every type", schemaConverters), defaultsCase("defaults of every type avro", avroConverters))
	cs = append(cs, Case{Name: "null aggregatetype", DDL: `CREATE TABLE {t} (id text, aggregatetype text, aggregateid text, type text, payload jsonb)`,
		Settings: jsonConverters, SQL: []string{
			`INSERT INTO {t} VALUES ('e-1', 'Nulls', 'k-1', 'T', '{"n": 1}')`,
			`INSERT INTO {t} VALUES ('e-2', NULL, 'k-2', 'T', '{"n": 2}')`,
		}, Stops: "event id e-2"}) // RegexRouter matches the topic, which is null
	blank := payloadRows(`'x'`, `''`, `'   '`, `E'\t\n'`, `NULL`, `E'\u00a0'`)
	for _, conv := range converters {
		cs = append(cs,
			payloadCase("text payload "+conv.name, "text", payloadRows(`'{"a": 1}'`, `'plain "text"'`, `E'tab	here'`, `''`, `NULL`), conv.settings),
			payloadCase("json payload "+conv.name, "json", payloadRows(`'{"b": 1,  "a": [ 2 ]}'`, `'"s"'`, `'null'`, `NULL`), conv.settings),
			payloadCase("bytea payload "+conv.name, "bytea", payloadRows(`'\x00ff10'`, `''`, `convert_to('{"a": 1}', 'UTF8')`, `NULL`), conv.settings),
		)
	}
	cs = append(cs,
		payloadCase("bytea payload binary converter", "bytea", payloadRows(`'\x00ff10'`, `''`, `NULL`),
			with(jsonConverters, map[string]string{"value.converter": "io.debezium.converters.BinaryDataConverter"})),
		payloadCase("empty payloads tombstones string", "text", blank, with(stringConverters, router("route.tombstone.on.empty.payload", "true"))),
		payloadCase("empty payloads tombstones json", "text", blank, with(jsonConverters, router("route.tombstone.on.empty.payload", "true"))),
		payloadCase("empty payloads no tombstones", "text", blank, with(jsonConverters, router("route.tombstone.on.empty.payload", "false"))),
	)
	placed := `CREATE TABLE {t} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
		payload jsonb, shard int, created_at timestamp, created3 timestamp(3), version int, tenant text DEFAULT 'acme')`
	placedRows := []string{
		`INSERT INTO {t} VALUES ('40000000-0000-0000-0000-000000000001', 'Order', 'o-1', 'Created', '{"n": 1}', 2, '2026-11-23 06:00:00.25', '2026-11-23 06:00:00.125', 3, 'x')`,
		`INSERT INTO {t} VALUES ('40000000-0000-0000-0000-000000000002', 'Order', 'o-1', 'Paid', '{"n": 2}', 0, '2026-11-23 06:00:01.999999', '2026-11-23 06:00:01', 3, NULL)`,
		`INSERT INTO {t} VALUES ('40000000-0000-0000-0000-000000000003', 'Invoice', 'i-1', 'Sent', '{"n": 3}', NULL, '1999-01-01 00:00:00', '1999-01-01 00:00:00', 4, 'y')`,
	}
	for _, conv := range converters {
		cs = append(cs, Case{Name: "placements " + conv.name, DDL: placed, SQL: placedRows, Timestamps: true, CI: conv.name == "json" || conv.name == "avro",
			Settings: with(conv.settings, router(
				"table.fields.additional.placement", "type:header:eventType, shard:partition,tenant:envelope,type:envelope:kind,version:header",
				"table.field.event.timestamp", "created_at",
				"route.topic.regex", "(?<routedByValue>Ord|Inv)(er|oice)",
				"route.topic.replacement", "events.${routedByValue}.$2"))})
	}
	cs = append(cs,
		Case{Name: "timestamp millis route by type", DDL: placed, SQL: placedRows, Timestamps: true, Settings: with(jsonConverters, router(
			"table.field.event.timestamp", "created3", "route.by.field", "type"))},
		Case{Name: "schema version", DDL: placed, SQL: placedRows, Settings: with(schemaConverters, router(
			"table.fields.additional.placement", "tenant:envelope", "table.field.event.schema.version", "version"))},
		Case{Name: "schema version avro", DDL: placed, SQL: placedRows, Settings: with(avroConverters, router(
			"table.fields.additional.placement", "tenant:envelope,shard:envelope", "table.field.event.schema.version", "version"))},
	)
	for _, conv := range converters {
		cs = append(cs, payloadCase("expand "+conv.name, "jsonb", expandRows, with(conv.settings, router("table.expand.json.payload", "true"))))
	}
	cs = append(cs,
		payloadCase("expand nulls", "jsonb", expandRows, with(schemaConverters, router("table.expand.json.payload", "true",
			"table.json.payload.null.behavior", "optional_bytes"))),
		payloadCase("expand envelope", "jsonb", expandRows, with(schemaConverters, router("table.expand.json.payload", "true",
			"table.fields.additional.placement", "type:envelope"))),
		payloadCase("expand nulls avro", "jsonb", expandRows, with(avroConverters, router("table.expand.json.payload", "true",
			"table.json.payload.null.behavior", "optional_bytes"))),
		payloadCase("expand envelope avro", "jsonb", expandRows, with(avroConverters, router("table.expand.json.payload", "true",
			"table.fields.additional.placement", "type:envelope,aggregateid:envelope:agg"))),
		withStop(payloadCase("expand top-level array", "jsonb", payloadRows(`'{"a": 1}'`, `'[1, 2]'`),
			with(jsonConverters, router("table.expand.json.payload", "true"))), "event id p2"), // JsonConverter cannot write the array as a struct
	)
	cs = append(cs, astralCases()...)
	cs = append(cs, unexpandableCases()...)
	// The known differences docs/debezium.md lists, each shown.
	cs = append(cs,
		// Debezium merges the element schemas of an array of objects in
		// HashSet order; walstream in element order.
		withKnown(payloadCase("known expand mixed objects", "jsonb", payloadRows(`'{"items": [{"a": 1}, {"b": "x"}]}'`, `'{"items": [{"n": 1}, {"n": 2}]}'`),
			with(jsonConverters, router("table.expand.json.payload", "true"))),
			Known{Why: "array elements of different fields", Debezium: regexp.MustCompile(`^\{"items":\[.*\]\}$`), Walstream: regexp.MustCompile(`^\{"items":\[.*\]\}$`)}),
		// table.json.payload.empty.array.behavior is Debezium 3.7's.
		withKnown(payloadCase("known empty array behavior", "jsonb", payloadRows(`'{"tags": [], "n": 1}'`),
			with(jsonConverters, router("table.expand.json.payload", "true", "table.json.payload.empty.array.behavior", "optional_string"))),
			Known{Why: "a Debezium 3.7 setting", Debezium: regexp.MustCompile(`^\{"n":1\}$`), Walstream: regexp.MustCompile(`^\{"n":1,"tags":\[\]\}$`)}),
		// Doubles as Java 19+ prints them; Kafka Connect runs on Java 17 here.
		withKnown(typesCase("known double digits", []typed{{"c_double", "double precision", "2.82879384806159E17", "1.0E23"}}, "", jsonConverters),
			Known{Why: "Double.toString before Java 19", Debezium: regexp.MustCompile(`2\.82879384806159008E17|9\.999999999999999E22`),
				Walstream: regexp.MustCompile(`2\.82879384806159E17|1\.0E23`)}),
		// Debezium's router reads a timestamptz event timestamp with getInt64, and
		// a partition column with getInt32: it stops; walstream goes on.
		Case{Name: "known timestamptz event timestamp", DDL: `CREATE TABLE {t} (id text PRIMARY KEY, aggregatetype text NOT NULL,
			aggregateid text, payload jsonb, at timestamptz, shard smallint)`, DebeziumStops: true, Timestamps: true,
			Settings: with(jsonConverters, router("table.field.event.timestamp", "at")),
			SQL:      []string{`INSERT INTO {t} VALUES ('t1', 'Zoned', 'k', '{}', now() - interval '1 day 00:00:00.25', 1)`}},
		Case{Name: "known smallint partition", DDL: `CREATE TABLE {t} (id text PRIMARY KEY, aggregatetype text NOT NULL,
			aggregateid text, payload jsonb, shard smallint)`, DebeziumStops: true,
			Settings: with(jsonConverters, router("table.fields.additional.placement", "shard:partition")),
			SQL:      []string{`INSERT INTO {t} VALUES ('s1', 'Sharded', 'k', '{}', 1)`}},
		// A non-transactional message cannot be published exactly once.
		Case{Name: "known non-transactional message", DDL: outboxDDL, WalstreamStops: "is not transactional",
			Settings: with(jsonConverters, map[string]string{"transforms": "decode,outbox",
				"transforms.decode.type": "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent"}),
			SQL: []string{`SELECT pg_logical_emit_message(false, 'outbox', '{"id": "m-1", "aggregatetype": "Msg", "aggregateid": "a", "payload": {}}')`,
				`INSERT INTO {t} VALUES ('60000000-0000-0000-0000-000000000001', 'Msg', 'a', 'Row', '{}')`}},
		// The tracing column: walstream copies the stored context; Debezium
		// without OpenTelemetry writes none.
		withKnown(Case{Name: "known tracing column", DDL: fixtureDDL + "; ALTER TABLE {t} ADD COLUMN tracingspancontext text",
			Settings: with(stringConverters, router("tracing.span.context.field", "tracingspancontext")),
			SQL: []string{`INSERT INTO {t} VALUES ('aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa', 'Order', 'o-10', 'OrderPlaced', '{"seq": 11}',
				E'#Thu Nov 23 2026\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n')`}},
			Known{Why: "the tracing column", WalstreamHeaders: []string{"traceparent"}}),
	)
	for _, conv := range converters {
		c := messagesCase("messages "+conv.name, conv.settings, nil)
		c.CI = conv.name == "json"
		cs = append(cs, c)
	}
	cs = append(cs, messagesCase("messages null fields", schemaConverters, map[string]string{"transforms.decode.fields.null.include": "true"}),
		messagesCase("messages one prefix", jsonConverters, map[string]string{"message.prefix.include.list": "outbox"}))
	return cs
}

// TestCompat runs the corpus through Debezium and walstream and compares
// their records byte for byte (see the package documentation).
func TestCompat(t *testing.T) {
	for _, c := range append(corpus(), goldenCases()...) {
		t.Run(c.Name, func(t *testing.T) {
			if !c.CI && !*all {
				t.Skip("make compat runs it (-compat.all)")
			}
			e := sharedEnv(t)
			dbz, ws := e.run(t, c)
			if len(dbz.Records) == 0 && dbz.Stopped == "" {
				t.Fatal("Debezium wrote no record: the case tests nothing")
			}
			for _, d := range compare(c, dbz, ws) {
				t.Error(d)
			}
			if t.Failed() {
				t.Logf("Debezium's records:\n%swalstream's records:\n%s", show(dbz.Records), show(ws.Records))
				if ws.Stopped != "" {
					t.Logf("walstream stopped:\n%s", lastLines(ws.Stopped, 10))
				}
			}
		})
	}
}
