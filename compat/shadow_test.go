package compat

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// TestShadowDiff is the runbook's shadow mode: Debezium and walstream on
// the same rows, walstream on its own slot writing to shadow topics, and
// `walstream diff` comparing both sets event by event. It must find every
// event equal, and then the one record changed behind its back.
func TestShadowDiff(t *testing.T) {
	e := sharedEnv(t)
	w := e.worker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const id = "shadow"
	n := names{id: id, schema: "c_" + id, table: "c_" + id + ".outbox"}
	conn, run := e.pgConn(ctx, t)
	run("SET synchronous_commit = on")
	run("CREATE SCHEMA " + n.schema)
	run(fmt.Sprintf(`CREATE TABLE %s (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,
		aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL)`, n.table))
	topics := []string{"outbox.event.shadow_a", "outbox.event.shadow_b", "shadow.outbox.event.shadow_a", "shadow.outbox.event.shadow_b"}
	if err := createTopics(ctx, e.kafka.Addr(), 3, topics...); err != nil {
		t.Fatal(err)
	}
	slots := []string{"dbz_" + id, "ws_" + id}
	for _, s := range slots {
		run(fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", s, n.table))
		run(fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", s))
	}
	defer dropSlots(t, conn, slots)
	cfg := w.DebeziumConnector(e.pg, "postgres", id, slots[0], slots[0], n.table)
	for k, v := range stringConverters {
		cfg[k] = v
	}
	if err := w.CreateConnector(ctx, id, cfg); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.DeleteConnector(context.WithoutCancel(ctx), id); err != nil {
			t.Error(err)
		}
	}()
	for i := range 60 {
		run(fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload)
			SELECT 'shadow_' || (ARRAY['a','b'])[1 + g %% 2], 'k' || (g %% 7), 'Seq', jsonb_build_object('seq', g)
			FROM generate_series($1::int, $1::int + 4) g`, n.table), 5*i)
	}
	last, err := lastChange(ctx, conn, slots[1])
	if err != nil {
		t.Fatal(err)
	}
	end, err := e.pg.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// walstream starts after the peek: a slot in use cannot be peeked.
	p := testenv.StartWalstream(t, e.bin, []string{"run", "--config", writeConnector(t, JSON, id, cfg), "--kafka-brokers", e.kafka.Addr(),
		"--slot", slots[1], "--publication", slots[1], "--topic-template", "shadow.outbox.event.${routedByValue}",
		"--http-addr", "", "--status-interval", "1s", "--idle-interval", "500ms"})
	defer func() { _ = p.Stop(syscall.SIGTERM, 30*time.Second) }() // before its slot is dropped
	deadline := time.Now().Add(2 * time.Minute)
	for {
		dbz, _ := e.pg.SlotConfirmed(ctx, slots[0])
		offsets, _ := w.Offsets(ctx, id)
		ws, _ := e.pg.SlotConfirmed(ctx, slots[1])
		if ws >= end && len(offsets) == 1 && offsetLSN(offsets[0]) >= last {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("Debezium (slot %s, offsets %v) or walstream (slot %s) did not reach %s:\n%s", dbz, offsets, ws, end, p.LastLines(20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	diff := func() (string, error) {
		cmd := exec.CommandContext(ctx, e.bin, "diff", "--kafka-brokers", e.kafka.Addr(), "--topics", "outbox.event.shadow_*", "--shadow-prefix", "shadow.")
		cmd.Env = testenv.WalstreamEnv()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := diff()
	if err != nil {
		t.Fatalf("walstream diff: %v\n%s", err, out)
	}
	for _, topic := range []string{"shadow_a", "shadow_b"} {
		want := regexp.MustCompile(`outbox\.event\.` + topic + `\s+shadow\.outbox\.event\.` + topic + `\s+150 / 150\s+150\s+0\s+0\s+0\s+0 / 0\n`)
		if !want.MatchString(out) {
			t.Errorf("walstream diff printed\n%s\nwant for %s: 150 records each side, 150 events equal, none different, one-sided or duplicated", out, topic)
		}
	}
	// One record changed behind walstream's back: diff names its event.
	recs, err := testenv.ReadRecords(ctx, e.kafka.Addr(), "shadow.outbox.event.shadow_a")
	if err != nil || len(recs) == 0 {
		t.Fatalf("reading the shadow topic: %d records, %v", len(recs), err)
	}
	victim := recs[len(recs)-1]
	// A topic with a record of the same event before it: diff compares
	// each event's first record, so the change goes into a fresh topic.
	if err := createTopics(ctx, e.kafka.Addr(), 3, "changed.outbox.event.shadow_a"); err != nil {
		t.Fatal(err)
	}
	var changed []*kgo.Record
	for _, r := range recs {
		rec := &kgo.Record{Topic: "changed.outbox.event.shadow_a", Partition: r.Partition, Key: []byte(r.Key), Value: []byte(r.Value)}
		for _, h := range strings.Split(r.Headers, ",") {
			k, v, _ := strings.Cut(h, "=")
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		if r.Offset == victim.Offset && r.Partition == victim.Partition {
			rec.Value = []byte(`{"seq": -1}`)
		}
		changed = append(changed, rec)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Addr()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, changed...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, e.bin, "diff", "--kafka-brokers", e.kafka.Addr(), "--topics", "outbox.event.shadow_a", "--shadow-prefix", "changed.")
	cmd.Env = testenv.WalstreamEnv()
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(b), "event id "+victim.Header("id")+" differs in value") ||
		!strings.Contains(string(b), "1 events have records that differ") {
		t.Fatalf("walstream diff after a change: %v\n%s\nwant exit 1 naming event %s", err, b, victim.Header("id"))
	}
}
