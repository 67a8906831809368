package publish

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
)

// After a takeover from Debezium (checkpoint.Takeover), the first
// transactions walstream reads may already be in Kafka: Debezium's stored
// offset trails what it delivered by up to one offset flush, and its last
// transaction is usually delivered although its offset points before it.
// Before publishing an event of such a transaction, the producer looks it
// up among the records of its topic, read once, read_committed, from the
// takeover's Since: Debezium's records (its processing time is their
// timestamp, never before the row's commit) and what this stream
// committed since the takeover. Events are told apart by their id header,
// or by key and value where the id is null.

// takeoverWait is how long the lookup waits for a topic's open
// transaction to end: a killed exactly-once task leaves one open until the
// broker aborts it, after the producer's transaction.timeout.ms (one
// minute by default in Kafka Connect).
const takeoverWait = 90 * time.Second

// takeoverReadDeadline bounds reading one topic.
const takeoverReadDeadline = 10 * time.Minute

// published finds events already in Kafka, topic by topic.
type published struct {
	takeover *checkpoint.Takeover
	opts     []kgo.Opt
	log      *slog.Logger
	// ids are the event identities each topic read holds.
	ids map[string]map[string]struct{}
	// found counts the events found already published, checked those
	// looked up.
	found, checked int
}

func newPublished(t *checkpoint.Takeover, opts []kgo.Opt, log *slog.Logger) *published {
	return &published{takeover: t, opts: opts, log: log, ids: make(map[string]map[string]struct{})}
}

// has reports whether rec's event is among its topic's records.
func (p *published) has(ctx context.Context, rec *kgo.Record) (bool, error) {
	ids, ok := p.ids[rec.Topic]
	if !ok {
		var err error
		if ids, err = p.read(ctx, rec.Topic); err != nil {
			return false, err
		}
		p.ids[rec.Topic] = ids
	}
	p.checked++
	_, found := ids[eventKey(rec)]
	if found {
		p.found++
	}
	return found, nil
}

// read collects the event identities of topic's records from Since on.
func (p *published) read(ctx context.Context, topic string) (map[string]struct{}, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, takeoverReadDeadline)
	defer cancel()
	ids := make(map[string]struct{})
	n := 0
	err := scanTopic(ctx, p.opts, topic, p.takeover.Since, takeoverWait, func(r *kgo.Record) error {
		ids[eventKey(r)] = struct{}{}
		n++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("looking up the events Debezium published to topic %s since %s: %w", topic, p.takeover.Since.UTC().Format(time.RFC3339), err)
	}
	p.log.Info("read the events Debezium may have published before the takeover", "topic", topic, "records", n, "events", len(ids),
		"since", p.takeover.Since.UTC().Format(time.RFC3339Nano), "seconds", time.Since(start).Seconds())
	return ids, nil
}

// eventKey identifies a record's event: its id header, or where that is
// missing or null its key and value.
func eventKey(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == HeaderID && h.Value != nil {
			return "id:" + string(h.Value)
		}
	}
	s := sha256.New()
	for _, b := range [][]byte{r.Key, r.Value} {
		if b == nil {
			s.Write([]byte{0})
			continue
		}
		s.Write([]byte{1, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))})
		s.Write(b)
	}
	return "kv:" + string(s.Sum(nil))
}
