package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/internal/testenv"
)

// An instance paused just after it took the slot loses it while paused
// (its walsender gone, by wal_sender_timeout in production, terminated
// here) to another instance, which streams and commits a checkpoint past
// the WAL end the server named when the paused one identified it. Resumed,
// the paused instance fences the other and reads that checkpoint: WAL the
// server has, not phantom events. Neither instance stops, and every row
// reaches Kafka once.
func pausedAfterTakingTheSlot(t *testing.T, pg *testenv.Postgres, broker string) {
	cfg := testConfig(t, pg, broker)
	cfg.Names.Slot, cfg.CheckpointKey, cfg.TransactionalID = "paused", "paused", "walstream-paused"
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	held, resume := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(resume) })
	start := func(name string, hook func(string)) *instance {
		c := cfg
		c.Hook = hook
		return startInstance(t, c, log, name)
	}
	var pause sync.Once
	a := start("a", func(point string) {
		if point == "slot-held" {
			pause.Do(func() { close(held); <-resume })
		}
	})
	t.Cleanup(release) // before a's cleanup, which waits for it to stop
	select {
	case <-held:
	case <-a.done:
		t.Fatalf("a stopped before it held the slot: %v", a.err)
	case <-time.After(30 * time.Second):
		t.Fatal("a did not take the slot within 30s")
	}
	conn := pg.Connect("postgres")
	if _, err := conn.Exec(context.Background(), "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'paused'"); err != nil {
		t.Fatal(err)
	}
	insert := func(n int) {
		t.Helper()
		if _, err := conn.Exec(context.Background(), fmt.Sprintf(`INSERT INTO outbox SELECT gen_random_uuid(), 'Paused', 'p-'||i, 'Created', '{}'
			FROM generate_series(1, %d) i`, n)); err != nil {
			t.Fatal(err)
		}
	}
	covered := func(what string) {
		t.Helper()
		lsn := queryLSN(t, conn, "SELECT pg_current_wal_insert_lsn()::text")
		testenv.Eventually(t, 60*time.Second, what, func() bool {
			in, err := Inspect(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return in.Found && in.Checkpoint.LSN >= lsn
		})
	}
	b := start("b", nil)
	insert(50)
	covered("b's checkpoint past the rows inserted while a is paused")
	release()
	insert(50)
	covered("the rows inserted after a resumed in a checkpoint")
	// The two settle: the fenced one stands by, or takes the slot back.
	time.Sleep(3 * time.Second)
	for name, in := range map[string]*instance{"a": a, "b": b} {
		select {
		case <-in.done:
			t.Fatalf("%s stopped: %v", name, in.err)
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := map[string]int{}
	if err := testenv.ReadCommitted(ctx, broker, "outbox.event.Paused", func(r *kgo.Record) { seen[string(r.Key)]++ }); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 50; i++ {
		if k := fmt.Sprintf("p-%d", i); seen[k] != 2 {
			t.Errorf("key %s: %d records, want 2 (one of each insert)", k, seen[k])
		}
	}
	if len(seen) != 50 {
		t.Errorf("%d keys, want 50", len(seen))
	}
}

// Inspect, which `walstream status` prints, identifies the server before
// it reads the checkpoint; a stream that commits in between writes a
// checkpoint past the WAL end it identified (more so with a Kafka far
// away). That is WAL the server has, not phantom events.
func inspectWhileCommitting(t *testing.T, pg *testenv.Postgres, broker string) {
	cfg := testConfig(t, pg, broker)
	cfg.Names.Slot, cfg.CheckpointKey, cfg.TransactionalID = "inspected", "inspected", "walstream-inspected"
	a := startInstance(t, cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)), "a")
	testenv.Eventually(t, 30*time.Second, "streaming", func() bool { _, ok := a.p.state.streaming(time.Now()); return ok })
	conn := pg.Connect("postgres")
	ctx := context.Background()
	inspect := cfg
	inspect.Hook = func(point string) {
		if point != "identified" {
			return
		}
		if _, err := conn.Exec(ctx, `INSERT INTO outbox VALUES (gen_random_uuid(), 'Inspected', 'i-1', 'Created', '{}')`); err != nil {
			t.Fatal(err)
		}
		lsn := queryLSN(t, conn, "SELECT pg_current_wal_insert_lsn()::text")
		testenv.Eventually(t, 30*time.Second, "the row committed to Kafka between IDENTIFY_SYSTEM and the checkpoint's read", func() bool {
			cp, _, found, err := store.ReadCheckpoint(ctx, cfg.Kafka, cfg.CheckpointTopic, cfg.CheckpointKey)
			if err != nil {
				t.Fatal(err)
			}
			return found && cp.LSN >= lsn
		})
	}
	in, err := Inspect(ctx, inspect)
	if err != nil {
		t.Fatal(err)
	}
	if in.Placement.Verdict != Continuous || len(in.Problems) != 0 {
		t.Fatalf("inspected while the stream committed: placement %s, problems %q; want continuous, none", in.Placement.Verdict, in.Problems)
	}
}
