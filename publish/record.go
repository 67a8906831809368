package publish

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/decode"
)

// RoutedByValue is the placeholder in a topic template that stands for the
// event's aggregate type, as in Debezium's route.topic.replacement.
const RoutedByValue = "${routedByValue}"

// Converter says how keys and values are encoded: as Debezium's outbox
// router does behind Kafka Connect's StringConverter (the default) or
// JsonConverter with schemas.enable=false, so that consumers of a Debezium
// pipeline see the same bytes.
type Converter int

const (
	// StringConverter: key and value as Postgres renders them.
	StringConverter Converter = iota
	// JSONConverter: key and value as JSON strings, or, with
	// ExpandJSONPayload, a JSON payload as JSON.
	JSONConverter
)

// ParseConverter reads "string" or "json".
func ParseConverter(s string) (Converter, error) {
	switch s {
	case "string":
		return StringConverter, nil
	case "json":
		return JSONConverter, nil
	}
	return 0, fmt.Errorf("converter %q is not string or json", s)
}

// Router maps events to records: aggregate types to topic names, and keys
// and values through the converter. It caches topic names so that routing
// an event allocates nothing once its aggregate type was seen.
type Router struct {
	prefix, suffix string
	topics         map[string]string
	conv           Converter
	// expand writes a JSON payload as JSON under JSONConverter, as
	// Debezium's table.expand.json.payload does.
	expand bool
}

// NewRouter parses a topic template such as "outbox.event.${routedByValue}".
func NewRouter(template string) (*Router, error) {
	prefix, suffix, ok := strings.Cut(template, RoutedByValue)
	if !ok || strings.Contains(suffix, RoutedByValue) {
		return nil, fmt.Errorf("topic template %q must contain %s exactly once", template, RoutedByValue)
	}
	return &Router{prefix: prefix, suffix: suffix, topics: make(map[string]string)}, nil
}

// Convert sets how keys and values are encoded.
func (r *Router) Convert(c Converter, expandJSONPayload bool) {
	r.conv, r.expand = c, expandJSONPayload
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

// Headers of a published record: the event id, as Debezium names it, and
// the W3C trace context when the outbox row carries one.
const (
	HeaderID          = "id"
	HeaderTraceParent = "traceparent"
)

// Record builds the Kafka record of an outbox event: key = aggregate id,
// value = payload (nil for a tombstone), header id = event id. Under the
// StringConverter the record aliases the event's bytes.
func (r *Router) Record(ev *decode.Event) *kgo.Record {
	rec := &kgo.Record{
		Topic:   r.Topic(ev.AggregateType),
		Key:     ev.AggregateID,
		Value:   ev.Payload,
		Headers: []kgo.RecordHeader{{Key: HeaderID, Value: ev.ID}},
	}
	if ev.TraceParent != nil {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderTraceParent, Value: ev.TraceParent})
	}
	for _, h := range ev.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	if r.conv == JSONConverter {
		rec.Key = jsonString(nil, ev.AggregateID)
		switch {
		case ev.Payload == nil: // a tombstone stays one
		case ev.PayloadBinary:
			// JsonConverter writes bytes as base64 strings.
			rec.Value = jsonString(nil, []byte(base64.StdEncoding.EncodeToString(ev.Payload)))
		case r.expand && json.Valid(ev.Payload):
			var b bytes.Buffer
			_ = json.Compact(&b, ev.Payload) // valid, so it compacts
			rec.Value = b.Bytes()
		default:
			rec.Value = jsonString(nil, ev.Payload)
		}
	}
	return rec
}

// jsonString appends s as a JSON string escaped as Jackson, behind Kafka
// Connect's JsonConverter, escapes it: quote, backslash and control
// characters only, with upper-case hex; not HTML characters, not non-ASCII.
func jsonString(dst, s []byte) []byte {
	const hex = "0123456789ABCDEF"
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
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
