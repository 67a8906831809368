package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Broker is a Kafka-protocol broker, or cluster, that a test runs
// against, whatever starts it: Apache Kafka, kfake in this process, or
// the devbroker as a child process.
type Broker interface {
	// Addr is the bootstrap address list, comma-separated.
	Addr() string
	// Stop ends every node with sig (SIGTERM: a clean stop; SIGKILL: a
	// crash); its data stays for Start.
	Stop(sig syscall.Signal)
	// Start starts what Stop ended, with its data, and waits until it
	// serves clients.
	Start() error
	// Restart is Stop then Start.
	Restart(sig syscall.Signal) error
	// String names the broker, for messages and reports.
	String() string
	// Close kills the broker and removes its data.
	Close()
}

var (
	_ Broker = (*Kafka)(nil)
	_ Broker = (*Kfake)(nil)
	_ Broker = (*Devbroker)(nil)
)

// BrokerKind names the broker a test needs.
type BrokerKind string

// The brokers tests run on. Integration tests run on BrokerKafka (or the
// kind WALSTREAM_TEST_BROKER names, see TestBroker); kfake stays for fast
// package tests and for faults only it can inject.
const (
	// BrokerKafka is the newest Apache Kafka 4.x, one node, formatted with
	// its default transaction version 2 (KIP-890 part 2).
	BrokerKafka BrokerKind = "kafka"
	// BrokerKafkaTV1 and BrokerKafkaTV0 are the same release formatted with
	// transaction version 1 and 0: the classic protocol on a 4.x broker.
	BrokerKafkaTV1 BrokerKind = "kafka-tv1"
	BrokerKafkaTV0 BrokerKind = "kafka-tv0"
	// BrokerKafka39 is Apache Kafka 3.9: the classic transaction protocol,
	// as most managed clusters run it.
	BrokerKafka39 BrokerKind = "kafka-3.9"
	// BrokerKfake is franz-go's kfake in this process.
	BrokerKfake BrokerKind = "kfake"
	// BrokerDevbroker is cmd/devbroker, the local broker of `make demo`.
	BrokerDevbroker BrokerKind = "devbroker"
)

// KafkaKinds are the Apache Kafka kinds: the transaction protocols walstream
// runs on.
func KafkaKinds() []BrokerKind {
	return []BrokerKind{BrokerKafka, BrokerKafkaTV1, BrokerKafkaTV0, BrokerKafka39}
}

// TestBroker is the broker integration tests run on: BrokerKafka, unless
// WALSTREAM_TEST_BROKER names another kind (kfake for a quick local run;
// CI runs on Kafka).
func TestBroker() BrokerKind {
	if k := os.Getenv("WALSTREAM_TEST_BROKER"); k != "" {
		return BrokerKind(k)
	}
	return BrokerKafka
}

// StartBroker starts a one-node broker of the given kind, closed at the
// end of the test. One that cannot start skips the test, or fails it under
// CI.
func StartBroker(t testing.TB, kind BrokerKind) Broker {
	t.Helper()
	return StartBrokerAsync(t, kind)()
}

// StartBrokerAsync starts a broker as StartBroker does, in the background,
// so that a test can start Postgres meanwhile: each takes seconds. The
// function it returns waits for the broker; only the test's goroutine may
// call it.
func StartBrokerAsync(t testing.TB, kind BrokerKind) func() Broker {
	t.Helper()
	return startAsync(t, func() (Broker, error) { return LaunchBroker(context.Background(), kind) })
}

// startAsync launches a broker in the background; the function it returns
// waits for it, and the broker is closed (a failed test shows a Kafka
// cluster's logs first) when the test ends. One that cannot start skips
// the test, or fails it under CI.
func startAsync[B Broker](t testing.TB, launch func() (B, error)) func() B {
	t.Helper()
	type result struct {
		b   B
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := launch()
		ch <- result{b, err}
	}()
	var r *result
	get := func() result {
		if r == nil {
			got := <-ch
			r = &got
		}
		return *r
	}
	t.Cleanup(func() {
		if res := get(); res.err == nil {
			if k, ok := any(res.b).(*Kafka); ok && t.Failed() {
				k.logNodes(t)
			}
			res.b.Close()
		}
	})
	return func() B {
		t.Helper()
		res := get()
		if res.err != nil {
			Unavailable(t, "%v", res.err)
		}
		return res.b
	}
}

