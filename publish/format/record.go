package format

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/decode"
)

// RoutedByValue is the group of the default route.topic.regex that
// route.topic.replacement refers to: the event's route-by value.
const RoutedByValue = "${routedByValue}"

// Route names topics from route-by values as Kafka Connect's RegexRouter
// behind Debezium's outbox router does: when the regex matches the whole
// value, the topic is the value with its first match replaced; otherwise
// the topic is the value itself. Case is preserved.
type Route struct {
	whole, first *regexp.Regexp
	template     []byte // the replacement in Go's Regexp.Expand syntax
	// topics caches names by route-by value, so that routing an event
	// allocates nothing once its value was seen.
	topics map[string]string
}

// maxCachedTopics bounds the topic cache: a route-by column with endless
// distinct values must not grow memory without end.
const maxCachedTopics = 4096

// NewRoute compiles route.topic.regex and route.topic.replacement, whose
// group references are Java's: $1 and ${name}, with \ escaping.
func NewRoute(regex, replacement string) (*Route, error) {
	first, err := regexp.Compile(regex)
	if err != nil {
		return nil, fmt.Errorf("route.topic.regex %q: %w", regex, err)
	}
	template, err := decode.TopicTemplate(replacement, first)
	if err != nil {
		return nil, fmt.Errorf("route.topic.replacement %q: %w", replacement, err)
	}
	return &Route{whole: regexp.MustCompile(`^(?:` + regex + `)$`), first: first, template: template, topics: make(map[string]string)}, nil
}

// Topic returns the topic for a route-by value.
func (r *Route) Topic(value []byte) string {
	if t, ok := r.topics[string(value)]; ok {
		return t
	}
	t := string(value)
	if r.whole.Match(value) {
		m := r.first.FindSubmatchIndex(value)
		b := append([]byte(nil), value[:m[0]]...)
		b = r.first.Expand(b, r.template, value, m)
		t = string(append(b, value[m[1]:]...))
	}
	if len(r.topics) >= maxCachedTopics {
		clear(r.topics)
	}
	r.topics[string(value)] = t
	return t
}

// Router maps events to records by their outbox table: route-by values to
// topics by the table's route, keys and values by its encoders.
type Router struct {
	tables map[string]*tableRoute // by decode.Outbox.Name
	// registry is the schema registry of the Avro encoders; nil when none
	// writes Avro.
	registry *registry
}

// tableRoute is how one outbox table's events become records.
type tableRoute struct {
	outbox     *decode.Outbox
	route      *Route
	key, value encoder
	context    []kgo.RecordHeader // Encoding.Context
	format     Encoding           // for logical messages, which have no columns
}

// NewRouter compiles the route and encoders of every outbox table; m,
// when not nil, counts the schema registry's requests.
func NewRouter(enc Encoding, m *RegistryMetrics, outboxes ...*decode.Outbox) (*Router, error) {
	r := &Router{tables: make(map[string]*tableRoute, len(outboxes))}
	schemas := newEnvelopeSchemas()
	if enc.UsesRegistry() {
		var err error
		if r.registry, err = newRegistry(enc.Registry, m); err != nil {
			return nil, err
		}
	}
	for _, o := range outboxes {
		rt, err := NewRoute(o.TopicRegex, o.TopicReplacement)
		if err != nil {
			return nil, fmt.Errorf("outbox %s: %w", o.Name(), err)
		}
		if prev, dup := r.tables[o.Name()]; dup {
			if prev.outbox == o {
				continue // logical messages may use a table's own mapping
			}
			return nil, fmt.Errorf("two mappings are named outbox %s", o.Name())
		}
		key, value := newEncoders(enc, o, schemas, r.registry)
		r.tables[o.Name()] = &tableRoute{outbox: o, route: rt, key: key, value: value, context: enc.Context, format: enc}
	}
	return r, nil
}

