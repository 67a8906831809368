package kafka

import (
	"context"
	"fmt"
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
