package testenv

import (
	"os"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Broker is an in-process kfake broker on loopback, with topic
// auto-creation and state persisted in a directory, so that Restart keeps
// topics, offsets and transactions as a real broker restart would.
type Broker struct {
	Addr string
	t    testing.TB
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

// StartBroker starts a broker, closed at the end of the test.
func StartBroker(t testing.TB, opts ...kfake.Opt) *Broker {
	t.Helper()
	dir, err := os.MkdirTemp("", "walstream-kfake-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := &Broker{t: t, opts: append(KfakeOpts(FreePort(t), 3, dir), opts...)}
	b.start()
	b.Addr = b.c.ListenAddrs()[0]
	t.Cleanup(b.Stop)
	return b
}

func (b *Broker) start() {
	b.t.Helper()
	c, err := kfake.NewCluster(b.opts...)
	if err != nil {
		Unavailable(b.t, "starting kfake broker: %v", err)
	}
	b.mu.Lock()
	b.c = c
	b.mu.Unlock()
}

// Cluster is the running kfake cluster, for fault injection with its
// Control functions.
func (b *Broker) Cluster() *kfake.Cluster {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c
}

// Stop closes the broker; its state stays on disk.
func (b *Broker) Stop() {
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
func (b *Broker) Restart() {
	b.t.Helper()
	b.Stop()
	b.start()
}
