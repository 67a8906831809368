package kafka

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Prober asks the Kafka cluster for its metadata, with the run's TLS and
// SASL settings, to tell whether Kafka answers. Its client has no
// transactional id and never produces: a probe must never initialize a
// producer id, which would fence the instance that streams.
type Prober struct {
	client   *kgo.Client
	writable *Writability
	holds    *holds
}

// NewProber creates a prober for the stream of transactionalID; it
// connects on the first Probe.
func NewProber(conn Settings, transactionalID string, log *slog.Logger) (*Prober, error) {
	cl, err := kgo.NewClient(append(conn.Opts(), WithLogger(log.With("component", "kafka-probe")))...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	return &Prober{client: cl, writable: NewWritability(cl, transactionalID), holds: newHolds(cl)}, nil
}

// Probe sends one metadata request for no topic and reports whether a
// broker answered it before ctx ended.
func (p *Prober) Probe(ctx context.Context) error {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none: not every topic
	if _, err := req.RequestWith(ctx, p.client); err != nil {
		return fmt.Errorf("requesting Kafka metadata: %w", err)
	}
	return nil
}

// Unwritable lists, in words, the partitions of topics, and the
// transaction state partition of the stream's transactional id, that cannot
// take writes now: without a leader, or with fewer in-sync replicas than
// min.insync.replicas. Kafka answers metadata requests then, yet no
// transaction of walstream's can commit.
func (p *Prober) Unwritable(ctx context.Context, topics ...string) ([]string, error) {
	return p.writable.Check(ctx, topics...)
}

// Close releases the client.
func (p *Prober) Close() { p.client.Close() }
