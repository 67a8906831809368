package format

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/decode"
)

// Converter is how a Kafka Connect converter behind Debezium writes a key or
// a value, so that consumers of a Debezium pipeline see the same bytes.
type Converter int

// Formats of key.converter and value.converter.
const (
	// String is StringConverter: the Connect value's toString.
	String Converter = iota
	// JSON is JsonConverter with schemas.enable=false.
	JSON
	// JSONSchema is JsonConverter with schemas.enable=true, Kafka
	// Connect's default: {"schema":...,"payload":...}.
	JSONSchema
	// Binary is Debezium's BinaryDataConverter: a bytes value (a
	// bytea payload) as its bytes; any other value stops Debezium.
	Binary
	// Avro is Apicurio's or Confluent's AvroConverter: the Confluent
	// wire format, with schemas in a registry (Encoding.Registry).
	Avro
)

func (f Converter) String() string {
	switch f {
	case String:
		return "string"
	case JSON:
		return "json"
	case JSONSchema:
		return "json with schemas"
	case Binary:
		return "binary"
	case Avro:
		return "avro"
	}
	return "Converter(" + strconv.Itoa(int(f)) + ")"
}

// Kafka Connect's converter classes, and Debezium's.
const (
	StringConverterClass = "org.apache.kafka.connect.storage.StringConverter"
	JSONConverterClass   = "org.apache.kafka.connect.json.JsonConverter"
	BinaryConverterClass = "io.debezium.converters.BinaryDataConverter"
	// Apicurio's and Confluent's Avro converters.
	ApicurioAvroConverterClass  = "io.apicurio.registry.utils.converter.AvroConverter"
	ConfluentAvroConverterClass = "io.confluent.connect.avro.AvroConverter"
)

// Parse reads a converter as a Connect config names it (its class,
// or walstream's short names string, json and avro) with its
// schemas.enable.
func Parse(converter string, schemas bool) (Converter, error) {
	switch strings.TrimSpace(converter) {
	case "string", StringConverterClass:
		return String, nil
	case "json", JSONConverterClass:
		if schemas {
			return JSONSchema, nil
		}
		return JSON, nil
	case BinaryConverterClass:
		return Binary, nil
	case "avro", ApicurioAvroConverterClass, ConfluentAvroConverterClass:
		return Avro, nil
	}
	return 0, fmt.Errorf("converter %q is not %s (string), %s (json), %s, or %s or %s (avro)", converter,
		StringConverterClass, JSONConverterClass, BinaryConverterClass, ApicurioAvroConverterClass, ConfluentAvroConverterClass)
}

// UsesRegistry reports whether keys or values are written with schemas in
// a schema registry.
func (e Encoding) UsesRegistry() bool { return e.Key == Avro || e.Value == Avro }

// Encoding is how keys and values are written: a converter each, as a
// Connect worker's key.converter and value.converter.
type Encoding struct {
	Key, Value Converter
	// SchemaPrefix stands for the Debezium connector's topic.prefix in the
	// value schema name of an envelope (<prefix>.<schema>.<table>.<route-by
	// value>.Value), which JsonConverter with schemas and AvroConverter
	// write.
	SchemaPrefix string
	// Registry is the schema registry of Avro.
	Registry RegistrySettings
	// Context are headers written before each record's id header:
	// ContextHeaders, or none.
	Context []kgo.RecordHeader
}

// Debezium's context headers (io.debezium.connector.common.DebeziumHeaders).
const (
	HeaderLogicalName   = "__debezium.context.connectorLogicalName"
	HeaderTaskID        = "__debezium.context.taskId"
	HeaderConnectorName = "__debezium.context.connectorName"
	HeaderRunID         = "__debezium.context.runId"
)

// ContextHeaders are the headers Debezium 3.2 and later put on every
// change record unless extended.headers.enabled is false, and which its
// outbox router keeps in front of id: the connector's logical name (its
// topic.prefix), its task (0: the Postgres connector runs one), its type
// and an id of the task's run. SimpleHeaderConverter writes each as its
// text.
func ContextHeaders(logicalName, runID string) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderLogicalName, Value: []byte(logicalName)},
		{Key: HeaderTaskID, Value: []byte("0")},
		{Key: HeaderConnectorName, Value: []byte("postgresql")},
		{Key: HeaderRunID, Value: []byte(runID)},
	}
}

