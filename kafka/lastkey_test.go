package kafka

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// A transaction hanging on the checkpoint partition pins its last stable
// offset while every stream goes on committing checkpoints past it. A
// stream's start reads its key's last committed record back from the end:
// what it costs is what was written since the stream's own last commit,
// not what was written since the hold began, whereas a read forward from
// the last stable offset (ScanKey, how the start read before) reads all of
// it. Records under the key in transactions still open, before or after
// the last committed one, are found too. On Apache Kafka.
func TestLastUnderKeyPastAHold(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	ctx := context.Background()
	const topic = "walstream.checkpoints"
	admin, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": ptr("compact")}, topic); err != nil {
		t.Fatal(err)
	}
	others, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID("others"))
	if err != nil {
		t.Fatal(err)
	}
	defer others.Close()
	ours, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID("ours"))
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	commit := func(cl *kgo.Client, recs ...*kgo.Record) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(key, value string) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}
	}
	commit(ours, rec("slot-a", "cp-1"))
	// The hold: another stream's producer frozen in a commit, with a
	// record under slot-a (a predecessor of the stream, say).
	testenv.OpenTransaction(t, broker, "frozen", topic, "slot-a", []byte("frozen"))
	read := func() (last *kgo.Record, open []*kgo.Record, cost int64, scanned int64) {
		t.Helper()
		r, err := NewPartitionReader([]kgo.Opt{kgo.SeedBrokers(broker)})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if last, open, err = r.lastUnderKey(ctx, topic, "slot-a"); err != nil {
			t.Fatal(err)
		}
		cost = r.read
		fwd, err := NewPartitionReader([]kgo.Opt{kgo.SeedBrokers(broker)})
		if err != nil {
			t.Fatal(err)
		}
		defer fwd.Close()
		if _, err := fwd.scanKey(ctx, topic, "slot-a", func(*kgo.Record) error { return nil }); err != nil {
			t.Fatal(err)
		}
		return last, open, cost, fwd.read
	}
	written := 0
	var costs []int64
	for _, n := range []int{200, 2000} {
		// Other streams commit n checkpoints past the hold, then this
		// stream commits its own.
		for written < n {
			batch := make([]*kgo.Record, 0, 100)
			for range 100 {
				batch = append(batch, rec(fmt.Sprintf("slot-%d", written%7), "other"))
				written++
			}
			commit(others, batch...)
		}
		commit(ours, rec("slot-a", fmt.Sprintf("cp-%d", n)))
		last, open, cost, scanned := read()
		if last == nil || string(last.Value) != fmt.Sprintf("cp-%d", n) {
			t.Fatalf("%d records past the hold: last record %v, want cp-%d", n, last, n)
		}
		if len(open) != 1 || string(open[0].Value) != "frozen" {
			t.Fatalf("%d records past the hold: open records %v, want the frozen one", n, open)
		}
		t.Logf("%d records past the hold: read back %d records; forward from the last stable offset %d", n, cost, scanned)
		if scanned < int64(n) {
			t.Errorf("%d records past the hold: the forward read read %d, fewer than were written past the hold", n, scanned)
		}
		costs = append(costs, cost)
	}
	// One window back from the end, and the first record of the frozen
	// transaction.
	if costs[1] > costs[0] || costs[1] > firstWindow+1 {
		t.Errorf("records read back: %v for 200 and 2000 records past the hold; want no more for more, and at most %d", costs, firstWindow+1)
	}
	// A transaction of this stream's still open past its last commit is
	// found on the way back.
	if err := ours.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := ours.ProduceSync(ctx, rec("slot-a", "cp-open")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	defer ours.EndTransaction(ctx, kgo.TryAbort) //nolint:errcheck // the test is over
	if last, open, _, _ := read(); string(last.Value) != "cp-2000" || len(open) != 2 || string(open[1].Value) != "cp-open" {
		t.Errorf("with a transaction of the stream open: last %s, open %v; want cp-2000, the frozen record and cp-open", last.Value, open)
	}
}

func ptr[T any](v T) *T { return &v }