// table finds the route of an event's outbox table. An event of a table the
// router was not given is a wiring error, not one to route by defaults.
func (r *Router) table(ev *decode.Event) (*tableRoute, error) {
	if ev.Source == nil {
		return nil, fmt.Errorf("event %s at %s names no outbox table", ev.ID, ev.LSN)
	}
	t, ok := r.tables[ev.Source.Name()]
	if !ok {
		return nil, fmt.Errorf("event %s at %s: outbox table %s has no route", ev.ID, ev.LSN, ev.Source.Name())
	}
	return t, nil
}

// Topic returns the topic of an event.
func (r *Router) Topic(ev *decode.Event) (string, error) {
	t, err := r.table(ev)
	if err != nil {
		return "", err
	}
	return t.route.Topic(ev.AggregateType), nil
}

// Headers of a published record: the event id, as Debezium names it, and
// the W3C trace context when the outbox table has a tracing column.
const (
	HeaderID          = "id"
	HeaderTraceParent = "traceparent"
)

// EventKey identifies a record's event, read back from Kafka: "id:" and
// its id header, or where that is missing or null "kv:" and a digest of
// its key and value. The takeover's lookup and walstream diff tell events
// apart by it.
func EventKey(r *kgo.Record) string {
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

// EncodingError is an event whose key or value cannot be encoded as
// Debezium would; the event is bad input.
type EncodingError struct {
	Column string
	Err    error
}

func (e *EncodingError) Error() string { return "encoding column " + e.Column + ": " + e.Err.Error() }
func (e *EncodingError) Unwrap() error { return e.Err }

// CheckRegistry asks the schema registry whether it answers; nil when no
// encoder uses one.
func (r *Router) CheckRegistry(ctx context.Context) error {
	if r.registry == nil {
		return nil
	}
	return r.registry.Check(ctx)
}

// Record builds the Kafka record of an outbox event: key = aggregate id,
// value = payload, or the envelope of payload and additional fields, or no
// value for a tombstone; header id = event id, then the trace context and
// additional fields. ctx bounds the schema registry's requests; their
// failures are a *RegistryError, not bad input.
func (r *Router) Record(ctx context.Context, ev *decode.Event) (*kgo.Record, error) {
	t, err := r.table(ev)
	if err != nil {
		return nil, err
	}
	dbz := t.context
	if ev.Message != nil {
		dbz = nil // Debezium writes its context headers on change records only
	}
	rec := &kgo.Record{
		Topic:     t.route.Topic(ev.AggregateType),
		Timestamp: ev.Timestamp,
		Headers:   make([]kgo.RecordHeader, len(dbz)+1, len(dbz)+1+len(ev.Headers)+len(ev.Fields)),
	}
	copy(rec.Headers, dbz)
	// EventRouterDelegate adds the id header with the id column's schema
	// after the headers the connector wrote; SimpleHeaderConverter writes
	// its string form (a uuid or text as it is), and no value for NULL.
	id := &rec.Headers[len(dbz)]
	*id = kgo.RecordHeader{Key: HeaderID}
	if ev.Message != nil {
		if rec.Key, rec.Value, id.Value, err = t.messageRecord(ctx, rec.Topic, ev); err != nil {
			return nil, err
		}
	} else {
		var re *RegistryError
		if rec.Key, err = t.key.encode(ctx, nil, rec.Topic, ev); errors.As(err, &re) {
			return nil, err
		} else if err != nil {
			return nil, &EncodingError{Column: ev.Source.Columns.AggregateID, Err: err}
		}
		if rec.Value, err = t.value.encode(ctx, nil, rec.Topic, ev); errors.As(err, &re) {
			return nil, err
		} else if err != nil {
			return nil, &EncodingError{Column: ev.Source.Columns.Payload, Err: err}
		}
		id.Value = ev.ID
		if ev.IDColumn != nil {
			if id.Value, err = headerString(nil, ev.IDColumn, ev.ID); err != nil {
				return nil, &EncodingError{Column: ev.IDColumn.Name, Err: err}
			}
		}
	}
	if ev.TraceParent != nil {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderTraceParent, Value: ev.TraceParent})
	}
	for _, h := range ev.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	for _, f := range ev.Fields {
		if f.Placement != decode.PlaceHeader {
			continue
		}
		// SimpleHeaderConverter writes a header's value as its string form.
		v, err := headerString(nil, f.Column, f.Value)
		if err != nil {
			return nil, &EncodingError{Column: f.Column.Name, Err: err}
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: f.Name, Value: v})
	}
	return rec, nil
}