// encoder writes an event's key or value, bound for topic, as one
// converter does behind Debezium's outbox router. A nil result is a record
// without value. Each converter is its own encoder: a new one (Protobuf,
// say) is a new type in a file of its own and a case in newEncoders. ctx
// bounds the schema registry's requests of the encoders that need it.
type encoder interface {
	encode(ctx context.Context, dst []byte, topic string, ev *decode.Event) ([]byte, error)
	// node writes a value of a logical message's decoded struct (n, nil
	// when absent, of schema s) as the key or the value.
	node(ctx context.Context, topic string, n *jsonNode, s *connectSchema) ([]byte, error)
}

// Compile-time checks that each converter implements encoder.
var (
	_ encoder = stringKey{}
	_ encoder = jsonKey{}
	_ encoder = binaryKey{}
	_ encoder = (*stringValue)(nil)
	_ encoder = (*jsonValue)(nil)
	_ encoder = (*binaryValue)(nil)
	_ encoder = (*avroKey)(nil)
	_ encoder = (*avroValue)(nil)
)

// newEncoders is the one place that decides how an outbox table's keys
// and values are written.
func newEncoders(enc Encoding, o *decode.Outbox, schemas *envelopeSchemas, reg *registry) (key, value encoder) {
	p := payload{outbox: o, envelope: o.HasEnvelope(), envelopes: schemas}
	switch enc.Key {
	case JSON, JSONSchema:
		key = jsonKey{schemas: enc.Key == JSONSchema}
	case Binary:
		key = binaryKey{}
	case Avro:
		key = &avroKey{schemas: newSchemaIDs(reg, true, enc.Registry.KeyStrategy)}
	default:
		key = stringKey{}
	}
	switch enc.Value {
	case JSON, JSONSchema:
		value = &jsonValue{payload: p, withSchema: enc.Value == JSONSchema, prefix: enc.SchemaPrefix}
	case Binary:
		value = &binaryValue{p}
	case Avro:
		value = &avroValue{payload: p, schemas: newSchemaIDs(reg, false, enc.Registry.ValueStrategy), prefix: enc.SchemaPrefix}
	default:
		value = &stringValue{p}
	}
	return key, value
}

// errNotBytes is BinaryDataConverter's refusal of anything but bytes
// (Debezium's task stops with a DataException).
var errNotBytes = errors.New("io.debezium.converters.BinaryDataConverter writes bytes only, and this is not a bytea column")

// binaryKey is BinaryDataConverter as key.converter: no key column walstream
// takes is bytes, so only a NULL key has bytes, none.
type binaryKey struct{}

func (binaryKey) encode(_ context.Context, dst []byte, _ string, ev *decode.Event) ([]byte, error) {
	if ev.AggregateID == nil {
		return nil, nil
	}
	return nil, errNotBytes
}

func (binaryKey) node(_ context.Context, _ string, n *jsonNode, _ *connectSchema) ([]byte, error) {
	return binaryNode(n)
}

// binaryNode: a message's fields are never bytes, and null is no bytes.
func binaryNode(n *jsonNode) ([]byte, error) {
	if null(n) {
		return nil, nil
	}
	return nil, errNotBytes
}

// binaryValue is BinaryDataConverter as value.converter: a bytea payload
// as its bytes, NULL as no value.
type binaryValue struct{ payload }

func (v *binaryValue) encode(_ context.Context, dst []byte, _ string, ev *decode.Event) ([]byte, error) {
	switch {
	case ev.Tombstone || ev.Payload == nil && !v.envelope:
		return nil, nil
	case v.envelope || !ev.PayloadBinary:
		return nil, errNotBytes
	}
	if dst == nil {
		dst = []byte{} // empty bytes are a value, not none
	}
	return append(dst, ev.Payload...), nil
}

func (v *binaryValue) node(_ context.Context, _ string, n *jsonNode, _ *connectSchema) ([]byte, error) {
	return binaryNode(n)
}

