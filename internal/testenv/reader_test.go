package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReaders: kcat and the franz-go reader see the same committed
// records, and neither sees an aborted transaction's.
func TestReaders(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		Unavailable(t, "kcat is not installed (apt-get install kcat)")
	}
	b := StartBroker(t, TestBroker())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic = "readers"
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("readers-test"), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatalf("creating %s: %v", topic, err)
	}
	for i, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", j)), Value: []byte(fmt.Sprintf("tx%d-%d", i, j)),
				Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(fmt.Sprintf("%d.%d", i, j))}}}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	values := func(recs []Record) []string {
		var vs []string
		for _, r := range recs {
			if r.Header("id") == "" || r.Timestamp == 0 {
				t.Fatalf("record %+v lacks its id header or timestamp", r)
			}
			vs = append(vs, fmt.Sprintf("%s/%d/%s=%s", r.Topic, r.Partition, r.Key, r.Value))
		}
		slices.Sort(vs)
		return vs
	}
	kc, err := Kcat(ctx, b.Addr(), topic)
	if err != nil {
		t.Fatal(err)
	}
	kg, err := ReadRecords(ctx, b.Addr(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(kc), 6; got != want {
		t.Fatalf("kcat read %d records, want %d (two committed transactions of 3): %v", got, want, values(kc))
	}
	if a, b := values(kc), values(kg); !slices.Equal(a, b) {
		t.Fatalf("kcat read %v, franz-go %v", a, b)
	}
	for _, r := range kc {
		if strings.HasPrefix(r.Value, "tx1-") {
			t.Fatalf("a record of the aborted transaction was read: %+v", r)
		}
	}
}
