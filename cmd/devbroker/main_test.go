package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// TestCommitAcknowledgedAfterCrashIsVisible kills the broker between a
// transaction's produce and its EndTxn, then lets the producer commit on the
// restarted broker. The restarted broker aborted the open transaction, so
// the commit must fail; a commit it acknowledges must be readable. walstream
// confirms a position to Postgres on exactly that acknowledgement, so a
// broker that acknowledges an aborted transaction loses rows.
func TestCommitAcknowledgedAfterCrashIsVisible(t *testing.T) {
	b := startBroker(t)
	prod := b.producer()
	if err := txn(b.ctx, prod, "first", nil); err != nil {
		t.Fatalf("first transaction: %v", err)
	}
	// A clean restart first: the broker then keeps the last transaction's
	// outcome in its compacted producer log, which is what made kfake take
	// the commit below for a retry of that one.
	b.restart(syscall.SIGTERM)
	err := txn(b.ctx, prod, "second", func() { b.restart(syscall.SIGKILL) })
	t.Logf("committing the transaction open across the crash: %v", err)

	seen := b.readCommitted()
	if len(seen) == 0 || seen[0] != "first" {
		t.Fatalf("the committed first transaction is not readable: %q", seen)
	}
	if err == nil && !slices.Equal(seen, []string{"first", "second"}) {
		t.Fatalf("the broker acknowledged the commit of a transaction it aborted in the crash: read_committed sees %q", seen)
	}
}

// TestAbortedByCrashStaysAborted kills the broker while a transaction is
// open, lets the same transactional id commit another transaction, and
// kills the broker again. The transaction aborted by the first crash must
// stay aborted after the second recovery, or its rows appear next to the
// rows that were published again in its place.
func TestAbortedByCrashStaysAborted(t *testing.T) {
	b := startBroker(t)
	prod := b.producer()
	if err := txn(b.ctx, prod, "first", nil); err != nil {
		t.Fatalf("first transaction: %v", err)
	}
	if err := txn(b.ctx, prod, "second", func() { b.restart(syscall.SIGKILL) }); err == nil {
		t.Fatal("the commit of a transaction open across a crash succeeded")
	}
	prod.Close()
	// A new producer with the same transactional id, as a restarted
	// walstream has.
	if err := txn(b.ctx, b.producer(), "third", nil); err != nil {
		t.Fatalf("third transaction, after the crash: %v", err)
	}
	b.restart(syscall.SIGKILL)
	if seen := b.readCommitted(); !slices.Equal(seen, []string{"first", "third"}) {
		t.Fatalf("after a second crash, read_committed sees %q, want [first third]: the transaction aborted by the first crash came back", seen)
	}
}

const testTopic = "crash"

// testBroker is devbroker with a data directory, and a context for the test.
type testBroker struct {
	*testenv.Devbroker
	t   *testing.T
	ctx context.Context
}

func startBroker(t *testing.T) *testBroker {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	b := &testBroker{t: t, ctx: ctx, Devbroker: &testenv.Devbroker{Bin: testenv.Binary(t, testenv.Build{Pkg: "cmd/devbroker"}),
		Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t))), DataDir: t.TempDir(), Partitions: 1, Output: io.Discard}}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop(syscall.SIGKILL) })
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// A topic created by request is persisted at once; an auto-created one
	// is not (docs/getting-started.md, The local broker).
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, testTopic); err != nil {
		t.Fatalf("creating topic %s: %v", testTopic, err)
	}
	return b
}

func (b *testBroker) restart(sig syscall.Signal) {
	if err := b.Restart(sig); err != nil {
		b.t.Fatalf("restarting devbroker after %v: %v", sig, err)
	}
}

func (b *testBroker) producer() *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("crash-test"),
		kgo.DefaultProduceTopic(testTopic), kgo.RequestRetries(100), kgo.RetryTimeout(60*time.Second))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(cl.Close)
	return cl
}

// txn produces value in one transaction and commits it, calling
// beforeCommit, when set, once the record is acknowledged.
func txn(ctx context.Context, cl *kgo.Client, value string, beforeCommit func()) error {
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("beginning: %w", err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord(value)).FirstErr(); err != nil {
		return fmt.Errorf("producing: %w", err)
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	return cl.EndTransaction(ctx, kgo.TryCommit)
}

// readCommitted returns every value a read_committed consumer sees in the
// topic once nothing new arrived for 2s.
func (b *testBroker) readCommitted() []string {
	b.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics(testTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		b.t.Fatal(err)
	}
	defer cl.Close()
	var values []string
	for quiet := time.Now(); time.Since(quiet) < 2*time.Second; {
		ctx, cancel := context.WithTimeout(b.ctx, 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		if b.ctx.Err() != nil {
			b.t.Fatalf("reading %s: %v", testTopic, b.ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			values = append(values, string(r.Value))
			quiet = time.Now()
		})
	}
	return values
}