// unnamedKey and unnamedPayload stand for the columns of an event that
// names none, built by hand (decode names every column of a row): a
// required text key and an optional text payload.
var (
	unnamedKey     = decode.Column{Name: "aggregateid", Type: decode.TypeText, TypMod: -1, NotNull: true}
	unnamedPayload = decode.Column{Name: "payload", Type: decode.TypeText, TypMod: -1}
)

func keyColumn(ev *decode.Event) *decode.Column {
	if ev.KeyColumn == nil {
		return &unnamedKey
	}
	return ev.KeyColumn
}

// The key: EventRouterDelegate makes the key column's value (Struct.get)
// the key, with the column's schema (defineRecordKeySchema).
type (
	stringKey struct{}
	jsonKey   struct{ schemas bool }
)

func (stringKey) encode(_ context.Context, dst []byte, _ string, ev *decode.Event) ([]byte, error) {
	return javaString(dst, keyColumn(ev), ev.AggregateID)
}

func (k jsonKey) encode(_ context.Context, dst []byte, _ string, ev *decode.Event) ([]byte, error) {
	col := keyColumn(ev)
	if !k.schemas {
		return connectJSON(dst, col, ev.AggregateID)
	}
	dst = jsonSchema(append(dst, `{"schema":`...), col, "")
	dst, err := connectJSON(append(dst, `,"payload":`...), col, ev.AggregateID)
	return append(dst, '}'), err
}

func (stringKey) node(_ context.Context, _ string, n *jsonNode, s *connectSchema) ([]byte, error) {
	return stringNode(n, s), nil
}

func (k jsonKey) node(_ context.Context, _ string, n *jsonNode, s *connectSchema) ([]byte, error) {
	return jsonNodeOf(n, s, k.schemas), nil
}

// stringNode is a message's field under StringConverter: its toString,
// no bytes for null.
func stringNode(n *jsonNode, s *connectSchema) []byte {
	if null(n) {
		return nil
	}
	return n.javaStringAs(nil, s)
}

// jsonNodeOf is a message's field under JsonConverter, with its schema or
// without.
func jsonNodeOf(n *jsonNode, s *connectSchema, schemas bool) []byte {
	if !schemas {
		return n.jsonAs(nil, s)
	}
	dst := s.json([]byte(`{"schema":`), "")
	return append(n.jsonAs(append(dst, `,"payload":`...), s), '}')
}

// payload is what every value encoder needs of an event: the payload's
// column, the payload as Debezium may expand it, whether the value is an
// envelope of the payload and additional fields (it is when any field is
// placed in the envelope: EventRouterDelegate's onlyHeadersInOutputMessage
// is false), and the router's envelope schemas.
type payload struct {
	outbox    *decode.Outbox
	envelope  bool
	envelopes *envelopeSchemas // shared by the router's tables
}

// read is the payload as the router has it. With an envelope and a schema
// version, it is checked against the version's envelope schema, as the
// router's Struct.put checks it whatever the converter.
func (p payload) read(ev *decode.Event) (col *decode.Column, expanded *jsonNode, err error) {
	col = ev.PayloadColumn
	if col == nil {
		col = &unnamedPayload
	}
	if p.outbox.ExpandJSONPayload && ev.Payload != nil && !ev.PayloadBinary {
		expanded, err = expand(ev.Payload, p.outbox)
	}
	if err == nil && p.envelope && p.outbox.Columns.SchemaVersion != "" {
		err = p.envelopes.versionPayload(ev.SchemaVersion, payloadSchema(col, expanded))
	}
	return col, expanded, err
}

// stringValue is StringConverter's value: the Connect value's toString.
type stringValue struct{ payload }

func (v *stringValue) encode(_ context.Context, dst []byte, _ string, ev *decode.Event) ([]byte, error) {
	if ev.Tombstone {
		return nil, nil
	}
	col, expanded, err := v.read(ev)
	switch {
	case err != nil && !v.envelope:
		// The payload stayed a string; StringConverter ignores the schema.
		return javaString(dst, col, ev.Payload)
	case err != nil:
		return nil, err
	case v.envelope:
		return structString(dst, col, ev, expanded)
	case expanded != nil:
		return expanded.javaString(dst), nil
	case ev.Payload == nil:
		return nil, nil // StringConverter writes a null value as null
	case ev.PayloadBinary:
		return byteBuffer(dst, len(ev.Payload)), nil
	}
	return javaString(dst, col, ev.Payload)
}

