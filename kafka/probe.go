package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Prober asks the Kafka cluster, with the run's TLS and SASL settings,
// whether it answers, whether the partitions a stream's transactions write
// can take writes, and what holds back the checkpoint topic. Its client
// has no transactional id and never produces: a probe must never
// initialize a producer id, which would fence the instance that streams.
//
// One Prober serves every stream of a process that reaches the cluster as
// one principal (Settings.SameAccess). Each answer is kept for probeFresh
// and given to whoever asks within that time, so that a hundred streams
// probing every two seconds ask Kafka about once in that time, not a
// hundred times, and a broker shared by many streams is not kept busy
// answering their probes.
type Prober struct {
	client *kgo.Client
	// writable reads metadata and min.insync.replicas; each caller names
	// its own transactional id.
	writable *Writability

	probe fresh[struct{}]
	mu    sync.Mutex
	meta  map[string]*fresh[*kmsg.MetadataResponse] // by the topics asked about
	held  map[string]*heldTopic
	// told are the holds Changed reported begun and not yet ended, by
	// topic.
	told map[string]map[holdKey]Hold
}

// holdKey is one transaction holding one partition.
type holdKey struct {
	partition int32
	stable    int64
}

// heldTopic is a topic's holds; holds is used under fresh's lock.
type heldTopic struct {
	fresh[[]Hold]
	holds *holds
}

// probeFresh is how long an answer is given again: under the two seconds
// between one stream's probes, so that no stream is given one answer
// twice.
const probeFresh = 1500 * time.Millisecond

// NewProber creates a prober; it connects on the first question.
func NewProber(conn Settings, log *slog.Logger) (*Prober, error) {
	cl, err := kgo.NewClient(append(conn.Opts(), WithLogger(log.With("component", "kafka-probe")))...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	return &Prober{client: cl, writable: NewWritability(cl, ""),
		meta: make(map[string]*fresh[*kmsg.MetadataResponse]), held: make(map[string]*heldTopic), told: make(map[string]map[holdKey]Hold)}, nil
}

// Probe sends one metadata request for no topic and reports whether a
// broker answered it before ctx ended.
func (p *Prober) Probe(ctx context.Context) error {
	_, err := p.probe.get(ctx, func() (struct{}, error) {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{} // none: not every topic
		if _, err := req.RequestWith(ctx, p.client); err != nil {
			return struct{}{}, fmt.Errorf("requesting Kafka metadata: %w", err)
		}
		return struct{}{}, nil
	})
	return err
}

// Unwritable lists, in words, the partitions of topics, and the
// transaction state partition of transactionalID, that cannot take writes
// now: without a leader, or with fewer in-sync replicas than
// min.insync.replicas. Kafka answers metadata requests then, yet no
// transaction of that stream's can commit.
func (p *Prober) Unwritable(ctx context.Context, transactionalID string, topics ...string) ([]string, error) {
	key := strings.Join(topics, "\x00")
	p.mu.Lock()
	f := p.meta[key]
	if f == nil {
		f = new(fresh[*kmsg.MetadataResponse])
		p.meta[key] = f
	}
	p.mu.Unlock()
	resp, err := f.get(ctx, func() (*kmsg.MetadataResponse, error) { return p.writable.metadata(ctx, topics...) })
	if err != nil {
		return nil, err
	}
	return p.writable.judge(ctx, resp, transactionalID), nil
}

// Holds returns the transactions open for some seconds that hold back the
// last stable offset of a partition of the checkpoint topic. Its callers
// share the slice: they must not change it.
func (p *Prober) Holds(ctx context.Context, topic string) ([]Hold, error) {
	p.mu.Lock()
	h := p.held[topic]
	if h == nil {
		h = &heldTopic{holds: newHolds(p.client)}
		p.held[topic] = h
	}
	p.mu.Unlock()
	return h.get(ctx, func() ([]Hold, error) { return h.holds.check(ctx, topic, time.Now(), holdAfter) })
}

// Changed returns, of held (an answer of Holds for topic), the holds no
// caller was told of before, and those told of that held ends, and
// remembers which are told: the streams that share the Prober hear of a
// hold once, not once each, as it holds the topic they share.
func (p *Prober) Changed(topic string, held []Hold) (began, ended []Hold) {
	p.mu.Lock()
	defer p.mu.Unlock()
	told := p.told[topic]
	if told == nil {
		told = make(map[holdKey]Hold)
		p.told[topic] = told
	}
	seen := make(map[holdKey]bool, len(held))
	for _, h := range held {
		k := holdKey{h.Partition, h.Stable}
		seen[k] = true
		if _, ok := told[k]; !ok {
			told[k] = h
			began = append(began, h)
		}
	}
	for k, h := range told {
		if !seen[k] {
			delete(told, k)
			ended = append(ended, h)
		}
	}
	return began, ended
}

// Close releases the client.
func (p *Prober) Close() { p.client.Close() }

// fresh is one answer kept for probeFresh. One caller asks at a time; the
// others wait for its answer.
type fresh[T any] struct {
	mu  sync.Mutex
	at  time.Time // zero while none is kept
	v   T
	err error
}

// get returns the answer kept, or asks for one; an answer cut short by
// the asker's own ctx is not kept, as it says nothing to the others.
func (f *fresh[T]) get(ctx context.Context, ask func() (T, error)) (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.at.IsZero() && time.Since(f.at) < probeFresh {
		return f.v, f.err
	}
	v, err := ask()
	if ctx.Err() != nil {
		f.at = time.Time{}
		return v, err
	}
	f.v, f.err, f.at = v, err, time.Now()
	return v, err
}
