package publish

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kslog"
)

// Prober asks the Kafka cluster for its metadata, with the run's TLS and
// SASL settings, to tell whether Kafka answers. Its client has no
// transactional id and never produces: a probe must never initialize a
// producer id, which would fence the instance that streams.
type Prober struct {
	client *kgo.Client
}

// NewProber creates a prober; it connects on the first Probe.
func NewProber(conn KafkaSettings, log *slog.Logger) (*Prober, error) {
	cl, err := kgo.NewClient(append(conn.opts(), kgo.WithLogger(newQuietLogger(kslog.New(log.With("component", "kafka-probe")))))...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	return &Prober{client: cl}, nil
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

// Close releases the client.
func (p *Prober) Close() { p.client.Close() }