func (v *stringValue) node(_ context.Context, _ string, n *jsonNode, s *connectSchema) ([]byte, error) {
	return stringNode(n, s), nil
}

// jsonValue is JsonConverter's value, with or without its schema.
type jsonValue struct {
	payload
	withSchema bool
	prefix     string
}

func (v *jsonValue) node(_ context.Context, _ string, n *jsonNode, s *connectSchema) ([]byte, error) {
	return jsonNodeOf(n, s, v.withSchema), nil
}

func (v *jsonValue) encode(_ context.Context, dst []byte, _ string, ev *decode.Event) ([]byte, error) {
	if ev.Tombstone {
		return nil, nil
	}
	start := len(dst)
	col, expanded, err := v.read(ev)
	if errors.Is(err, errNoSchema) && !v.envelope {
		// The payload stays a string with a null schema.
		if v.withSchema {
			dst = append(dst, `{"schema":null,"payload":`...)
		}
		dst = jsonString(dst, ev.Payload)
		if v.withSchema {
			dst = append(dst, '}')
		}
		return dst, nil
	}
	if err != nil {
		return nil, err
	}
	if v.withSchema {
		if dst, err = v.schema(append(dst, `{"schema":`...), col, ev, expanded); err != nil {
			return nil, err
		}
		dst = append(dst, `,"payload":`...)
	}
	switch {
	case !v.envelope && expanded != nil:
		dst = expanded.json(dst)
	case !v.envelope:
		dst, err = payloadJSON(dst, col, ev)
	default:
		dst, err = v.envelopeJSON(dst, col, ev, expanded)
	}
	if err == nil && v.withSchema {
		dst = append(dst, '}')
	}
	if err == nil {
		err = checkNesting(expanded, dst[start:])
	}
	return dst, err
}

// schema appends the value's schema: the payload column's, the expanded
// payload's, or the envelope struct's, named after the after-struct's
// schema with the route-by value spliced in
// (EventRouterDelegate.getSchemaName).
func (v *jsonValue) schema(dst []byte, col *decode.Column, ev *decode.Event, expanded *jsonNode) ([]byte, error) {
	switch {
	case !v.envelope && expanded != nil:
		return expanded.schema.json(dst, ""), nil
	case !v.envelope:
		return jsonSchema(dst, col, ""), nil
	}
	payloadSchema := payloadSchema(col, expanded)
	cache, key := v.envelopes.byPayload, string(payloadSchema)
	if v.outbox.Columns.SchemaVersion != "" {
		cache, key = v.envelopes.byVersion, string(ev.SchemaVersion)
	}
	if s, ok := cache[key]; ok {
		return append(dst, s...), nil
	}
	start := len(dst)
	dst = append(dst, `{"type":"struct","fields":[`...)
	// The payload's schema with "field" last.
	dst = append(append(dst, payloadSchema[:len(payloadSchema)-1]...), `,"field":"payload"}`...)
	for _, f := range ev.Fields {
		if f.Placement == decode.PlaceEnvelope {
			dst = jsonSchema(append(dst, ','), f.Column, f.Name)
		}
	}
	name := v.prefix + "." + ev.Table + "." + string(ev.AggregateType) + ".Value"
	dst = jsonString(append(dst, `],"optional":false,"name":`...), []byte(name))
	if ev.SchemaVersion != nil && v.outbox.Columns.SchemaVersion != "" {
		dst = append(append(dst, `,"version":`...), ev.SchemaVersion...)
	}
	dst = append(dst, '}')
	v.envelopes.put(cache, key, dst[start:])
	return dst, nil
}

// payloadSchema is the payload's Connect schema in JsonConverter's JSON:
// the expanded payload's, or its column's.
func payloadSchema(col *decode.Column, expanded *jsonNode) []byte {
	if expanded != nil {
		return expanded.schema.json(nil, "")
	}
	return jsonSchema(nil, col, "")
}

