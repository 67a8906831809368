package publish

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/decode"
)

// RoutedByValue is the placeholder in a topic template that stands for the
// event's aggregate type, as in Debezium's route.topic.replacement.
const RoutedByValue = "${routedByValue}"

// Router maps aggregate types to topic names. It caches them so that
// routing an event allocates nothing once its aggregate type was seen.
type Router struct {
	prefix, suffix string
	topics         map[string]string
}

// NewRouter parses a topic template such as "outbox.event.${routedByValue}".
func NewRouter(template string) (*Router, error) {
	prefix, suffix, ok := strings.Cut(template, RoutedByValue)
	if !ok || strings.Contains(suffix, RoutedByValue) {
		return nil, fmt.Errorf("topic template %q must contain %s exactly once", template, RoutedByValue)
	}
	return &Router{prefix: prefix, suffix: suffix, topics: make(map[string]string)}, nil
}

// Topic returns the topic for an aggregate type, case preserved.
func (r *Router) Topic(aggregateType []byte) string {
	if t, ok := r.topics[string(aggregateType)]; ok {
		return t
	}
	t := r.prefix + string(aggregateType) + r.suffix
	r.topics[t[len(r.prefix):len(t)-len(r.suffix)]] = t
	return t
}

// HeaderID is the header carrying the event id, as Debezium names it.
const HeaderID = "id"

// Record builds the Kafka record of an outbox event: key = aggregate id,
// value = payload as Postgres sent it, header id = event id. The record
// aliases the event's bytes.
func (r *Router) Record(ev *decode.Event) *kgo.Record {
	return &kgo.Record{
		Topic:   r.Topic(ev.AggregateType),
		Key:     ev.AggregateID,
		Value:   ev.Payload,
		Headers: []kgo.RecordHeader{{Key: HeaderID, Value: ev.ID}},
	}
}
