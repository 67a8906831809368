package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// An operator ends a transaction holding the checkpoint partition by the
// offset it starts at, as kafka-transactions.sh abort does: its producer
// is found there, and its marker written; the last stable offset moves
// on. Aborted, its record is gone for read_committed readers; committed,
// it is there. An offset no transaction starts at is refused, naming those
// that do. On Apache Kafka.
func TestEndHanging(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	ctx := context.Background()
	conn := Settings{Brokers: []string{broker}}
	const topic = "walstream.checkpoints"
	admin, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	stable := func() (lso, end int64) {
		t.Helper()
		l, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		e, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		lo, _ := l.Lookup(topic, 0)
		eo, _ := e.Lookup(topic, 0)
		return lo.Offset, eo.Offset
	}
	committed := func() []string {
		t.Helper()
		var values []string
		if err := ScanTopic(ctx, conn.Opts(), topic, time.Time{}, func(r *kgo.Record) error {
			values = append(values, string(r.Value))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return values
	}
	for _, commit := range []bool{false, true} {
		txid := fmt.Sprintf("frozen-%v", commit)
		testenv.OpenTransaction(t, broker, txid, topic, "slot-a", []byte("frozen"))
		lso, end := stable()
		if lso >= end {
			t.Fatalf("last stable offset %d, end %d: the partition is not held", lso, end)
		}
		if _, err := EndHanging(ctx, conn, topic, 0, lso+1, commit); err == nil || !strings.Contains(err.Error(), "producer id") {
			t.Errorf("an offset no transaction starts at: %v, want a refusal naming the open transactions", err)
		}
		h, err := EndHanging(ctx, conn, topic, 0, lso, commit)
		if err != nil || h.TransactionalID != txid {
			t.Fatalf("ending the transaction at %d (commit %v): %+v, %v", lso, commit, h, err)
		}
		testenv.Eventually(t, 10*time.Second, "the last stable offset moves on", func() bool {
			lso, end := stable()
			return lso == end
		})
		values := committed()
		if got := strings.Count(strings.Join(values, ","), "frozen"); got != map[bool]int{false: 0, true: 1}[commit] {
			t.Errorf("commit %v: committed records %v", commit, values)
		}
	}
}

// A transaction its coordinator aborted, left open where it wrote, is
// aborted on every partition of the topics named where the producer id's
// transaction of that epoch or before is open, and nowhere else: another
// producer's open transaction stays. On Apache Kafka.
func TestAbortLeftOpen(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	ctx := context.Background()
	opts := Settings{Brokers: []string{broker}}.Opts()
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "cp"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "out"); err != nil {
		t.Fatal(err)
	}
	left, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID("left"), kgo.TransactionTimeout(5*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer left.Close()
	if err := left.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	// Partitions 0 and 1 of out, not 2.
	if err := left.ProduceSync(ctx, &kgo.Record{Topic: "cp", Value: []byte("checkpoint")},
		&kgo.Record{Topic: "out", Partition: 0, Value: []byte("event")}, &kgo.Record{Topic: "out", Partition: 1, Value: []byte("event")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.OpenTransaction(t, broker, "other", "out", "x", []byte("other"))
	open := func() []kadm.DescribedProducer { // the transactions open
		t.Helper()
		set := make(kadm.TopicsSet)
		set.Add("cp", 0)
		set.Add("out", 0, 1, 2)
		d, err := adm.DescribeProducers(ctx, set)
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(d.SortedProducers(), func(p kadm.DescribedProducer) bool { return p.CurrentTxnStartOffset < 0 })
	}
	i := slices.IndexFunc(open(), func(p kadm.DescribedProducer) bool { return p.Topic == "cp" })
	if i < 0 {
		t.Fatalf("no transaction open on cp-0: %v", open())
	}
	pid, epoch := open()[i].ProducerID, open()[i].ProducerEpoch
	if ended, err := AbortLeftOpen(ctx, opts, []string{"cp", "out"}, pid, epoch-1); err != nil || len(ended) != 0 {
		t.Fatalf("an earlier epoch: aborted on %v, %v; want nothing aborted", ended, err)
	}
	ended, err := AbortLeftOpen(ctx, opts, []string{"cp", "out"}, pid, epoch)
	if want := "cp-0,out-0,out-1"; err != nil || strings.Join(ended, ",") != want {
		t.Fatalf("aborted on %v, %v; want %s", ended, err, want)
	}
	if o := open(); len(o) != 1 || o[0].ProducerID == pid {
		t.Errorf("open transactions left: %+v, want the other producer's alone", o)
	}
}