// envelopeSchemas are Debezium's outbox router's caches of envelope value
// schemas, which one router (one connector) keeps across its tables from
// the start of its task: by the payload's schema, or, with
// table.field.event.schema.version, by the version alone. The first
// event's schema is every later one's, so that an envelope's schema name
// carries the route-by value, and table, of the first event whose payload
// has the same schema. walstream keeps them per stream, from its start,
// and uses them from the producer's goroutine only.
type envelopeSchemas struct {
	byPayload, byVersion map[string][]byte
	// payloads are the payload schemas (as JsonConverter writes them) of
	// the envelopes in byVersion, by version.
	payloads map[string]string
}

func newEnvelopeSchemas() *envelopeSchemas {
	return &envelopeSchemas{byPayload: make(map[string][]byte), byVersion: make(map[string][]byte), payloads: make(map[string]string)}
}

// VersionSchemaError is an event whose payload schema differs from that of
// the first event of its table.field.event.schema.version: Debezium's
// router made the version's envelope schema for that first event and
// keeps it, so Struct.put refuses this payload ("Struct schemas do not
// match", or a string where a struct was, and the reverse), and Debezium
// stops. Under table.expand.json.payload the payload's schema is inferred
// from each payload, so two payloads of one version that differ in shape
// meet it.
type VersionSchemaError struct {
	Version       string // the version column's value, "" for NULL
	First, Schema string // payload schemas, as JsonConverter writes them
}

func (e *VersionSchemaError) Error() string {
	version := e.Version
	if version == "" {
		version = "NULL"
	}
	return fmt.Sprintf("the payload's schema %s differs from %s, that of the first event of schema version %s since the start: "+
		"Debezium's router keeps the envelope schema of a version's first event, refuses this payload and stops here", e.Schema, e.First, version)
}

// versionPayload records the payload schema of the first event of a schema
// version, and refuses an event of the same version with another.
func (c *envelopeSchemas) versionPayload(version, payload []byte) error {
	first, ok := c.payloads[string(version)]
	if !ok {
		if len(c.payloads) >= maxEnvelopeSchemas {
			clear(c.payloads)
		}
		c.payloads[string(version)] = string(payload)
		return nil
	}
	if first != string(payload) {
		return &VersionSchemaError{Version: string(version), First: first, Schema: string(payload)}
	}
	return nil
}

// maxEnvelopeSchemas bounds each cache, as Debezium bounds its own (to
// 10,000 payload schemas, evicting the least recently used).
const maxEnvelopeSchemas = 10000

func (c *envelopeSchemas) put(m map[string][]byte, key string, schema []byte) {
	if len(m) >= maxEnvelopeSchemas {
		clear(m)
	}
	m[key] = append([]byte(nil), schema...)
}

// envelopeJSON appends the envelope struct: payload, then the envelope
// fields in their configured order, null for NULL.
func (v *jsonValue) envelopeJSON(dst []byte, col *decode.Column, ev *decode.Event, expanded *jsonNode) ([]byte, error) {
	dst = append(dst, `{"payload":`...)
	var err error
	if expanded != nil {
		dst = expanded.json(dst)
	} else if dst, err = payloadJSON(dst, col, ev); err != nil {
		return nil, err
	}
	for _, f := range ev.Fields {
		if f.Placement != decode.PlaceEnvelope {
			continue
		}
		dst = append(jsonString(append(dst, ','), []byte(f.Name)), ':')
		if dst, err = connectJSON(dst, f.Column, f.Value); err != nil {
			return nil, fmt.Errorf("encoding envelope field %s: %w", f.Name, err)
		}
	}
	return append(dst, '}'), nil
}

// payloadJSON writes the payload column's value under JsonConverter: a
// bytea payload as base64, like any bytes.
func payloadJSON(dst []byte, col *decode.Column, ev *decode.Event) ([]byte, error) {
	if ev.PayloadBinary && ev.Payload != nil {
		return jsonString(dst, []byte(base64.StdEncoding.EncodeToString(ev.Payload))), nil
	}
	return connectJSON(dst, col, ev.Payload)
}