// LaunchBroker is StartBroker for callers outside a test: it returns
// errors, and the caller ends the broker with Close.
func LaunchBroker(ctx context.Context, kind BrokerKind) (Broker, error) {
	switch kind {
	case BrokerKafka:
		return LaunchKafka(ctx, KafkaConfig{})
	case BrokerKafkaTV1:
		return LaunchKafka(ctx, KafkaConfig{Features: []string{"transaction.version=1"}})
	case BrokerKafkaTV0:
		return LaunchKafka(ctx, KafkaConfig{Features: []string{"transaction.version=0"}})
	case BrokerKafka39:
		return LaunchKafka(ctx, KafkaConfig{Classic: true})
	case BrokerKfake:
		return LaunchKfake()
	case BrokerDevbroker:
		return LaunchDevbroker()
	}
	return nil, fmt.Errorf("unknown broker kind %q (WALSTREAM_TEST_BROKER?)", kind)
}

// Kfake is an in-process kfake broker on loopback, with topic
// auto-creation and state persisted in a directory, so that Restart keeps
// topics, offsets and transactions as a real broker restart would.
type Kfake struct {
	addr string
	dir  string
	opts []kfake.Opt
	mu   sync.Mutex
	c    *kfake.Cluster
}

// KfakeOpts are the options of a one-broker kfake cluster on port with
// auto-created topics of the given partitions, its state persisted in
// dataDir ("" keeps it in memory only).
func KfakeOpts(port, partitions int, dataDir string) []kfake.Opt {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
	}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir))
	}
	return opts
}

// StartKfake starts a kfake broker in this process, closed at the end of
// the test.
func StartKfake(t testing.TB, opts ...kfake.Opt) *Kfake {
	t.Helper()
	b, err := LaunchKfake(opts...)
	if err != nil {
		Unavailable(t, "%v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// LaunchKfake is StartKfake for callers outside a test.
func LaunchKfake(opts ...kfake.Opt) (*Kfake, error) {
	dir, err := os.MkdirTemp("", "walstream-kfake-")
	if err != nil {
		return nil, fmt.Errorf("creating kfake's directory: %w", err)
	}
	// A new broker whose port was taken moves to another.
	var b *Kfake
	err = startOnFreePort(func(bool) error {
		port, err := PickPort()
		if err != nil {
			return err
		}
		b = &Kfake{dir: dir, opts: append(KfakeOpts(port, 3, dir), opts...)}
		return b.Start()
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b.addr = b.c.ListenAddrs()[0]
	return b, nil
}

// Close closes the broker and removes its state.
func (b *Kfake) Close() {
	b.Stop(syscall.SIGKILL)
	os.RemoveAll(b.dir)
}

// Addr is the broker's address.
func (b *Kfake) Addr() string { return b.addr }

func (b *Kfake) String() string { return "kfake" }

// Start starts the broker from its persisted state.
func (b *Kfake) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		return nil
	}
	c, err := kfake.NewCluster(b.opts...)
	if err != nil {
		return fmt.Errorf("starting kfake broker: %w", err)
	}
	b.c = c
	return nil
}

// Cluster is the running kfake cluster, for fault injection with its
// Control functions.
func (b *Kfake) Cluster() *kfake.Cluster {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c
}

// HideFetches makes the broker answer every fetch of topic alone, of
// either isolation level, with nothing from where it starts, neither a
// record nor a marker, while hide is set, as a partition on which Kafka
// left a transaction undecided; hid is set once it has.
func (b *Kfake) HideFetches(topic string) (hide, hid *atomic.Bool) {
	hide, hid = new(atomic.Bool), new(atomic.Bool)
	c := b.Cluster()
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.FetchRequest)
		if !hide.Load() || len(r.Topics) != 1 || r.Topics[0].Topic != topic {
			return nil, nil, false
		}
		hid.Store(true)
		resp := r.ResponseKind().(*kmsg.FetchResponse)
		st := kmsg.NewFetchResponseTopic()
		st.Topic = topic
		for _, rp := range r.Topics[0].Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition, sp.HighWatermark, sp.LastStableOffset = rp.Partition, rp.FetchOffset+1, rp.FetchOffset
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
	return hide, hid
}

// Stop closes the broker; its state stays on disk. An in-process broker
// has no signals: every stop is a close.
func (b *Kfake) Stop(syscall.Signal) {
	b.mu.Lock()
	c := b.c
	b.c = nil
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Restart stops the broker and starts it again on the same port from its
// persisted state.
func (b *Kfake) Restart(sig syscall.Signal) error {
	b.Stop(sig)
	return b.Start()
}

// LaunchDevbroker builds and starts cmd/devbroker with its data in a
// folder of its own; Close kills it and removes the folder.
func LaunchDevbroker() (*Devbroker, error) {
	bin, err := BuildBinary(Build{Pkg: "cmd/devbroker"})
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "walstream-devbroker-")
	if err != nil {
		return nil, fmt.Errorf("creating the devbroker's directory: %w", err)
	}
	port, err := PickPort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Devbroker{Bin: bin, DataDir: dir, Listen: fmt.Sprintf("127.0.0.1:%d", port)}
	if err := b.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}
