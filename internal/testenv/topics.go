package testenv

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KfakeCluster starts a kfake cluster of n brokers in this process, without
// topic auto-creation unless opts add it, closed at the end of the test,
// and returns its brokers' addresses and an admin client of it.
func KfakeCluster(t testing.TB, n int, opts ...kfake.Opt) ([]string, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(n)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c.ListenAddrs(), kadm.NewClient(cl)
}

// TopicSettings reads a topic's replication factor, partitions and one
// config.
func TopicSettings(t testing.TB, adm *kadm.Client, topic, config string) (replicas, partitions int, value string) {
	t.Helper()
	ctx := context.Background()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil {
		t.Fatalf("topic %s: %v", topic, d.Err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == config {
			value = c.MaybeValue()
		}
	}
	return len(d.Partitions[0].Replicas), len(d.Partitions), value
}

// LogBuffer is a text slog logger whose output a test can read.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to what the logger wrote.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what the logger wrote.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger logs to b as text.
func (b *LogBuffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// OpenTransaction produces value under key to topic in a transaction of
// another producer, txid, and leaves it open: a stream frozen mid-commit,
// a paused pod. end ends it; one still open at the end of the test is
// aborted.
func OpenTransaction(t testing.TB, broker, txid, topic, key string, value []byte) (end func(kgo.TransactionEndTry)) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID(txid), kgo.TransactionTimeout(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ended := false
	end = func(try kgo.TransactionEndTry) {
		if ended {
			return
		}
		ended = true
		if err := cl.EndTransaction(ctx, try); err != nil {
			t.Errorf("ending the foreign transaction: %v", err)
		}
		cl.Close()
	}
	t.Cleanup(func() { end(kgo.TryAbort) })
	return end
}