// structString writes the envelope under StringConverter: Kafka Connect's
// Struct.toString, Struct{name=value,...}, which leaves NULL fields out.
func structString(dst []byte, col *decode.Column, ev *decode.Event, expanded *jsonNode) ([]byte, error) {
	dst = append(dst, "Struct{"...)
	first := true
	sep := func() {
		if !first {
			dst = append(dst, ',')
		}
		first = false
	}
	var err error
	switch {
	case expanded != nil:
		sep()
		dst = expanded.javaString(append(dst, "payload="...))
	case ev.Payload != nil && ev.PayloadBinary:
		sep()
		dst = byteBuffer(append(dst, "payload="...), len(ev.Payload))
	case ev.Payload != nil:
		sep()
		if dst, err = javaString(append(dst, "payload="...), col, ev.Payload); err != nil {
			return nil, err
		}
	}
	for _, f := range ev.Fields {
		if f.Placement != decode.PlaceEnvelope || f.Value == nil {
			continue
		}
		sep()
		if dst, err = javaString(append(append(dst, f.Name...), '='), f.Column, f.Value); err != nil {
			return nil, fmt.Errorf("encoding envelope field %s: %w", f.Name, err)
		}
	}
	return append(dst, '}'), nil
}

// connectType is the Kafka Connect schema Debezium's Postgres connector
// gives a column type with its default settings (decimal.handling.mode
// precise, time.precision.mode adaptive): type, and the logical name and
// version where it sets one.
func connectType(col *decode.Column) (typ, name string) {
	switch _, array := col.Elem(); {
	case array:
		return "array", ""
	case col.Enum():
		return "string", "io.debezium.data.Enum"
	case col.VariableScale():
		return "struct", "io.debezium.data.VariableScaleDecimal"
	case col.Type == decode.TypeTime && millisTimestamp(col):
		return "int32", "io.debezium.time.Time"
	case col.Type == decode.TypeTimestamp && millisTimestamp(col):
		return "int64", "io.debezium.time.Timestamp"
	}
	if s, ok := connectTypes[col.Type]; ok {
		return s.typ, s.name
	}
	return "string", ""
}

// typeSchema is the type and logical name of a column type's Connect
// schema.
type typeSchema struct{ typ, name string }

// connectTypes are the Connect schemas of the column types connectType
// does not decide otherwise; any other type is a string.
var connectTypes = map[uint32]typeSchema{
	decode.TypeBool:        {"boolean", ""},
	decode.TypeInt2:        {"int16", ""},
	decode.TypeInt4:        {"int32", ""},
	decode.TypeInt8:        {"int64", ""},
	decode.TypeFloat4:      {"float", ""},
	decode.TypeFloat8:      {"double", ""},
	decode.TypeBytea:       {"bytes", ""},
	decode.TypeNumeric:     {"bytes", "org.apache.kafka.connect.data.Decimal"},
	decode.TypeMoney:       {"bytes", "org.apache.kafka.connect.data.Decimal"},
	decode.TypeUUID:        {"string", "io.debezium.data.Uuid"},
	decode.TypeJSON:        {"string", "io.debezium.data.Json"},
	decode.TypeJSONB:       {"string", "io.debezium.data.Json"},
	decode.TypeXML:         {"string", "io.debezium.data.Xml"},
	decode.TypeDate:        {"int32", "io.debezium.time.Date"},
	decode.TypeTime:        {"int64", "io.debezium.time.MicroTime"},
	decode.TypeTimeTZ:      {"string", "io.debezium.time.ZonedTime"},
	decode.TypeTimestamp:   {"int64", "io.debezium.time.MicroTimestamp"},
	decode.TypeTimestampTZ: {"string", "io.debezium.time.ZonedTimestamp"},
	decode.TypeInterval:    {"int64", "io.debezium.time.MicroDuration"},
}

// millisTimestamp: time.precision.mode=adaptive gives a timestamp(0..3)
// Debezium's Timestamp (milliseconds), any other MicroTimestamp; a
// time(0..3) Time (milliseconds), any other MicroTime.
func millisTimestamp(col *decode.Column) bool { return col.TypMod >= 0 && col.TypMod <= 3 }

