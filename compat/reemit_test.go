package compat

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// TestReemitBesideDebezium: Debezium's incremental snapshot of the outbox,
// asked for with a signal in its signal table with additional-conditions,
// publishes its read (op r) records through the outbox router; walstream,
// given the same connector config and the same signal on its own slot,
// re-emits the same rows. Every re-emitted record is byte for byte
// Debezium's but for the walstream.reemit header walstream adds last:
// Debezium's router puts no header of its own on them.
func TestReemitBesideDebezium(t *testing.T) {
	if !*all {
		t.Skip("make compat runs it (-compat.all)")
	}
	e := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const schema, id = "c_reemit", "reemit"
	conn, exec := e.pgConn(ctx, t)
	exec("SET synchronous_commit = on")
	exec("CREATE SCHEMA " + schema)
	exec(`CREATE TABLE c_reemit.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
		payload jsonb, created_at timestamptz NOT NULL DEFAULT '2024-05-06 07:08:09.123456+00', amount numeric(10,2))`)
	exec(`CREATE TABLE c_reemit.debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))`)
	slots := []string{"dbz_" + id, "ws_" + id}
	for _, name := range slots {
		exec(fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE c_reemit.outbox, c_reemit.debezium_signal WITH (publish = 'insert, update')", name))
		exec(fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", name))
	}
	defer dropSlots(t, conn, slots)
	exec(`INSERT INTO c_reemit.outbox (id, aggregatetype, aggregateid, type, payload, amount)
		SELECT md5(g::text)::uuid, CASE WHEN g % 3 = 0 THEN 'Customer' ELSE 'Order' END, 'agg-' || (g % 4), 'Created',
			jsonb_build_object('n', g, 'note', 'row "' || g || '"', 'tags', jsonb_build_array('a', g)), g * 1.25
		FROM generate_series(1, 23) g`)
	orders := 0
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM c_reemit.outbox WHERE aggregatetype = 'Order'").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	cfg := e.worker(t).DebeziumConnector(e.pg, "postgres", id, "dbz_"+id, "dbz_"+id, "c_reemit.outbox")
	maps.Copy(cfg, map[string]string{
		"publication.autocreate.mode":                         "disabled",
		"key.converter":                                       "org.apache.kafka.connect.json.JsonConverter",
		"value.converter":                                     "org.apache.kafka.connect.json.JsonConverter",
		"value.converter.schemas.enable":                      "true",
		"transforms.outbox.table.fields.additional.placement": "type:header:eventType,created_at:envelope:createdAt,amount:header",
		"signal.data.collection":                              "c_reemit.debezium_signal",
		"incremental.snapshot.chunk.size":                     "4",
		// The router leaves the signal table's change events alone.
		"transforms.outbox.predicate": "isOutbox",
		"predicates":                  "isOutbox",
		"predicates.isOutbox.type":    "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
		"predicates.isOutbox.pattern": `reemit\.c_reemit\.outbox`,
	})
	signal := `{"data-collections": ["c_reemit.outbox"], "type": "incremental",
		"additional-conditions": [{"data-collection": "c_reemit.outbox", "filter": "aggregatetype = 'Order'"}]}`
	outboxRecords := func(from, to map[string]map[int32]int64) []Record {
		t.Helper()
		recs, err := e.read(ctx, from, to)
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(recs, func(r Record) bool { return !strings.HasPrefix(r.Topic, "outbox.event.") })
	}
	// waitRecords waits until n outbox records follow from and returns
	// them, once their transactions are over.
	waitRecords := func(from map[string]map[int32]int64, n int, what string, log func() string) []Record {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			to, err := e.marks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if recs := outboxRecords(from, to); len(recs) >= n {
				return recs
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: %d records of %d within 2 minutes:\n%s", what, len(recs), n, log())
			}
			time.Sleep(300 * time.Millisecond)
		}
	}

	start, err := e.marks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := e.worker(t)
	if err := c.CreateConnector(ctx, id, cfg); err != nil {
		t.Fatal(err)
	}
	live := waitRecords(start, 23, "Debezium's live records", func() string { return c.LastLines(40) })
	exec("INSERT INTO c_reemit.debezium_signal VALUES ('dbz-1', 'execute-snapshot', $1)", signal)
	dbz := waitRecords(start, 23+orders, "Debezium's incremental snapshot", func() string { return c.LastLines(40) })[len(live):]
	if err := c.DeleteConnector(ctx, id); err != nil {
		t.Fatal(err)
	}
	if len(dbz) != orders {
		t.Fatalf("Debezium's snapshot wrote %d records, want %d:\n%s", len(dbz), orders, show(dbz))
	}

	// walstream, with the connector config as it is, on its own slot,
	// meets Debezium's signal (and Debezium's snapshot window rows) and one
	// more of its own.
	mid, err := e.marks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := writeConnector(t, JSON, id, cfg)
	p := testenv.StartWalstream(t, e.bin, []string{"run", "--config", path, "--kafka-brokers", e.kafka.Addr(),
		"--slot", "ws_" + id, "--publication", "ws_" + id, "--http-addr", "", "--status-interval", "1s", "--idle-interval", "500ms"})
	wsAll := waitRecords(mid, 23+orders, "walstream's live and re-emitted records", func() string { return p.LastLines(40) })
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stopping walstream: %v\n%s", err, p.LastLines(40))
	}
	var ws []Record
	for _, r := range wsAll {
		if h := header(r, "walstream.reemit"); h != nil {
			if !bytes.HasPrefix(h, []byte("dbz-1@")) {
				t.Errorf("re-emitted record names request %q, want Debezium's signal dbz-1", h)
			}
			ws = append(ws, r)
		}
	}
	if len(ws) != orders {
		t.Fatalf("walstream re-emitted %d records, want %d:\n%s", len(ws), orders, show(ws))
	}
	byID := func(rs []Record) map[string]Record {
		m := make(map[string]Record)
		for _, r := range rs {
			m[string(header(r, "id"))] = r
		}
		return m
	}
	d, w := byID(dbz), byID(ws)
	for ev, dr := range d {
		wr, ok := w[ev]
		if !ok {
			t.Errorf("event %s: Debezium's snapshot has it, walstream did not re-emit it", ev)
			continue
		}
		if last := wr.Headers[len(wr.Headers)-1]; last.Key != "walstream.reemit" {
			t.Errorf("event %s: walstream's last header is %s, want walstream.reemit", ev, last.Key)
		}
		wr.Headers = slices.DeleteFunc(slices.Clone(wr.Headers), func(h kgo.RecordHeader) bool { return h.Key == "walstream.reemit" })
		if diff := compareRecord(Case{}, dr, wr); diff != "" || dr.Topic != wr.Topic || dr.Partition != wr.Partition {
			t.Errorf("event %s: %s\nDebezium:  %s\nwalstream: %s", ev, diff, dr, wr)
		}
	}
	if t.Failed() {
		t.Logf("Debezium's snapshot records:\n%swalstream's re-emitted records:\n%s", show(dbz), show(ws))
	}
}
