package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/decode"
)

// partitionedOutboxDDL is an outbox table range-partitioned by time, the
// way one whose old partitions are dropped instead of deleted from is.
const partitionedOutboxDDL = `CREATE TABLE public.outbox (
	id uuid NOT NULL DEFAULT gen_random_uuid(),
	aggregatetype text NOT NULL,
	aggregateid text NOT NULL,
	type text NOT NULL,
	payload jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE TABLE public.outbox_2010 PARTITION OF public.outbox FOR VALUES FROM ('2010-01-01') TO ('2011-01-01');
CREATE TABLE public.outbox_now PARTITION OF public.outbox FOR VALUES FROM ('2020-01-01') TO (MAXVALUE)`

// partitionedRows inserts n rows dated at in one transaction, in the
// partition that holds that time, and returns their ids with the record
// value each must become.
func (e *env) partitionedRows(at string, n int, seq *int) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	rows, err := e.pg.Connect("postgres").Query(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload, created_at)
		SELECT 'Order', 'order-' || (i % 7), 'Created', jsonb_build_object('seq', i, 'agg', 'order-' || (i % 7)), $3::timestamptz
		FROM generate_series($1::int, $2::int) AS i RETURNING id::text, payload::text`, *seq+1, *seq+n, at)
	if err != nil {
		e.t.Fatal(err)
	}
	want := make(map[string]string)
	for rows.Next() {
		var id, payload string
		if err := rows.Scan(&id, &payload); err != nil {
			e.t.Fatal(err)
		}
		want[id] = payload
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	*seq += n
	return want
}

// TestPartitionedOutbox: a range-partitioned outbox table at walstream's
// defaults. walstream creates the publication so that the partitions'
// rows arrive as the table's own; a partition attached, one detached and
// dropped, and one dropped right after rows were committed to it, all
// while streaming, lose and duplicate nothing and change nothing walstream
// checks (the table's OID, its columns). A publication changed to publish
// the partitions under their own names stops walstream, saying so and how
// to fix it.
func TestPartitionedOutbox(t *testing.T) {
	t.Parallel()
	e := newSharedEnvWith(t, partitionedOutboxDDL)
	p := e.start([]string{"--slot-poll-interval", "200ms"}).streaming(t)
	want := make(map[string]string)
	add := func(m map[string]string) {
		for id, v := range m {
			want[id] = v
		}
	}
	seq := 0
	add(e.partitionedRows("2010-06-01", 5, &seq))
	add(e.partitionedRows("2024-06-01", 500, &seq))
	// A transaction across partitions.
	e.pg.Exec("postgres", `INSERT INTO outbox (aggregatetype, aggregateid, type, payload, created_at) VALUES
		('Order', 'order-x', 'Created', '{"seq": 100001, "agg": "order-x"}', '2010-07-01'),
		('Order', 'order-x', 'Created', '{"seq": 100002, "agg": "order-x"}', '2024-07-01')`)

	// A partition attached, then filled.
	e.pg.Exec("postgres", "CREATE TABLE public.outbox_2015 (LIKE public.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
	e.pg.Exec("postgres", "ALTER TABLE public.outbox ATTACH PARTITION public.outbox_2015 FOR VALUES FROM ('2015-01-01') TO ('2016-01-01')")
	add(e.partitionedRows("2015-03-01", 300, &seq))
	// Rows committed to a partition dropped before walstream may have
	// decoded them: Postgres decodes them with the catalog of their time.
	add(e.partitionedRows("2010-08-01", 200, &seq))
	e.pg.Exec("postgres", "ALTER TABLE public.outbox DETACH PARTITION public.outbox_2010")
	e.pg.Exec("postgres", "DROP TABLE public.outbox_2010")
	add(e.partitionedRows("2024-08-01", 100, &seq))
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, p)

	// The two rows of the transaction across partitions, the second one
	// still in the table.
	var other map[string]string
	func() {
		rows, err := e.pg.Connect("postgres").Query(context.Background(), `SELECT id::text, payload::text FROM outbox WHERE aggregateid = 'order-x'`)
		if err != nil {
			t.Fatal(err)
		}
		other = make(map[string]string)
		for rows.Next() {
			var id, v string
			if err := rows.Scan(&id, &v); err != nil {
				t.Fatal(err)
			}
			other[id] = v
		}
	}()
	recs := e.readAll("Order")
	seen := make(map[string]int)
	crossPartition := 0
	for _, r := range recs {
		id := r.Header("id")
		seen[id]++
		if v, ok := want[id]; ok {
			if r.Value != v {
				t.Errorf("record %s: value %s, want %s", id, r.Value, v)
			}
			continue
		}
		var row outboxRow
		if err := json.Unmarshal([]byte(r.Value), &row); err != nil || row.Agg != "order-x" {
			t.Errorf("record %s (%s) is no row this test committed", id, r.Value)
		}
		crossPartition++
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("row %s published %d times, want once", id, seen[id])
		}
	}
	if crossPartition != 2 || len(other) != 1 {
		t.Errorf("the transaction across partitions: %d records, %d rows left in the table; want 2 and 1", crossPartition, len(other))
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d rows through partitions attached, detached and dropped, each published once", len(want)+2)

	// The operator's view agrees.
	out, err := walstreamCmd(t, "init", "--check", "--pg-url", e.pg.URL("postgres", "postgres"))
	if !strings.Contains(out, "publication walstream_outbox includes partitioned table public.outbox and publishes its partitions' rows as its own") {
		t.Errorf("init --check (%v) does not name the partitioned table's publication:\n%s", err, out)
	}
	if p.Exited() {
		t.Fatalf("walstream stopped while partitions came and went:\n%s", p.LastLines(5))
	}

	// Published under the partitions' names, the rows would be lost to
	// walstream: it stops, naming the setting and the statement.
	e.pg.Exec("postgres", "ALTER PUBLICATION walstream_outbox SET (publish_via_partition_root = false)")
	wantAll(t, exitMessage(t, p), `publication "walstream_outbox"`, `partitioned outbox table "public"."outbox"`,
		"publish_via_partition_root is off", `ALTER PUBLICATION "walstream_outbox" SET (publish_via_partition_root = true)`)
	// Rows committed meanwhile come under their partitions' names even
	// after the fix: Postgres decodes WAL with the publication of its
	// time. walstream publishes them as the table's, once.
	add(e.partitionedRows("2024-09-01", 50, &seq))
	wantAll(t, exitMessage(t, e.start(nil)), "publish_via_partition_root is off", "SET (publish_via_partition_root = true)")
	out, err = walstreamCmd(t, "init", "--check", "--pg-url", e.pg.URL("postgres", "postgres"))
	if err == nil || !strings.Contains(out, "FAIL  publication walstream_outbox publishes the rows of partitioned table public.outbox under its partitions' names") {
		t.Errorf("init --check of a publication without publish_via_partition_root: %v\n%s", err, out)
	}
	e.pg.Exec("postgres", "ALTER PUBLICATION walstream_outbox SET (publish_via_partition_root = true)")
	add(e.partitionedRows("2024-10-01", 20, &seq))
	p = e.start(nil).streaming(t)
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, p)
	p.waitLog(t, "arrive under a partition's name", 10*time.Second)
	seen = make(map[string]int)
	for _, r := range e.readAll("Order") {
		seen[r.Header("id")]++
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("row %s published %d times, want once", id, seen[id])
		}
	}
}

// A stop at a row of a partition no longer attached ends with the flags
// that go on past it: one event, or every such row.
func TestUnattachedHint(t *testing.T) {
	bad := &decode.Error{Event: decode.Identity{CommitLSN: 0x200, Ordinal: 3}, Reason: "row",
		Err: &decode.UnattachedError{Relation: "public.outbox_2010", OID: 7, Table: "public.outbox", Dropped: true}}
	msg := flagHints(fmt.Errorf("slot walstream: %w", bad)).Error()
	for _, s := range []string{"--skip-event 0/200:3", "--on-error=dead-letter", "OID 7"} {
		if !strings.Contains(msg, s) {
			t.Errorf("%q does not say %q", msg, s)
		}
	}
}