// temporal is a date's, time's, timestamp's or interval's Connect value:
// days, milli- or microseconds since the epoch or midnight, the timestamp
// read as UTC; an interval's microseconds.
func temporal(col *decode.Column, text []byte) (int64, error) {
	switch col.Type {
	case decode.TypeDate:
		d, err := time.Parse("2006-01-02", string(text))
		if err != nil {
			return 0, fmt.Errorf("reading date %q: %w", text, err)
		}
		return d.Unix() / 86400, nil
	case decode.TypeTime:
		return microTime(col, text)
	case decode.TypeInterval:
		return microDuration(text)
	}
	t, err := decode.ParseTimestamp(text)
	if err != nil {
		return 0, err
	}
	if millisTimestamp(col) {
		return t.UnixMilli(), nil
	}
	return t.UnixMicro(), nil
}

// variableScaleSchema is the fields and doc of Debezium's
// VariableScaleDecimal struct schema, as asJsonSchema writes them around
// optional, name and version.
const (
	variableScaleFields = `,"fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}]`
	variableScaleDoc    = `,"doc":"Variable scaled decimal"`
)

// jsonSchema appends the column's schema as JsonConverter.asJsonSchema
// writes it: type, then an array's items or a struct's fields, optional,
// name, version, doc, parameters, default, in that order, then field (the
// struct field's name) when field is set.
func jsonSchema(dst []byte, col *decode.Column, field string) []byte {
	typ, name := connectType(col)
	dst = append(append(append(dst, `{"type":"`...), typ...), '"')
	if elem, ok := col.Elem(); ok {
		dst = jsonSchema(append(dst, `,"items":`...), &elem, "")
	}
	if col.VariableScale() {
		dst = append(dst, variableScaleFields...)
	}
	dst = strconv.AppendBool(append(dst, `,"optional":`...), !col.NotNull)
	if name != "" {
		dst = jsonString(append(dst, `,"name":`...), []byte(name))
		dst = append(dst, `,"version":1`...)
	}
	if col.VariableScale() {
		dst = append(dst, variableScaleDoc...)
	}
	switch p, s, ok := col.Numeric(); {
	case ok:
		dst = fmt.Appendf(dst, `,"parameters":{"scale":"%d","connect.decimal.precision":"%d"}`, s, p)
	case col.Type == decode.TypeMoney:
		dst = fmt.Appendf(dst, `,"parameters":{"scale":"%d"}`, moneyScale)
	case col.Enum():
		dst = jsonString(append(dst, `,"parameters":{"allowed":`...), []byte(col.Labels))
		dst = append(dst, '}')
	}
	if col.Default != nil {
		if d, err := connectJSON(append(dst, `,"default":`...), col, col.Default); err == nil {
			dst = d
		}
	}
	if field != "" {
		dst = jsonString(append(dst, `,"field":`...), []byte(field))
	}
	return append(dst, '}')
}

// pgBool reads a boolean in Postgres's text form, which pgoutput sends as
// t or f.
func pgBool(text []byte) (bool, error) {
	switch string(text) {
	case "t":
		return true, nil
	case "f":
		return false, nil
	}
	return false, fmt.Errorf("reading %q as a boolean: want t or f", text)
}

// connectJSON appends a column's value, in Postgres's text form, as
// JsonConverter.convertToJson writes the Connect value Debezium makes of
// it; nil is null.
func connectJSON(dst []byte, col *decode.Column, text []byte) ([]byte, error) {
	if text == nil {
		return append(dst, "null"...), nil
	}
	if _, ok := col.Elem(); ok {
		return elementList(dst, col, text, "[", ",", "]", connectJSON)
	}
	switch col.Type {
	case decode.TypeBool:
		b, err := pgBool(text)
		if err != nil {
			return nil, err
		}
		return strconv.AppendBool(dst, b), nil
	case decode.TypeInt2, decode.TypeInt4, decode.TypeInt8:
		return append(dst, text...), nil
	case decode.TypeFloat4, decode.TypeFloat8:
		f, bits, err := float(col, text)
		if err != nil {
			return nil, err
		}
		if f != f || f > 1.7976931348623157e308 || f < -1.7976931348623157e308 {
			// Jackson quotes NaN and infinities (QUOTE_NON_NUMERIC_NUMBERS).
			return append(javaDouble(append(dst, '"'), f, bits), '"'), nil
		}
		return javaDouble(dst, f, bits), nil
	case decode.TypeNumeric, decode.TypeMoney:
		if col.VariableScale() {
			return variableScaleJSON(dst, text)
		}
		u, err := decimalOf(col, text)
		if err != nil {
			return nil, err
		}
		// decimal.format=BASE64: the unscaled value's two's complement.
		return jsonString(dst, []byte(base64.StdEncoding.EncodeToString(twosComplement(u)))), nil
	case decode.TypeDate, decode.TypeTimestamp, decode.TypeTime, decode.TypeInterval:
		n, err := temporal(col, text)
		if err != nil {
			return nil, err
		}
		return strconv.AppendInt(dst, n, 10), nil
	case decode.TypeBytea:
		b, err := bytea(text)
		if err != nil {
			return nil, err
		}
		return jsonString(dst, []byte(base64.StdEncoding.EncodeToString(b))), nil
	case decode.TypeTimeTZ, decode.TypeTimestampTZ:
		s, err := javaString(nil, col, text)
		if err != nil {
			return nil, err
		}
		return jsonString(dst, s), nil
	}
	return jsonString(dst, text), nil
}

