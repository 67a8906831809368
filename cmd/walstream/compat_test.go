package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLogicalMessageOutboxJSON: a row and a pg_logical_emit_message event
// in one transaction arrive in commit order, encoded as Debezium's
// DecodeLogicalDecodingMessageContent, outbox router and JsonConverter
// (schemas.enable=false) write them (the message's payload object is a
// struct, written as compact JSON: compat case "messages json"), and a
// NULL payload becomes a tombstone; read back with kcat from
// zstd-compressed batches.
func TestLogicalMessageOutboxJSON(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "ALTER TABLE outbox ALTER COLUMN payload DROP NOT NULL")
	// zstd batches, which kcat (librdkafka) decompresses on its own.
	p := e.start([]string{"--converter", "json", "--tombstone-on-empty-payload", "--compression", "zstd"}).streaming(t)
	e.pg.Exec("postgres", `BEGIN;
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000e1', 'Order', 'o-1', 'Placed', '{"n": 1}');
		SELECT pg_logical_emit_message(true, 'walstream', '{"id": "m-1", "aggregatetype": "Order", "aggregateid": "o-1", "type": "Shipped", "payload": {"n": 2}}');
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000e2', 'Order', 'o-1', 'Deleted', NULL);
		COMMIT`)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	recs := e.kcat("outbox.event.Order")
	want := []record{
		{Key: `"o-1"`, Headers: "id=00000000-0000-0000-0000-0000000000e1", Value: `"{\"n\": 1}"`},
		{Key: `"o-1"`, Headers: "id=m-1", Value: `{"n":2}`},
		{Key: `"o-1"`, Headers: "id=00000000-0000-0000-0000-0000000000e2", Value: ""},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		if g := recs[i]; g.Key != w.Key || g.Headers != w.Headers || g.Value != w.Value || g.Partition != recs[0].Partition {
			t.Errorf("record %d = %+v, want key %s headers %s value %s on one partition", i, g, w.Key, w.Headers, w.Value)
		}
	}
}

// TestDebeziumConfigFile runs walstream from a config file holding a
// Debezium connector's outbox router settings and its converters as they
// were copied, over two outbox tables in one slot, each with its own
// mapping, and reads the records back with kcat: topics, keys, values,
// headers, partitions and timestamps as Debezium's router with
// JsonConverter (schemas.enable=false) would write them. The event
// timestamp column is a timestamp, which Debezium reads as an
// io.debezium.time.MicroTimestamp; a timestamptz, which walstream also
// takes, would stop Debezium (EventRouterDelegate.getEventTimestampMs reads
// it with getInt64), so it is not in a config presented as Debezium's. An
// UPDATE is logged and skipped; a row naming a partition the topic lacks
// stops walstream with that row named, and is not confirmed. Then the
// converters Debezium users run: JsonConverter with schemas, and a string
// key with a schemas-enabled JSON value (testDebeziumConverters).
func TestDebeziumConfigFile(t *testing.T) {
	t.Parallel()
	t.Run("two tables, json without schemas", testTwoTablesJSON)
	t.Run("converters", testDebeziumConverters)
}

func testTwoTablesJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pg.Exec("postgres", `CREATE SCHEMA orders; CREATE SCHEMA billing;
		CREATE TABLE orders.outbox (LIKE public.outbox INCLUDING ALL);
		ALTER TABLE orders.outbox ADD COLUMN shard int, ADD COLUMN created_at timestamp;
		CREATE TABLE billing.outbox (event_id text PRIMARY KEY, kind text NOT NULL, invoice_id text NOT NULL, body text NOT NULL)`)
	cfg := filepath.Join(t.TempDir(), "walstream.yaml")
	if err := os.WriteFile(cfg, []byte(`# Debezium's outbox router settings and converters, copied from the connector config.
slot: ${WS_TEST_SLOT}
key.converter: org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable: false
value.converter: org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable: false
outbox:
  transforms.outbox.type: io.debezium.transforms.outbox.EventRouter
  transforms.outbox.route.topic.replacement: ${routedByValue}.events
  transforms.outbox.table.fields.additional.placement: type:header:eventType,shard:partition
  transforms.outbox.table.field.event.timestamp: created_at
  transforms.outbox.table.op.invalid.behavior: warn
tables:
  orders.outbox:
  billing.outbox:
    table.field.event.id: event_id
    table.field.event.key: invoice_id
    table.field.event.payload: body
    table.field.event.timestamp: ""
    route.by.field: kind
    route.topic.regex: (?<routedByValue>Inv)oice
    route.topic.replacement: billing.${routedByValue}
    table.fields.additional.placement: kind:envelope:eventKind
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := e.start([]string{"--config", cfg}, "WS_TEST_SLOT=compat").streaming(t)
	e.pg.Exec("postgres", `BEGIN;
		INSERT INTO orders.outbox (id, aggregatetype, aggregateid, type, payload, shard, created_at)
			VALUES ('00000000-0000-0000-0000-0000000000d1', 'Order', 'o-1', 'Placed', '{"n": 1}', 2, '2026-11-23 06:00:00.25');
		INSERT INTO billing.outbox VALUES ('inv-evt-1', 'Invoice', 'inv-1', 'invoice "1"');
		INSERT INTO orders.outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES ('00000000-0000-0000-0000-0000000000d2', 'Order', 'o-1', 'Paid', '{"n": 2}');
		COMMIT;
		UPDATE orders.outbox SET type = 'Changed' WHERE id = '00000000-0000-0000-0000-0000000000d1'`)
	e.waitConfirmed("compat", e.currentLSN(), 30*time.Second, p)

	orders := e.kcat("Order.events") // partition by partition: d2's key hashes elsewhere
	if len(orders) != 2 {
		t.Fatalf("Order.events has %d records, want 2: %+v", len(orders), orders)
	}
	slices.SortFunc(orders, func(a, b record) int { return strings.Compare(a.Headers, b.Headers) })
	if g := orders[0]; g.Partition != 2 || g.Key != `"o-1"` || g.Headers != "id=00000000-0000-0000-0000-0000000000d1,eventType=Placed" ||
		g.Value != `"{\"n\": 1}"` || g.Timestamp != time.Date(2026, 11, 23, 6, 0, 0, 250e6, time.UTC).UnixMilli() {
		t.Errorf("first order record %+v: want partition 2 from shard, the type header, the created_at timestamp", g)
	}
	// Without a partition column the key's murmur2 hash places it, as Kafka's
	// Java producer behind Debezium does: over the key's converted bytes.
	byKey := kgo.StickyKeyPartitioner(nil).ForTopic("Order.events").Partition(&kgo.Record{Key: []byte(`"o-1"`)}, 3)
	if g := orders[1]; int(g.Partition) != byKey || g.Key != `"o-1"` || g.Headers != "id=00000000-0000-0000-0000-0000000000d2,eventType=Paid" || g.Value != `"{\"n\": 2}"` {
		t.Errorf("second order record %+v", g)
	}
	billing := e.kcat("billing.Inv")
	if len(billing) != 1 || billing[0].Key != `"inv-1"` || billing[0].Headers != "id=inv-evt-1" ||
		billing[0].Value != `{"payload":"invoice \"1\"","eventKind":"Invoice"}` {
		t.Fatalf("billing.Inv = %+v: want billing's own columns, route and envelope", billing)
	}
	p.waitLog(t, "ignoring an UPDATE of an outbox row", 10*time.Second)
	if l := p.Log(); !strings.Contains(l, "table=orders.outbox event_id=00000000-0000-0000-0000-0000000000d1") {
		t.Errorf("the UPDATE warning does not name the table and row")
	}

	// Partition 7 of a 3-partition topic: stop, name the row, confirm nothing past it.
	before := e.currentLSN()
	e.pg.Exec("postgres", `INSERT INTO orders.outbox (id, aggregatetype, aggregateid, type, payload, shard)
		VALUES ('00000000-0000-0000-0000-0000000000d3', 'Order', 'o-2', 'Placed', '{"n": 3}', 7)`)
	if err := p.wait(t, 60*time.Second); err == nil {
		t.Fatal("walstream exited 0 after an event named a partition its topic lacks")
	}
	for _, want := range []string{"event id 00000000-0000-0000-0000-0000000000d3", "partition 7, topic Order.events has 3"} {
		if !strings.Contains(p.Log(), want) {
			t.Errorf("exit log does not mention %q", want)
		}
	}
	if got := e.confirmedLSN("compat"); got > before {
		t.Errorf("slot confirmed %s, past %s, before the failed event", got, before)
	}
	if n := len(e.kcat("Order.events")); n != 2 {
		t.Errorf("Order.events has %d records after the failure, want 2", n)
	}
}

// testDebeziumConverters runs walstream from two copied connector configs
// over a table with a bigint key and a column default, and reads the
// records back with kcat:
//
//   - JsonConverter for key and value with schemas.enable left at Kafka
//     Connect's default (true): the key is {"schema":{"type":"int64",...},
//     "payload":4711} (EventRouterDelegate.defineRecordKeySchema gives the
//     key column's schema); the value is the envelope struct named
//     <topic.prefix>.<schema>.<table>.<route-by value>.Value
//     (getSchemaName), its status field the column's default for a NULL
//     (Struct.get), the default in its schema (asJsonSchema), and a NULL
//     payload is "payload":null, not refused;
//   - a StringConverter key with a schemas-enabled JsonConverter value and
//     an expanded payload: the key is "4711", and the record's partition
//     is the murmur2 hash of those bytes, as the Java producer behind
//     Connect places it.
func testDebeziumConverters(t *testing.T) {
	t.Parallel()
	const ddl = `CREATE SCHEMA dbz;
		CREATE TABLE dbz.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid bigint NOT NULL, type text,
			payload jsonb, status text DEFAULT 'new')`
	const rows = `BEGIN;
		INSERT INTO dbz.outbox VALUES ('00000000-0000-0000-0000-0000000000f1', 'Order', 4711, 'Placed', '{"n": 1, "price": 10.50}', NULL);
		INSERT INTO dbz.outbox VALUES ('00000000-0000-0000-0000-0000000000f2', 'Order', 4711, 'Deleted', NULL, 'gone');
		COMMIT`
	for _, tc := range []struct {
		name, config string
		want         []record // Key, Headers, Value
		keyBytes     string
	}{
		{"json with schemas", `key.converter: org.apache.kafka.connect.json.JsonConverter
value.converter: org.apache.kafka.connect.json.JsonConverter
topic.prefix: dbserver1
outbox:
  transforms.outbox.type: io.debezium.transforms.outbox.EventRouter
  transforms.outbox.table.fields.additional.placement: status:envelope
`, []record{
			{Key: `{"schema":{"type":"int64","optional":false},"payload":4711}`, Headers: "id=00000000-0000-0000-0000-0000000000f1",
				Value: `{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
					`{"type":"string","optional":true,"default":"new","field":"status"}],"optional":false,"name":"dbserver1.dbz.outbox.Order.Value"},` +
					`"payload":{"payload":"{\"n\": 1, \"price\": 10.50}","status":"new"}}`},
			{Key: `{"schema":{"type":"int64","optional":false},"payload":4711}`, Headers: "id=00000000-0000-0000-0000-0000000000f2",
				Value: `{"schema":{"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
					`{"type":"string","optional":true,"default":"new","field":"status"}],"optional":false,"name":"dbserver1.dbz.outbox.Order.Value"},` +
					`"payload":{"payload":null,"status":"gone"}}`},
		}, `{"schema":{"type":"int64","optional":false},"payload":4711}`},
		{"string key, json value with schemas", `key.converter: org.apache.kafka.connect.storage.StringConverter
