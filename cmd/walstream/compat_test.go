package main

import (
	"testing"
	"time"
)

// TestLogicalMessageOutboxJSON: a row and a pg_logical_emit_message event
// in one transaction arrive in commit order, encoded as Debezium's
// JsonConverter (schemas.enable=false) would, and a NULL payload becomes a
// tombstone; read back with kcat.
func TestLogicalMessageOutboxJSON(t *testing.T) {
	e := newEnv(t)
	e.pg.Exec("postgres", "ALTER TABLE outbox ALTER COLUMN payload DROP NOT NULL")
	p := e.start([]string{"--converter", "json", "--tombstone-on-empty-payload"}).streaming(t)
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