// decimalOf is a numeric(p,s) or money value's unscaled integer at the
// Connect Decimal's scale.
func decimalOf(col *decode.Column, text []byte) (*big.Int, error) {
	if col.Type == decode.TypeMoney {
		return money(text)
	}
	_, scale, _ := col.Numeric()
	u, err := decimal(text, scale)
	if err != nil {
		return nil, fmt.Errorf("numeric %q %w", text, err)
	}
	return u, nil
}

// javaString appends a column's value as StringConverter writes it: the
// Connect value's toString; nothing for NULL.
func javaString(dst []byte, col *decode.Column, text []byte) ([]byte, error) {
	if text == nil {
		return dst, nil
	}
	if _, ok := col.Elem(); ok { // List.toString
		return elementList(dst, col, text, "[", ", ", "]", javaString)
	}
	switch col.Type {
	case decode.TypeBool:
		b, err := pgBool(text)
		if err != nil {
			return nil, err
		}
		return strconv.AppendBool(dst, b), nil
	case decode.TypeFloat4, decode.TypeFloat8:
		f, bits, err := float(col, text)
		if err != nil {
			return nil, err
		}
		return javaDouble(dst, f, bits), nil
	case decode.TypeNumeric, decode.TypeMoney:
		if col.VariableScale() {
			// Struct.toString of a VariableScaleDecimal prints its bytes
			// as a Java array's identity (see docs/debezium.md, Known
			// differences): walstream writes them in base64.
			u, scale, err := variableScale(text)
			if err != nil {
				return nil, err
			}
			dst = strconv.AppendInt(append(dst, "Struct{scale="...), int64(scale), 10)
			dst = base64.StdEncoding.AppendEncode(append(dst, ",value="...), twosComplement(u))
			return append(dst, '}'), nil
		}
		u, err := decimalOf(col, text)
		if err != nil {
			return nil, err
		}
		scale := moneyScale
		if col.Type == decode.TypeNumeric {
			_, scale, _ = col.Numeric()
		}
		return javaBigDecimal(dst, u, scale), nil
	case decode.TypeDate, decode.TypeTimestamp, decode.TypeTime, decode.TypeInterval:
		n, err := temporal(col, text)
		if err != nil {
			return nil, err
		}
		return strconv.AppendInt(dst, n, 10), nil
	case decode.TypeTimeTZ:
		s, err := zonedTime(text)
		return append(dst, s...), err
	case decode.TypeTimestampTZ:
		s, err := zonedTimestamp(col, text)
		return append(dst, s...), err
	case decode.TypeBytea:
		b, err := bytea(text)
		if err != nil {
			return nil, err
		}
		return byteBuffer(dst, len(b)), nil
	}
	if dst == nil {
		return text, nil // the record aliases the event's bytes, which outlive it
	}
	return append(dst, text...), nil
}

func float(col *decode.Column, text []byte) (float64, int, error) {
	bits := 64
	if col.Type == decode.TypeFloat4 {
		bits = 32
	}
	f, err := strconv.ParseFloat(string(text), bits)
	if err != nil {
		return 0, 0, fmt.Errorf("reading %q as a float: %w", text, err)
	}
	return f, bits, nil
}
