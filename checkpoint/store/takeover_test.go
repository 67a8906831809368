package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish/format"
)

// The count of an identity's records: the most any one run of Debezium
// wrote, and every record walstream wrote; each claims one.
func TestTally(t *testing.T) {
	const own = 7
	for _, c := range []struct {
		name string
		pids []int64
		want int
	}{
		{"one record", []int64{1}, 1},
		{"two events of one run", []int64{1, 1}, 2},
		{"one event written by two runs", []int64{1, 2}, 1},
		{"two events of one run, one written again by the next", []int64{1, 1, 2}, 2},
		{"walstream's own", []int64{own, own}, 2},
		{"Debezium's and walstream's", []int64{1, 2, own}, 2},
		{"non-idempotent producers (no producer id)", []int64{-1, -1}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tl tally
			for _, pid := range c.pids {
				tl.add(pid, own)
			}
			if got := tl.copies(); got != c.want {
				t.Fatalf("copies = %d, want %d", got, c.want)
			}
			for i := range c.want {
				if !tl.claim() {
					t.Fatalf("claim %d refused", i+1)
				}
			}
			if tl.claim() {
				t.Fatalf("claim %d granted, want at most %d", c.want+1, c.want)
			}
		})
	}
	var none *tally
	if none.claim() {
		t.Fatal("an identity without records claimed one")
	}
}

// An event without an id is never taken for one Debezium published: a
// record of equal key and value in the topic, published before Debezium's
// offset (read because of the lookback, claimed by no event of the
// stretch), would otherwise excuse it, and the event would be lost. An
// event with an id is found as before.
func TestLookupIdlessEvents(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	idless := func() *kgo.Record {
		return &kgo.Record{Topic: "outbox.event.Order", Key: []byte("k"), Value: []byte(`"same"`), Headers: []kgo.RecordHeader{{Key: format.HeaderID}}}
	}
	withID := func() *kgo.Record {
		return &kgo.Record{Topic: "outbox.event.Order", Key: []byte("o-1"), Value: []byte(`{"n":1}`), Headers: []kgo.RecordHeader{{Key: format.HeaderID, Value: []byte("r")}}}
	}
	// Debezium's records: one without an id, one with.
	if err := cl.ProduceSync(ctx, idless(), withID()).FirstErr(); err != nil {
		t.Fatal(err)
	}
	l := NewLookup(&checkpoint.Takeover{Since: time.Now().Add(-time.Minute)}, []kgo.Opt{kgo.SeedBrokers(broker)},
		func(context.Context) (int64, error) { return 1 << 40, nil }, slog.New(slog.DiscardHandler))
	if found, err := l.Has(ctx, idless()); err != nil || found {
		t.Errorf("an event without an id, of the key and value of a record in the topic: found %v, %v; want published", found, err)
	}
	if found, err := l.Has(ctx, withID()); err != nil || !found {
		t.Errorf("an event of an id in the topic: found %v, %v; want found", found, err)
	}
	if checked, found, without := l.Counts(); checked != 1 || found != 1 || without != 1 {
		t.Errorf("counts: %d checked, %d found, %d without an id; want 1, 1, 1", checked, found, without)
	}
}

// The lookup reads a topic another producer keeps busy with transactions,
// one always open, without waiting for the topic to be quiet: each record
// past the last stable offset is decided by its transaction's marker. A
// transaction open when the read reaches a partition's end is waited for
// until its marker (a killed exactly-once task's, which Kafka aborts at
// its timeout): one that commits meanwhile is counted, one that stays
// open past the wait fails the lookup. On Apache Kafka.
func TestLookupBusyTopic(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	ctx := context.Background()
	const topic = "outbox.event.Order"
	admin, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	event := func(id string) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte("o-1"), Value: []byte(id), Headers: []kgo.RecordHeader{{Key: format.HeaderID, Value: []byte(id)}}}
	}
	// Debezium's records, without transactions.
	dbz, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer dbz.Close()
	if err := dbz.ProduceSync(ctx, event("d-1"), event("d-2")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Two producers of another stream take turns, so that one of their
	// transactions is open at every moment.
	bctx, stop := context.WithCancel(ctx)
	busy := make(chan error, 1)
	go func() {
		busy <- func() error {
			var cls [2]*kgo.Client
			for i := range cls {
				cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID(fmt.Sprintf("busy-%d", i)))
				if err != nil {
					return err
				}
				defer cl.Close()
				cls[i] = cl
			}
			begin := func(cl *kgo.Client, n int) error {
				if err := cl.BeginTransaction(); err != nil {
					return err
				}
				return cl.ProduceSync(bctx, event(fmt.Sprintf("busy-%d", n))).FirstErr()
			}
			if err := begin(cls[0], 0); err != nil {
				return err
			}
			for n := 1; bctx.Err() == nil; n++ {
				if err := begin(cls[n%2], n); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond)
				if err := cls[(n+1)%2].EndTransaction(ctx, kgo.TryCommit); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	defer func() {
		stop()
		if err := <-busy; err != nil && bctx.Err() == nil {
			t.Errorf("the busy producers: %v", err)
		}
	}()
	time.Sleep(time.Second)
	// Debezium's exactly-once task, killed in a transaction that commits
	// while the lookup waits.
	eos, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID("dbz-eos"))
	if err != nil {
		t.Fatal(err)
	}
	defer eos.Close()
	if err := eos.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := eos.ProduceSync(ctx, event("d-3")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	lookup := func(wait time.Duration) *Lookup {
		l := NewLookup(&checkpoint.Takeover{Since: time.Now().Add(-time.Minute)}, []kgo.Opt{kgo.SeedBrokers(broker)},
			func(context.Context) (int64, error) { return 1 << 40, nil }, slog.New(slog.DiscardHandler))
		l.wait = wait
		return l
	}
	go func() {
		time.Sleep(2 * time.Second)
		committed <- eos.EndTransaction(ctx, kgo.TryCommit)
	}()
	l := lookup(time.Minute)
	start := time.Now()
	if found, err := l.Has(ctx, event("d-1")); err != nil || !found {
		t.Fatalf("Debezium's d-1: found %v, %v", found, err)
	}
	t.Logf("read the busy topic in %s", time.Since(start))
	if found, err := l.Has(ctx, event("d-2")); err != nil || !found {
		t.Errorf("Debezium's d-2: found %v, %v", found, err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if found, err := l.Has(ctx, event("d-3")); err != nil || !found {
		t.Errorf("d-3, whose transaction committed while the lookup waited: found %v, %v", found, err)
	}
	if found, err := l.Has(ctx, event("d-4")); err != nil || found {
		t.Errorf("d-4, never published: found %v, %v", found, err)
	}
	// A transaction that stays open past the wait fails the lookup.
	testenv.OpenTransaction(t, broker, "dbz-hung", topic, "o-1", []byte("d-5"))
	if _, err := lookup(2*time.Second).Has(ctx, event("d-1")); !errors.Is(err, kafka.ErrOpenTransaction) {
		t.Errorf("a transaction open past the wait: %v, want ErrOpenTransaction", err)
	}
}
