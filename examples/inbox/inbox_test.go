package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// The binaries under test: walstream as released, and this consumer with
// the race detector, since it is the code this package tests.
var walstreamBin, inboxBin string

func TestMain(m *testing.M) {
	var err error
	if walstreamBin, err = testenv.BuildBinary(testenv.WalstreamBuild(false, false)); err == nil {
		inboxBin, err = testenv.BuildBinary(testenv.Build{Pkg: "examples/inbox", Race: true})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(testenv.Main(m))
}

// proc is a running subprocess whose output is kept for the test log.
type proc = testenv.Process

// start runs bin; the process is killed at the end of the test if it still
// runs, and its output is logged when the test failed.
func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	return testenv.StartProcessT(t, testenv.ProcessConfig{Name: name, Path: bin, Args: args})
}

// stop sends SIGTERM and returns the exit error of a process that must stop
// within 20 s.
func stop(t *testing.T, p *proc) error {
	t.Helper()
	err := p.Stop(syscall.SIGTERM, 20*time.Second)
	if errors.Is(err, testenv.ErrKilled) {
		t.Fatal(err)
	}
	return err
}

// waitFor polls cond until it holds, failing the test after within or
// when one of procs exits meanwhile.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		for _, p := range procs {
			if p.Exited() {
				t.Fatalf("%s exited (%v) while waiting for %s", p.Name, p.Err(), what)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func queryInt(t *testing.T, db *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

const (
	topics    = "outbox.event.Order,outbox.event.Customer"
	totalRows = 4000
)

// writeOutbox inserts totalRows outbox rows in transactions of 1 to 40
// rows, pausing between them so that the stream lasts a few seconds. seq in
// the payload grows in commit order; each row goes to one of 17 Order or 6
// Customer aggregates. committed counts the rows committed so far.
func writeOutbox(ctx context.Context, url string, committed *atomic.Int64) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting the writer: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rng := rand.New(rand.NewPCG(1, 2))
	for seq := 0; seq < totalRows; {
		n := min(1+rng.IntN(40), totalRows-seq)
		_, err := conn.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
			SELECT t, t || '-' || (i % CASE t WHEN 'Order' THEN 17 ELSE 6 END), 'Changed', jsonb_build_object('seq', i)
			FROM generate_series($1::int, $2::int) AS i,
			LATERAL (SELECT CASE WHEN i % 3 = 0 THEN 'Customer' ELSE 'Order' END AS t) AS typ`, seq+1, seq+n)
		if err != nil {
			return fmt.Errorf("inserting rows %d to %d: %w", seq+1, seq+n, err)
		}
		seq += n
		committed.Store(int64(seq))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	return nil
}

// env is one Postgres cluster holding the outbox (database postgres) and
// the inbox (database inbox), a broker, and walstream between them.
type env struct {
	pg     *testenv.Postgres
	broker testenv.Broker
	outbox *pgx.Conn
	inbox  *pgx.Conn
}

func newEnv(t *testing.T) *env {
	t.Helper()
	broker := testenv.StartBrokerAsync(t, testenv.TestBroker())
	e := &env{pg: testenv.StartPostgres(t)}
	e.broker = broker()
	ddl, err := os.ReadFile("../../testdata/outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	e.pg.Exec("postgres", string(ddl))
	e.pg.Exec("postgres", "CREATE DATABASE inbox")
	e.outbox, e.inbox = e.pg.Connect("postgres"), e.pg.Connect("inbox")
	return e
}

func (e *env) consumer(t *testing.T, args ...string) *proc {
	t.Helper()
	return start(t, "inbox", inboxBin, append([]string{
		"--pg-url", e.pg.URL("postgres", "inbox"),
		"--kafka-brokers", e.broker.Addr(),
		"--topic-interval", "100ms",
	}, args...)...)
}

// applied is the number of business effects: rows in aggregate_events,
// 0 before the consumer's first start has created the table.
func (e *env) applied(t *testing.T) int {
	t.Helper()
	if queryInt(t, e.inbox, "SELECT count(*)::int FROM pg_tables WHERE tablename = 'aggregate_events'") == 0 {
		return 0
	}
	return queryInt(t, e.inbox, "SELECT count(*) FROM aggregate_events")
}

// TestExactlyOnceAcrossKills streams outbox rows through walstream and
// Kafka into the inbox while the consumer is SIGKILLed again and again,
// each time right after it applied its first batch with a backlog waiting.
// Every outbox row must be applied exactly once, in order per aggregate.
// Then the stored offsets are deleted and the consumer re-reads every
// topic from the start: the dedup table must turn all of it into no-ops.
func TestExactlyOnceAcrossKills(t *testing.T) {
	e := newEnv(t)
	ws := start(t, "walstream", walstreamBin, "run",
		"--pg-url", e.pg.URL("postgres", "postgres"),
		"--kafka-brokers", e.broker.Addr(),
		"--table", "public.outbox",
		"--http-addr", "",
		"--status-interval", "1s",
		"--idle-interval", "500ms",
	)
	testenv.WaitStreaming(t, ws, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var committed atomic.Int64
	writerErr := make(chan error, 1)
	go func() { writerErr <- writeOutbox(ctx, e.pg.URL("postgres", "postgres"), &committed) }()

	// Small batches, so a kill after the first one leaves a backlog.
	args := []string{"--topics", topics, "--batch-records", "20"}
	rng := rand.New(rand.NewPCG(3, 4))
	kills, behind := 0, 0
	for writing := true; writing; {
		select {
		case err := <-writerErr:
			if err != nil {
				t.Fatal(err)
			}
			writing = false
			continue
		default:
		}
		before := e.applied(t)
		c := e.consumer(t, args...)
		waitFor(t, 30*time.Second, "progress after a restart", func() bool { return e.applied(t) > before }, c, ws)
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
		c.Kill()
		kills++
		if got := e.applied(t); got < int(committed.Load()) {
			behind++ // killed with committed rows not yet applied: mid-stream
		}
		// Down for a while, so the next start has a backlog to work on.
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	}
	t.Logf("consumer SIGKILLed %d times, %d of them with a backlog", kills, behind)
	if behind < 3 {
		t.Fatalf("only %d of %d kills hit the consumer with a backlog; want at least 3", behind, kills)
	}

	c := e.consumer(t, args...)
	waitFor(t, 30*time.Second, fmt.Sprintf("%d applied events", totalRows), func() bool {
		n := e.applied(t)
		if n > totalRows {
			t.Fatalf("%d events applied, more than the %d outbox rows", n, totalRows)
		}
		return n == totalRows
	}, c, ws)
	if err := stop(t, c); err != nil {
		t.Fatalf("consumer exit after SIGTERM: %v", err)
	}
	e.checkApplied(t)

	// Replay everything: without stored offsets the consumer starts every
	// partition at the beginning and meets only events applied before.
	offsets := e.storedOffsets(t)
	if _, err := e.inbox.Exec(ctx, "DELETE FROM inbox_offsets"); err != nil {
		t.Fatal(err)
	}
	c = e.consumer(t, args...)
	waitFor(t, 30*time.Second, "the replay to reach the offsets stored before", func() bool {
		return fmt.Sprint(e.storedOffsets(t)) == fmt.Sprint(offsets)
	}, c, ws)
	if err := stop(t, c); err != nil {
		t.Fatalf("consumer exit after SIGTERM: %v", err)
	}
	e.checkApplied(t)
	// And the replay did meet every event: none was skipped by an offset.
	if want := fmt.Sprintf(`msg=stopped consumer=inbox applied=0 duplicates=%d`, totalRows); !strings.Contains(c.Log(), want) {
		t.Fatalf("replay log does not say %q:\n%s", want, c.Log())
	}
}

// storedOffsets is inbox_offsets as "topic/partition" -> next offset.
func (e *env) storedOffsets(t *testing.T) map[string]int64 {
	t.Helper()
	rows, err := e.inbox.Query(context.Background(), "SELECT topic, partition, next_offset FROM inbox_offsets WHERE consumer = 'inbox'")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]int64)
	for rows.Next() {
		var topic string
		var p int32
		var next int64
		if err := rows.Scan(&topic, &p, &next); err != nil {
			t.Fatal(err)
		}
		m[fmt.Sprintf("%s/%d", topic, p)] = next
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkApplied compares the inbox with the outbox: one effect and one
// dedup row per outbox row, the same event ids, and for every aggregate
// the same events in the same order (seq grows in commit order).
func (e *env) checkApplied(t *testing.T) {
	t.Helper()
	for _, q := range []string{
		"SELECT count(*) FROM inbox_processed",
		"SELECT count(*) FROM aggregate_events",
		"SELECT count(DISTINCT event_id) FROM aggregate_events",
		"SELECT sum(version)::int FROM aggregates", // each aggregate's version counts its events
	} {
		if got := queryInt(t, e.inbox, q); got != totalRows {
			t.Errorf("%s = %d, want %d", q, got, totalRows)
		}
	}
	want := e.sequences(t, e.outbox, `SELECT 'outbox.event.' || aggregatetype, aggregateid, id::text, (payload->>'seq')::int
		FROM outbox ORDER BY 1, 2, 4`)
	got := e.sequences(t, e.inbox, `SELECT topic, aggregate_id, event_id, (convert_from(payload, 'UTF8')::jsonb->>'seq')::int
		FROM aggregate_events ORDER BY 1, 2, version`)
	if len(got) != len(want) {
		t.Errorf("%d aggregates in the inbox, want %d", len(got), len(want))
	}
	for agg, w := range want {
		if g := got[agg]; !slices.Equal(g, w) {
			t.Errorf("aggregate %s: applied %d events %v, want %d %v", agg, len(g), g, len(w), w)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// sequences runs a query of (topic, aggregate, event id, seq) and returns
// "id:seq" entries in row order per "topic/aggregate".
func (e *env) sequences(t *testing.T, db *pgx.Conn, sql string) map[string][]string {
	t.Helper()
	rows, err := db.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	m := make(map[string][]string)
	for rows.Next() {
		var topic, agg, id string
		var seq int
		if err := rows.Scan(&topic, &agg, &id, &seq); err != nil {
			t.Fatal(err)
		}
		m[topic+"/"+agg] = append(m[topic+"/"+agg], fmt.Sprintf("%s:%d", id, seq))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRecordWithoutIDStops: a record without an id header cannot be
// deduplicated. The consumer applies what comes before it, then stops
// naming the record, and a restart stops at the same record again.
func TestRecordWithoutIDStops(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "outbox.event.Bad"
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.broker.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("creating %s: %v", topic, err)
	}
	err = cl.ProduceSync(ctx,
		&kgo.Record{Topic: topic, Key: []byte("b-1"), Value: []byte(`{"seq": 1}`), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("e-1")}}},
		&kgo.Record{Topic: topic, Key: []byte("b-1"), Value: []byte(`{"seq": 2}`)},
	).FirstErr()
	if err != nil {
		t.Fatalf("producing: %v", err)
	}
	for range 2 {
		c := e.consumer(t, "--topics", topic, "--batch-records", "1")
		exit, ok := c.Wait(30 * time.Second)
		if !ok {
			t.Fatal("the consumer did not stop at the record without an id")
		}
		if exit == nil {
			t.Fatalf("the consumer exited 0 at a record without an id:\n%s", c.Log())
		}
		lines := strings.Split(strings.TrimSpace(c.Log()), "\n")
		if got, want := lines[len(lines)-1], "inbox: record at topic outbox.event.Bad partition 0 offset 1 has no id header"; !strings.HasPrefix(got, want) {
			t.Fatalf("last line %q, want it to start with %q", got, want)
		}
		if got := e.applied(t); got != 1 {
			t.Fatalf("%d events applied, want 1: the one before the record without an id", got)
		}
		if got := e.storedOffsets(t)[topic+"/0"]; got != 1 {
			t.Fatalf("stored next offset %d, want 1: the record without an id must not be passed", got)
		}
	}
}
