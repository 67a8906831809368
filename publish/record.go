package publish

import (
	"fmt"
	"strconv"
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

// ValidTopic applies Kafka's rules for topic names, so that a bad aggregate
// type is caught with its event before the broker refuses the whole
// transaction.
func ValidTopic(t string) error {
	if len(t) == 0 || len(t) > 249 {
		return fmt.Errorf("topic name %q is %d characters, Kafka allows 1 to 249", t, len(t))
	}
	if t == "." || t == ".." {
		return fmt.Errorf("topic name %q is not allowed by Kafka", t)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has %q; Kafka allows only ASCII letters, digits, '.', '_' and '-'", t, c)
		}
	}
	return nil
}

// recordSize is what a record adds to a produce request, near enough to
// compare with the broker's limit.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value) + 32
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return n
}

// Headers of a dead-lettered record; the record's key and value are the
// row's aggregate id and payload as Postgres sent them.
const (
	HeaderReason        = "walstream.error.reason"
	HeaderColumn        = "walstream.error.column"
	HeaderValueBytes    = "walstream.error.value.bytes"
	HeaderSourceLSN     = "walstream.source.lsn"
	HeaderSourceTable   = "walstream.source.table"
	HeaderAggregateType = "walstream.source.aggregatetype"
	HeaderType          = "walstream.source.type"
)

// deadLetter builds the DLQ record of an event that cannot be published.
// A value too large for Kafka is left out and its size noted instead.
func deadLetter(topic string, ev *decode.Event, bad *decode.Error, maxBytes int) *kgo.Record {
	reason := bad.Reason
	if bad.Err != nil {
		reason += ": " + bad.Err.Error()
	}
	r := &kgo.Record{Topic: topic, Key: ev.AggregateID, Value: ev.Payload, Headers: []kgo.RecordHeader{
		{Key: HeaderID, Value: ev.ID},
		{Key: HeaderReason, Value: []byte(reason)},
		{Key: HeaderColumn, Value: []byte(bad.Column)},
		{Key: HeaderSourceLSN, Value: []byte(ev.LSN.String())},
		{Key: HeaderSourceTable, Value: []byte(ev.Table)},
		{Key: HeaderAggregateType, Value: ev.AggregateType},
		{Key: HeaderType, Value: ev.Type},
	}}
	if recordSize(r) > maxBytes {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderValueBytes, Value: []byte(strconv.Itoa(len(r.Value)))})
		r.Value = nil
	}
	return r
}