// jsonString appends s as a JSON string as Jackson's UTF8JsonGenerator,
// behind Kafka Connect's JsonConverter, writes it: quote, backslash and
// control characters escaped, with upper-case hex; a character outside the
// Basic Multilingual Plane (four bytes in UTF-8: an emoji) as its UTF-16
// surrogate pair, each half escaped (😀 is \uD83D\uDE00), since Jackson 2
// escapes every surrogate char unless its
// COMBINE_UNICODE_SURROGATES_IN_UTF8 feature is on, and JsonConverter
// leaves it off; HTML characters and the rest of non-ASCII as they are.
func jsonString(dst, s []byte) []byte { return appendJacksonString(dst, s, true) }

// avroSchemaString appends s as a string of an Avro schema's JSON text:
// Avro's Schema.toString writes through Jackson's generator of characters,
// which escapes as jsonString does but leaves surrogate pairs whole, so a
// character outside the Basic Multilingual Plane stays its UTF-8 bytes.
func avroSchemaString(dst, s []byte) []byte { return appendJacksonString(dst, s, false) }

// wholePairs turns the escaped surrogate pairs jsonString wrote in
// dst[start:] back into the UTF-8 bytes of their characters, in place.
// jsonString escapes a backslash of the text as \\, so every \u in what it
// wrote is an escape of its own.
func wholePairs(dst []byte, start int) []byte {
	out := start
	for i := start; i < len(dst); {
		if dst[i] == '\\' && i+1 < len(dst) {
			if i+12 <= len(dst) && dst[i+1] == 'u' && dst[i+6] == '\\' && dst[i+7] == 'u' {
				hi, err1 := strconv.ParseUint(string(dst[i+2:i+6]), 16, 16)
				lo, err2 := strconv.ParseUint(string(dst[i+8:i+12]), 16, 16)
				if r := utf16.DecodeRune(rune(hi), rune(lo)); err1 == nil && err2 == nil && r != utf8.RuneError {
					out += utf8.EncodeRune(dst[out:], r) // 4 bytes where the escapes had 12
					i += 12
					continue
				}
			}
			out += copy(dst[out:], dst[i:i+2])
			i += 2
			continue
		}
		dst[out] = dst[i]
		out, i = out+1, i+1
	}
	return dst[:out]
}

func appendJacksonString(dst, s []byte, escapePairs bool) []byte {
	const hex = "0123456789ABCDEF"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
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
		case c >= 0xF0 && escapePairs:
			r, size := utf8.DecodeRune(s[i:])
			if size != 4 {
				dst = append(dst, c) // not UTF-8: Postgres sends none in a UTF8 database
				continue
			}
			hi, lo := utf16.EncodeRune(r)
			for _, u := range [2]rune{hi, lo} {
				dst = append(dst, '\\', 'u', hex[u>>12], hex[u>>8&0xF], hex[u>>4&0xF], hex[u&0xF])
			}
			i += size - 1
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

// RecordSize is what a record adds to a produce request, near enough to
// compare with the broker's limit.
func RecordSize(r *kgo.Record) int {
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

// DeadLetter builds the DLQ record of an event that cannot be published.
// A value too large for Kafka is left out and its size noted instead.
func DeadLetter(topic string, ev *decode.Event, bad *decode.Error, maxBytes int) *kgo.Record {
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
	if RecordSize(r) > maxBytes {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderValueBytes, Value: []byte(strconv.Itoa(len(r.Value)))})
		r.Value = nil
	}
	return r
}

// TopicOf returns the topic of an event of o routed by value.
func (r *Router) TopicOf(o *decode.Outbox, value string) (string, error) {
	t, ok := r.tables[o.Name()]
	if !ok {
		return "", fmt.Errorf("outbox table %s has no route", o.Name())
	}
	return t.route.Topic([]byte(value)), nil
}