value.converter: org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable: true
outbox:
  table.expand.json.payload: true
`, []record{
			{Key: "4711", Headers: "id=00000000-0000-0000-0000-0000000000f1",
				Value: `{"schema":{"type":"struct","fields":[{"type":"int32","optional":true,"field":"n"},{"type":"double","optional":true,"field":"price"}],` +
					`"optional":true,"name":"payload"},"payload":{"n":1,"price":10.5}}`},
			{Key: "4711", Headers: "id=00000000-0000-0000-0000-0000000000f2",
				Value: `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":null}`},
		}, "4711"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.pg.Exec("postgres", ddl)
			cfg := filepath.Join(t.TempDir(), "walstream.yaml")
			body := "slot: ${WS_TEST_SLOT}\ntable: dbz.outbox\n" + tc.config
			if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			p := e.start([]string{"--config", cfg}, "WS_TEST_SLOT=dbz").streaming(t)
			e.pg.Exec("postgres", rows)
			e.waitConfirmed("dbz", e.currentLSN(), 30*time.Second, p)
			recs := e.kcat("outbox.event.Order")
			if len(recs) != len(tc.want) {
				t.Fatalf("%d records, want %d: %+v", len(recs), len(tc.want), recs)
			}
			byKey := kgo.StickyKeyPartitioner(nil).ForTopic("outbox.event.Order").Partition(&kgo.Record{Key: []byte(tc.keyBytes)}, 3)
			for i, w := range tc.want {
				if g := recs[i]; g.Key != w.Key || g.Headers != w.Headers || g.Value != w.Value || int(g.Partition) != byKey {
					t.Errorf("record %d:\n got %+v\nwant key %s headers %s partition %d value\n%s", i, g, w.Key, w.Headers, byKey, w.Value)
				}
			}
		})
	}
}

// TestDebeziumDefaultChanged: a column default changed while walstream
// streams reaches the records from the next row on. ALTER TABLE makes
// pgoutput send the table's Relation message again, and walstream rereads
// the catalog then, as Debezium refreshes a table's schema; Struct.get then
// gives a NULL the new default.
func TestDebeziumDefaultChanged(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", `ALTER TABLE outbox ADD COLUMN status text DEFAULT 'new'`)
	p := e.start([]string{"--additional-placement", "status:header"}).streaming(t)
	e.pg.Exec("postgres", `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, status)
		VALUES ('00000000-0000-0000-0000-0000000000a1', 'Order', 'o-1', 'Placed', '{}', NULL)`)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	e.pg.Exec("postgres", `ALTER TABLE outbox ALTER COLUMN status SET DEFAULT 'changed';
		INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, status)
		VALUES ('00000000-0000-0000-0000-0000000000a2', 'Order', 'o-1', 'Paid', '{}', NULL)`)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	recs := e.kcat("outbox.event.Order")
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(recs), recs)
	}
	for i, want := range []string{"id=00000000-0000-0000-0000-0000000000a1,status=new", "id=00000000-0000-0000-0000-0000000000a2,status=changed"} {
		if recs[i].Headers != want {
			t.Errorf("record %d headers %q, want %q", i, recs[i].Headers, want)
		}
	}
}
