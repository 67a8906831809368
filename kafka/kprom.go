package kafka

import (
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// kafkaMetrics passes franz-go's hooks to kprom, which rebuilds its
// collectors in OnNewClient. Each session makes a new client, and a closed
// client's last hook goroutines may still be running then, so OnNewClient
// and OnClientClosed exclude every other hook.
type kafkaMetrics struct {
	mu sync.RWMutex
	m  *kprom.Metrics
}

// ClientMetrics registers franz-go's client metrics (kprom,
// walstream_kafka_*) on reg and returns the hook that reports them, for
// one client at a time (kgo.WithHooks): kprom allows no more.
func ClientMetrics(reg prometheus.Registerer) kgo.Hook {
	return &kafkaMetrics{m: kprom.NewMetrics("walstream_kafka", kprom.Registerer(reg))}
}

func (k *kafkaMetrics) OnNewClient(c *kgo.Client) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m.OnNewClient(c)
}

func (k *kafkaMetrics) OnClientClosed(c *kgo.Client) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m.OnClientClosed(c)
}

func (k *kafkaMetrics) OnBrokerConnect(meta kgo.BrokerMetadata, d time.Duration, c net.Conn, err error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.m.OnBrokerConnect(meta, d, c, err)
}

func (k *kafkaMetrics) OnBrokerDisconnect(meta kgo.BrokerMetadata, c net.Conn) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.m.OnBrokerDisconnect(meta, c)
}

func (k *kafkaMetrics) OnBrokerThrottle(meta kgo.BrokerMetadata, interval time.Duration, after bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.m.OnBrokerThrottle(meta, interval, after)
}

func (k *kafkaMetrics) OnProduceBatchWritten(meta kgo.BrokerMetadata, topic string, partition int32, m kgo.ProduceBatchMetrics) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.m.OnProduceBatchWritten(meta, topic, partition, m)
}

func (k *kafkaMetrics) OnFetchBatchRead(meta kgo.BrokerMetadata, topic string, partition int32, m kgo.FetchBatchMetrics) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.m.OnFetchBatchRead(meta, topic, partition, m)
}

func (k *kafkaMetrics) OnBrokerRead(meta kgo.BrokerMetadata, key int16, n int, wait, read time.Duration, err error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.m.OnBrokerRead(meta, key, n, wait, read, err)
}

func (k *kafkaMetrics) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, n int, wait, write time.Duration, err error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.m.OnBrokerWrite(meta, key, n, wait, write, err)
}

func (k *kafkaMetrics) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	k.m.OnBrokerE2E(meta, key, e2e)
}

// Every hook kprom implements must be passed on, or its metrics go missing.
var (
	_ kgo.HookNewClient           = (*kafkaMetrics)(nil)
	_ kgo.HookClientClosed        = (*kafkaMetrics)(nil)
	_ kgo.HookBrokerConnect       = (*kafkaMetrics)(nil)
	_ kgo.HookBrokerDisconnect    = (*kafkaMetrics)(nil)
	_ kgo.HookBrokerThrottle      = (*kafkaMetrics)(nil)
	_ kgo.HookProduceBatchWritten = (*kafkaMetrics)(nil)
	_ kgo.HookFetchBatchRead      = (*kafkaMetrics)(nil)
	_ kgo.HookBrokerRead          = (*kafkaMetrics)(nil)
	_ kgo.HookBrokerWrite         = (*kafkaMetrics)(nil)
	_ kgo.HookBrokerE2E           = (*kafkaMetrics)(nil)
)
