package pipeline

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/replication"
)

// testConfig streams public.outbox of pg into broker.
func testConfig(t *testing.T, pg *testenv.Postgres, broker string) Config {
	t.Helper()
	pgCfg, err := pgx.ParseConfig(pg.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	o := &decode.Outbox{Schema: "public", Table: "outbox", Columns: decode.DefaultColumns(),
		TopicRegex: decode.DefaultTopicRegex, TopicReplacement: decode.DefaultTopicReplacement}
	return Config{
		Postgres: pgCfg, Create: true,
		Names: replication.Names{Slot: "walstream", Publication: "walstream_outbox", Tables: []replication.Table{{Schema: "public", Name: "outbox"}}},
		Kafka: kafka.Settings{Brokers: []string{broker}}, TransactionalID: "walstream-test",
		CheckpointTopic: "walstream.checkpoints", CheckpointKey: "walstream",
		Outboxes: []*decode.Outbox{o}, Messages: o, MaxRecordBytes: 1 << 20,
		MaxBatchEvents: 100, MaxBatchBytes: 1 << 20, QueueBytes: 1 << 20,
		Linger: time.Millisecond, IdleInterval: 100 * time.Millisecond, CommitTimeout: 10 * time.Second,
		StatusInterval: time.Second, SlotPollInterval: time.Second, ReadyConfirmAge: time.Minute,
		Reemit: ReemitSettings{ChunkRows: 100},
	}
}

// Run streams without the binary: a row inserted after it started is
// committed to Kafka with its checkpoint and confirmed to Postgres, Inspect
// sees that, and a cancelled ctx is a clean stop.
func TestRunStreamsAndStops(t *testing.T) {
	pg := testenv.StartPostgres(t)
	broker := testenv.StartKfake(t)
	pg.Exec("postgres", `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload jsonb)`)
	cfg := testConfig(t, pg, broker.Addr())

	before, err := Inspect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Problems) != 1 || before.Found {
		t.Fatalf("before the first run: problems %q, found %v; want the missing slot and no checkpoint", before.Problems, before.Found)
	}

	reg := prometheus.NewRegistry()
	var midTx atomic.Int32
	cfg.Hook = func(point string) {
		if point == "mid-transaction" {
			midTx.Add(1)
		}
	}
	p := New(cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)), reg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, "streaming", func() bool { _, ok := p.state.streaming(time.Now()); return ok })

	pg.Exec("postgres", `INSERT INTO outbox VALUES ('11111111-1111-1111-1111-111111111111', 'Order', 'o-1', 'Created', '{"n": 1}')`)
	inserted := queryLSN(t, pg.Connect("postgres"), "SELECT pg_current_wal_insert_lsn()::text")
	var in *Inspection
	testenv.Eventually(t, 30*time.Second, "the row's checkpoint in Kafka and confirmed", func() bool {
		var err error
		if in, err = Inspect(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		return in.Found && in.Checkpoint.LSN >= inserted && in.Slot.ConfirmedFlush >= inserted
	})
	if len(in.Problems) != 0 {
		t.Fatalf("problems while streaming: %q", in.Problems)
	}
	// The checkpoint names the server it was read from, counts the event,
	if id := in.Checkpoint.Identity; id.SystemID != in.Server.SystemID || id.Timeline != in.Server.Timeline || id.Database != "postgres" ||
		in.Placement.Verdict != Continuous || !in.Checkpoint.Counted || in.Checkpoint.Events != 1 {
		t.Fatalf("checkpoint %+v on server %+v: placement %s; want the server's identity, continuous, 1 event counted",
			in.Checkpoint, in.Server, in.Placement.Verdict)
	}
	// and the transaction it came from, which a replay must show again.
	var xid int64
	if err := pg.Connect("postgres").QueryRow(context.Background(),
		"SELECT xmin::text::bigint FROM outbox WHERE id = '11111111-1111-1111-1111-111111111111'").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if l := in.Checkpoint.Last; int64(l.Xid) != xid || l.CommitLSN == 0 || l.CommitLSN >= in.Checkpoint.LSN || l.CommitTime.IsZero() {
		t.Fatalf("checkpoint %s names %s as the last transaction published, want transaction %d", in.Checkpoint, l, xid)
	}
	// The producer counts a transaction's events just after it tells the
	// tracker, so the count may lag the checkpoint by a moment.
	testenv.Eventually(t, 30*time.Second, "the event counted", func() bool { return published(t, reg, "outbox.event.Order") >= 1 })
	if got := published(t, reg, "outbox.event.Order"); got != 1 {
		t.Fatalf("walstream_events_published_total{topic=outbox.event.Order} = %v, want 1", got)
	}

	if midTx.Load() == 0 {
		t.Fatal("the mid-transaction hook was never called")
	}

	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop")
	}
}

// published reads the events-published counter of topic from reg.
func published(t *testing.T, reg *prometheus.Registry, topic string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64 // over the streams of a fleet
	for _, mf := range mfs {
		if mf.GetName() != "walstream_events_published_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" && l.GetValue() == topic {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// testWriter logs through t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// instance is a Pipeline a test runs, stopped at the test's end.
type instance struct {
	p      *Pipeline
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
}

// startInstance runs cfg as the instance name, logging to log.
func startInstance(t *testing.T, cfg Config, log *slog.Logger, name string) *instance {
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{p: New(cfg, log.With("instance", name), prometheus.NewRegistry()), cancel: cancel, done: make(chan struct{})}
	go func() { in.err = in.p.Run(ctx); close(in.done) }()
	t.Cleanup(func() { cancel(); <-in.done })
	return in
}
