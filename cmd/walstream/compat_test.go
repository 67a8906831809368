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
// JsonConverter (schemas.enable=false) would, and a NULL payload becomes a
// tombstone; read back with kcat from zstd-compressed batches.
func TestLogicalMessageOutboxJSON(t *testing.T) {
	e := newEnv(t)
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
		{Key: `"o-1"`, Headers: "id=m-1", Value: `"{\"n\": 2}"`},
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
// Debezium connector's outbox router settings as they were copied, over two
// outbox tables in one slot, each with its own mapping, and reads the
// records back with kcat: topics, keys, values, headers, partitions and
// timestamps as Debezium's router with JsonConverter would write them. An
// UPDATE is logged and skipped; a row naming a partition the topic lacks
// stops walstream with that row named, and is not confirmed.
func TestDebeziumConfigFile(t *testing.T) {
	e := newEnv(t)
	e.pg.Exec("postgres", `CREATE SCHEMA orders; CREATE SCHEMA billing;
		CREATE TABLE orders.outbox (LIKE public.outbox INCLUDING ALL);
		ALTER TABLE orders.outbox ADD COLUMN shard int, ADD COLUMN created_at timestamptz;
		CREATE TABLE billing.outbox (event_id text PRIMARY KEY, kind text NOT NULL, invoice_id text NOT NULL, body text NOT NULL)`)
	cfg := filepath.Join(t.TempDir(), "walstream.yaml")
	if err := os.WriteFile(cfg, []byte(`# Debezium's outbox router settings, copied from the connector config.
slot: ${WS_TEST_SLOT}
converter: json
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
			VALUES ('00000000-0000-0000-0000-0000000000d1', 'Order', 'o-1', 'Placed', '{"n": 1}', 2, '2026-11-23 06:00:00.25+00');
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
