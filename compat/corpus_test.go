package compat

import (
	"maps"
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
	// DDL creates the outbox table; {t} stands for its name.
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
	// Stops says Debezium's task fails on the corpus (walstream must
	// stop too, after the same records) and why.
	Stops string
}

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
	converters = []struct {
		name     string
		settings map[string]string
	}{{"string", stringConverters}, {"json", jsonConverters}, {"json schemas", schemaConverters}}
)

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

// corpus is every case.
func corpus() []Case {
	var cs []Case
	for _, conv := range converters {
		cs = append(cs, Case{Name: "defaults " + conv.name, DDL: outboxDDL, Settings: conv.settings, SQL: basicRows, CI: conv.name == "json schemas"})
	}
	cs = append(cs, Case{Name: "extended headers off", DDL: outboxDDL, Settings: with(stringConverters, map[string]string{"extended.headers.enabled": "false"}),
		SQL: basicRows, Format: Properties})
	cs = append(cs, Case{Name: "strimzi", DDL: outboxDDL, Settings: jsonConverters, SQL: basicRows[:1], Format: Strimzi})
	return cs
}

// TestCompat runs the corpus through Debezium and walstream and compares
// their records byte for byte (see the package documentation).
func TestCompat(t *testing.T) {
	for _, c := range corpus() {
		t.Run(c.Name, func(t *testing.T) {
			if !c.CI && !*all {
				t.Skip("make compat runs it (-compat.all)")
			}
			e := sharedEnv(t)
			dbz, ws := e.run(t, c)
			if len(dbz.Records) == 0 && dbz.Stopped == "" {
				t.Fatal("Debezium wrote no record: the case tests nothing")
			}
			if c.Stops != "" && dbz.Stopped == "" {
				t.Errorf("Debezium did not stop, the case says it stops: %s", c.Stops)
			}
			if c.Stops == "" && dbz.Stopped != "" {
				t.Errorf("Debezium stopped:\n%s", firstLines(dbz.Stopped, 5))
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
