package format

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/walstream/walstream/decode"
)

// Avro as Kafka Connect's Avro converters write it behind Debezium's
// outbox router (Apicurio's io.apicurio.registry.utils.converter.AvroConverter
// and Confluent's io.confluent.connect.avro.AvroConverter share AvroData):
// the Connect schema Debezium gives a column becomes an Avro schema whose
// text, key order and connect.* properties included, is what the converter
// registers, so that walstream and the converter share schema ids; the
// record is the Confluent wire format, magic byte 0, the 4-byte id and the
// Avro binary body. The schema texts and bodies here were taken from
// AvroData of apicurio-registry-utils-converter 2.6.13.Final
// (avro_test.go holds them, and reads each body back with hamba/avro).
//
// The body is written from the column's Postgres text straight into the
// record, as the JSON encoders do: no Avro library holds the values first.

// avroScope is what a schema being written has defined so far: Avro
// writes a named type's later uses by its full name. Of Debezium's column
// schemas, only a numeric without precision is a named type.
type avroScope struct{ variableScale bool }

// variableScaleRecord is Debezium's VariableScaleDecimal struct as AvroData
// writes it where it is first defined, and its name for later uses.
const (
	variableScaleRecord = `{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.doc":"Variable scaled decimal","connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}`
	variableScaleName   = `"io.debezium.data.VariableScaleDecimal"`
)

// avroType appends the Avro schema AvroData makes of a column's Connect
// schema, not optional: the type, then the properties in the order
// AvroData adds them (a decimal's scale and precision, connect.version,
// connect.parameters, connect.default, connect.name, connect.type of an
// int16, the logical type). A type without properties is its bare name; an
// array's items are optional.
func avroType(dst []byte, col *decode.Column, scope *avroScope) ([]byte, error) {
	typ, name := connectType(col)
	avro := typ
	switch typ {
	case "int16", "int32":
		avro = "int"
	case "int64":
		avro = "long"
	case "struct": // VariableScaleDecimal, which has no default
		if scope.variableScale {
			return append(dst, variableScaleName...), nil
		}
		scope.variableScale = true
		return append(dst, variableScaleRecord...), nil
	case "array":
		elem, _ := col.Elem()
		dst, err := avroColumn(append(dst, `{"type":"array","items":`...), &elem, scope)
		if err == nil && col.Default != nil {
			dst, err = avroDefault(append(dst, `,"connect.default":`...), col)
		}
		return append(dst, '}'), err
	}
	precision, scale, decimal := col.Numeric()
	if col.Type == decode.TypeMoney {
		// AvroData's precision when the Decimal has none.
		precision, scale, decimal = 64, moneyScale, true
	}
	if name == "" && col.Default == nil && typ != "int16" {
		return append(append(append(dst, '"'), avro...), '"'), nil
	}
	dst = append(append(append(dst, `{"type":"`...), avro...), '"')
	if decimal {
		dst = fmt.Appendf(dst, `,"scale":%d,"precision":%d`, scale, precision)
	}
	if name != "" {
		dst = append(dst, `,"connect.version":1`...)
	}
	switch {
	case col.Type == decode.TypeMoney:
		dst = fmt.Appendf(dst, `,"connect.parameters":{"scale":"%d"}`, scale)
	case decimal:
		dst = fmt.Appendf(dst, `,"connect.parameters":{"scale":"%d","connect.decimal.precision":"%d"}`, scale, precision)
	case col.Enum():
		dst = append(avroSchemaString(append(dst, `,"connect.parameters":{"allowed":`...), []byte(col.Labels)), '}')
	}
	if col.Default != nil {
		var err error
		if dst, err = avroDefault(append(dst, `,"connect.default":`...), col); err != nil {
			return nil, err
		}
	}
	if name != "" {
		dst = avroSchemaString(append(dst, `,"connect.name":`...), []byte(name))
	}
	if typ == "int16" {
		dst = append(dst, `,"connect.type":"int16"`...)
	}
	if decimal {
		dst = append(dst, `,"logicalType":"decimal"`...)
	}
	return append(dst, '}'), nil
}

// avroColumn appends a column's schema as a whole key or value, or a
// field's type: an optional column is a union with null, null first
// unless the column has a default, whose type then comes first.
func avroColumn(dst []byte, col *decode.Column, scope *avroScope) ([]byte, error) {
	if col.NotNull {
		return avroType(dst, col, scope)
	}
	if col.Default != nil {
		dst, err := avroType(append(dst, '['), col, scope)
		return append(dst, `,"null"]`...), err
	}
	dst, err := avroType(append(dst, `["null",`...), col, scope)
	return append(dst, ']'), err
}

// avroField appends a record field of a column's schema, with the default
// an Avro reader fills in: null for an optional column, the column's
// default where it has one.
func avroField(dst []byte, name string, col *decode.Column, scope *avroScope) ([]byte, error) {
	if err := avroName(name); err != nil {
		return nil, err
	}
	dst = append(avroSchemaString(append(dst, `{"name":`...), []byte(name)), `,"type":`...)
	dst, err := avroColumn(dst, col, scope)
	switch {
	case err != nil:
		return nil, err
	case col.Default != nil:
		dst, err = avroDefault(append(dst, `,"default":`...), col)
	case !col.NotNull:
		dst = append(dst, `,"default":null`...)
	}
	return append(dst, '}'), err
}

// avroDefault appends a column's default as AvroData writes a Connect
// default in JSON: bytes and decimals as a string of one ISO-8859-1
// character per byte, everything else as JsonConverter writes the value,
// but for the characters outside the Basic Multilingual Plane, which the
// schema's text keeps whole (avroSchemaString).
func avroDefault(dst []byte, col *decode.Column) ([]byte, error) {
	var b []byte
	switch col.Type {
	case decode.TypeNumeric, decode.TypeMoney:
		u, err := decimalOf(col, col.Default)
		if err != nil {
			return nil, fmt.Errorf("default of column %s: %w", col.Name, err)
		}
		b = twosComplement(u)
	case decode.TypeBytea:
		var err error
		if b, err = hex.DecodeString(strings.TrimPrefix(string(col.Default), `\x`)); err != nil {
			return nil, fmt.Errorf("reading default %q of bytea column %s: %w", col.Default, col.Name, err)
		}
	default:
		start := len(dst)
		dst, err := connectJSON(dst, col, col.Default)
		if err != nil {
			return nil, err
		}
		return wholePairs(dst, start), nil
	}
	latin1 := make([]byte, 0, 2*len(b))
	for _, c := range b {
		latin1 = utf8.AppendRune(latin1, rune(c))
	}
	return avroSchemaString(dst, latin1), nil
}

// avroName applies Avro's rule for names (Java's NameValidator.UTF_VALIDATOR):
// a letter or underscore, then letters, digits and underscores. The
// converter throws on any other name, and Debezium stops.
func avroName(name string) error {
	for i, r := range name {
		if r == '_' || unicode.IsLetter(r) || i > 0 && unicode.IsDigit(r) {
			continue
		}
		if i == 0 {
			return fmt.Errorf("%q is not an Avro name (Illegal initial character): Debezium's Avro converter stops at it", name)
		}
		return fmt.Errorf("%q is not an Avro name (Illegal character): Debezium's Avro converter stops at it", name)
	}
	if name == "" {
		return errors.New("an empty field name is not an Avro name: Debezium's Avro converter stops at it")
	}
	return nil
}

// avroRecordName splits a Connect struct name at its last dot into Avro's
// namespace and name, checking the name.
func avroRecordName(full string) (space, name string, err error) {
	name = full
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		space, name = full[:i], full[i+1:]
	}
	return space, name, avroName(name)
}

// appendRecordName writes a record's name and, as Avro's Schema.toString
// does, its namespace only where it differs from the enclosing one.
func appendRecordName(dst []byte, space, name, enclosing string) []byte {
	dst = avroSchemaString(append(dst, `{"type":"record","name":`...), []byte(name))
	if space != enclosing {
		dst = avroSchemaString(append(dst, `,"namespace":`...), []byte(space))
	}
	return dst
}

// avroSchema appends an inferred schema of an expanded payload (every
// part optional, as JsonSchemaData infers it) as a field's type or array
// items: a union with null. enclosing is the namespace the schema sits in.
func (s *connectSchema) avroOptional(dst []byte, enclosing string) ([]byte, error) {
	dst, err := s.avro(append(dst, `["null",`...), enclosing)
	return append(dst, ']'), err
}

// avro appends the inferred schema itself: a record named after its path
// (payload.customer: record customer in namespace payload), an array, or a
// primitive.
func (s *connectSchema) avro(dst []byte, enclosing string) ([]byte, error) {
	var err error
	switch s.typ {
	case "struct":
		space, name, err := avroRecordName(s.name)
		if err != nil {
			return nil, err
		}
		dst = append(appendRecordName(dst, space, name, enclosing), `,"fields":[`...)
		for i, f := range s.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			if err := avroName(f.name); err != nil {
				return nil, err
			}
			dst = append(avroSchemaString(append(dst, `{"name":`...), []byte(f.name)), `,"type":`...)
			if dst, err = f.schema.avroOptional(dst, space); err != nil {
				return nil, err
			}
			dst = append(dst, `,"default":null}`...)
		}
		return append(avroSchemaString(append(dst, `],"connect.name":`...), []byte(s.name)), '}'), nil
	case "array":
		dst, err = s.items.avroOptional(append(dst, `{"type":"array","items":`...), enclosing)
		return append(dst, '}'), err
	case "int32":
		return append(dst, `"int"`...), nil
	case "int64":
		return append(dst, `"long"`...), nil
	}
	return append(append(append(dst, '"'), s.typ...), '"'), nil // boolean, double, string, bytes
}

// Avro's binary encoding: ints and longs as zig-zag varints (which Go's
// binary.AppendVarint writes), floats and doubles little-endian, bytes and
// strings with their length first, a union as its branch's index and the
// branch's value.
func appendAvroLong(dst []byte, n int64) []byte { return binary.AppendVarint(dst, n) }

func appendAvroBytes(dst, b []byte) []byte {
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

// Union branches of an optional column: null first, unless a default puts
// the column's type first.
const (
	branch0 = 0x00
	branch1 = 0x02
)

// avroColumnValue appends a column's value under avroColumn's schema; text
// is its Postgres text form, or its bytes for bytea, nil for NULL.
func avroColumnValue(dst []byte, col *decode.Column, text []byte) ([]byte, error) {
	if !col.NotNull {
		switch {
		case text == nil && col.Default != nil:
			return append(dst, branch1), nil
		case text == nil:
			return append(dst, branch0), nil
		case col.Default != nil:
			dst = append(dst, branch0)
		default:
			dst = append(dst, branch1)
		}
	} else if text == nil {
		return nil, fmt.Errorf("column %s is NOT NULL in the catalog but NULL in the row", col.Name)
	}
	return avroDatum(dst, col, text)
}

// Java's Float.NaN and Double.NaN, the NaN Debezium reads and Avro's
// writer writes bit for bit; Go's math.NaN has another payload.
const (
	javaFloatNaN  = 0x7fc00000
	javaDoubleNaN = 0x7ff8000000000000
)

// avroDatum appends the Connect value Debezium makes of a column's text,
// as AvroData writes it.
func avroDatum(dst []byte, col *decode.Column, text []byte) ([]byte, error) {
	if elem, ok := col.Elem(); ok {
		elems, err := arrayElements(text)
		if err != nil {
			return nil, err
		}
		if len(elems) > 0 { // one block of every element, then the empty block
			dst = appendAvroLong(dst, int64(len(elems)))
			for _, e := range elems {
				if dst, err = avroColumnValue(dst, &elem, e); err != nil {
					return nil, err
				}
			}
		}
		return append(dst, 0), nil
	}
	switch col.Type {
	case decode.TypeBool:
		b, err := pgBool(text)
		switch {
		case err != nil:
			return nil, err
		case b:
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case decode.TypeInt2, decode.TypeInt4, decode.TypeInt8:
		n, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("reading %q as an integer: %w", text, err)
		}
		return appendAvroLong(dst, n), nil
	case decode.TypeFloat4:
		f, _, err := float(col, text)
		if err != nil {
			return nil, err
		}
		bits := math.Float32bits(float32(f))
		if f != f {
			bits = javaFloatNaN
		}
		return binary.LittleEndian.AppendUint32(dst, bits), nil
	case decode.TypeFloat8:
		f, _, err := float(col, text)
		if err != nil {
			return nil, err
		}
		bits := math.Float64bits(f)
		if f != f {
			bits = javaDoubleNaN
		}
		return binary.LittleEndian.AppendUint64(dst, bits), nil
	case decode.TypeNumeric, decode.TypeMoney:
		if col.VariableScale() { // the record's scale, then value
			u, scale, err := variableScale(text)
			if err != nil {
				return nil, err
			}
			return appendAvroBytes(appendAvroLong(dst, int64(scale)), twosComplement(u)), nil
		}
		u, err := decimalOf(col, text)
		if err != nil {
			return nil, err
		}
		return appendAvroBytes(dst, twosComplement(u)), nil
	case decode.TypeDate, decode.TypeTimestamp, decode.TypeTime, decode.TypeInterval:
		n, err := temporal(col, text)
		if err != nil {
			return nil, err
		}
		return appendAvroLong(dst, n), nil
	case decode.TypeBytea:
		b, err := bytea(text)
		if err != nil {
			return nil, err
		}
		return appendAvroBytes(dst, b), nil
	}
	// A string: the text, or the zoned string of a timetz or timestamptz.
	s, err := javaString(nil, col, text)
	if err != nil {
		return nil, err
	}
	return appendAvroBytes(dst, s), nil
}

// avro appends the expanded payload's record body: each field null or
// its value, in the schema's order.
func (n *jsonNode) avro(dst []byte, s *connectSchema) []byte {
	switch s.typ {
	case "struct":
		for _, f := range s.fields {
			v := n.member(f.name)
			if v == nil || v.kind == 'n' {
				dst = append(dst, branch0)
				continue
			}
			dst = v.avro(append(dst, branch1), f.schema)
		}
		return dst
	case "array":
		if len(n.items) > 0 {
			dst = appendAvroLong(dst, int64(len(n.items)))
			for _, it := range n.items {
				if it.kind == 'n' {
					dst = append(dst, branch0)
					continue
				}
				dst = it.avro(append(dst, branch1), s.items)
			}
		}
		return append(dst, 0) // the end of the blocks
	case "int32", "int64":
		i, _ := strconv.ParseInt(n.text, 10, 64) // number checked it
		return appendAvroLong(dst, i)
	case "double":
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(n.num))
	case "boolean":
		if n.text == "true" {
			return append(dst, 1)
		}
		return append(dst, 0)
	}
	return appendAvroBytes(dst, []byte(n.text)) // string; bytes are only ever null
}

// avroKey writes the key: the key column's value under the key column's
// schema (EventRouterDelegate.defineRecordKeySchema).
type avroKey struct{ schemas *schemaIDs }

func (k *avroKey) encode(ctx context.Context, dst []byte, topic string, ev *decode.Event) ([]byte, error) {
	if ev.AggregateID == nil {
		return nil, nil // AvroConverter writes a null key as no key
	}
	col := keyColumn(ev)
	text, err := avroColumn(k.schemas.scratch(), col, &avroScope{})
	if err != nil {
		return nil, err
	}
	if dst == nil {
		dst = make([]byte, 0, 5+binary.MaxVarintLen64+1+len(ev.AggregateID))
	}
	if dst, err = k.schemas.header(ctx, dst, topic, text); err != nil {
		return nil, err
	}
	return avroColumnValue(dst, col, ev.AggregateID)
}

func (k *avroKey) node(ctx context.Context, topic string, n *jsonNode, s *connectSchema) ([]byte, error) {
	return avroNode(ctx, k.schemas, topic, n, s)
}

// avroNode writes a logical message's field as the converter writes a
// value of the decoded struct: a struct as its record, and any other value
// under its optional schema, a union with null (the serializer takes a
// record's own schema, and a container's whole); nothing for null.
func avroNode(ctx context.Context, ids *schemaIDs, topic string, n *jsonNode, s *connectSchema) ([]byte, error) {
	if null(n) {
		return nil, nil
	}
	text, err := ids.scratch(), error(nil)
	if s.typ == "struct" {
		text, err = s.avro(text, "")
	} else {
		text, err = s.avroOptional(text, "")
	}
	if err != nil {
		return nil, err
	}
	dst, err := ids.header(ctx, nil, topic, text)
	if err != nil {
		return nil, err
	}
	if s.typ != "struct" {
		dst = append(dst, branch1)
	}
	return n.avro(dst, s), nil
}

// avroValue writes the value: the payload under its column's schema, the
// expanded payload's record, or the envelope record of payload and
// envelope fields, named as jsonValue names it.
type avroValue struct {
	payload
	schemas   *schemaIDs
	prefix    string
	name, key []byte // scratch; the producer's goroutine owns them
}

func (v *avroValue) node(ctx context.Context, topic string, n *jsonNode, s *connectSchema) ([]byte, error) {
	return avroNode(ctx, v.schemas, topic, n, s)
}

func (v *avroValue) encode(ctx context.Context, dst []byte, topic string, ev *decode.Event) ([]byte, error) {
	if ev.Tombstone || !v.envelope && ev.Payload == nil {
		return nil, nil // AvroConverter writes a null value as no value
	}
	col, expanded, err := v.read(ev)
	if errors.Is(err, errNoSchema) && !v.envelope {
		return v.anything(ctx, dst, topic, ev.Payload)
	}
	if err != nil {
		// The inferred schema does not hold the payload, which stays a
		// string: AvroData refuses it.
		return nil, err
	}
	text := v.schemas.scratch()
	switch {
	case v.envelope:
		text, err = v.cachedEnvelope(text, col, ev, expanded)
	case expanded != nil:
		text, err = expanded.schema.avro(text, "")
	default:
		text, err = avroColumn(text, col, &avroScope{})
	}
	if err == nil {
		err = checkNesting(expanded, text)
	}
	if err != nil {
		return nil, err
	}
	if dst == nil {
		// One allocation for the record's value: the header, the payload
		// and room for a few fields.
		dst = make([]byte, 0, 5+binary.MaxVarintLen64+len(ev.Payload)+64)
	}
	if dst, err = v.schemas.header(ctx, dst, topic, text); err != nil {
		return nil, err
	}
	switch {
	case v.envelope:
		return v.envelopeBody(dst, col, ev, expanded)
	case expanded != nil:
		return expanded.avro(dst, expanded.schema), nil
	}
	return avroPayload(dst, col, ev)
}

// anythingSchema is AvroData's schema of a value that has no Connect
// schema, as the converter registers it: a record of one optional field
// per type.
const anythingSchema = `{"type":"record","name":"Anything","namespace":"io.confluent.connect.avro","fields":[` +
	`{"name":"boolean","type":["null","boolean"],"default":null},{"name":"bytes","type":["null","bytes"],"default":null},` +
	`{"name":"double","type":["null","double"],"default":null},{"name":"float","type":["null","float"],"default":null},` +
	`{"name":"int","type":["null","int"],"default":null},{"name":"long","type":["null","long"],"default":null},` +
	`{"name":"string","type":["null","string"],"default":null},` +
	`{"name":"array","type":["null",{"type":"array","items":"Anything"}],"default":null},` +
	`{"name":"map","type":["null",{"type":"array","items":{"type":"record","name":"MapEntry","fields":[{"name":"key","type":"Anything"},{"name":"value","type":"Anything"}]}}],"default":null}]}`

// anything writes a payload the router left a string with no schema (a
// top-level [] it did not expand) as AvroData writes a schemaless string:
// the Anything record with its string field set, every other null.
func (v *avroValue) anything(ctx context.Context, dst []byte, topic string, payload []byte) ([]byte, error) {
	dst, err := v.schemas.header(ctx, dst, topic, append(v.schemas.scratch(), anythingSchema...))
	if err != nil {
		return nil, err
	}
	dst = append(dst, branch0, branch0, branch0, branch0, branch0, branch0, branch1) // boolean to long null, string set
	return append(appendAvroBytes(dst, payload), branch0, branch0), nil              // array, map null
}

// cachedEnvelope appends the envelope record's schema as Debezium's router
// has it: the first one made for the same payload schema (or schema
// version) since the start, whatever this event's route-by value.
func (v *avroValue) cachedEnvelope(dst []byte, col *decode.Column, ev *decode.Event, expanded *jsonNode) ([]byte, error) {
	cache := v.envelopes.byPayload
	if expanded != nil {
		v.key = expanded.schema.json(v.key[:0], "")
	} else {
		v.key = jsonSchema(v.key[:0], col, "")
	}
	if v.outbox.Columns.SchemaVersion != "" {
		cache, v.key = v.envelopes.byVersion, append(v.key[:0], ev.SchemaVersion...)
	}
	if s, ok := cache[string(v.key)]; ok {
		return append(dst, s...), nil
	}
	start := len(dst)
	dst, err := v.envelopeSchema(dst, col, ev, expanded)
	if err != nil {
		return nil, err
	}
	v.envelopes.put(cache, string(v.key), dst[start:])
	return dst, nil
}

// envelopeSchema appends the envelope record: its name from the
// after-struct's schema name with the route-by value spliced in, field
// payload, then each envelope field in its configured order; the schema
// version, when the event has one, as connect.version.
func (v *avroValue) envelopeSchema(dst []byte, col *decode.Column, ev *decode.Event, expanded *jsonNode) ([]byte, error) {
	// The name is <prefix>.<schema>.<table>.<route-by value>.Value: the
	// record Value, in the namespace before it.
	v.name = append(append(append(append(append(v.name[:0], v.prefix...), '.'), ev.Table...), '.'), ev.AggregateType...)
	space := v.name
	dst = append(avroSchemaString(append(dst, `{"type":"record","name":"Value","namespace":`...), space), `,"fields":[`...)
	var err error
	var scope avroScope
	if expanded != nil {
		dst = append(dst, `{"name":"payload","type":`...)
		if dst, err = expanded.schema.avroOptional(dst, string(space)); err != nil {
			return nil, err
		}
		dst = append(dst, `,"default":null}`...)
	} else if dst, err = avroField(dst, "payload", col, &scope); err != nil {
		return nil, err
	}
	for _, f := range ev.Fields {
		if f.Placement != decode.PlaceEnvelope {
			continue
		}
		if dst, err = avroField(append(dst, ','), f.Name, f.Column, &scope); err != nil {
			return nil, fmt.Errorf("envelope field %s: %w", f.Name, err)
		}
	}
	dst = append(dst, ']')
	if ev.SchemaVersion != nil {
		dst = append(append(dst, `,"connect.version":`...), ev.SchemaVersion...)
	}
	v.name = append(v.name, ".Value"...)
	return append(avroSchemaString(append(dst, `,"connect.name":`...), v.name), '}'), nil
}

func (v *avroValue) envelopeBody(dst []byte, col *decode.Column, ev *decode.Event, expanded *jsonNode) ([]byte, error) {
	var err error
	switch {
	case expanded != nil:
		dst = expanded.avro(append(dst, branch1), expanded.schema)
	case ev.Payload == nil:
		dst = append(dst, branch0) // a NULL payload column: the schema is optional
	default:
		if dst, err = avroPayload(dst, col, ev); err != nil {
			return nil, err
		}
	}
	for _, f := range ev.Fields {
		if f.Placement != decode.PlaceEnvelope {
			continue
		}
		if dst, err = avroColumnValue(dst, f.Column, f.Value); err != nil {
			return nil, fmt.Errorf("encoding envelope field %s: %w", f.Name, err)
		}
	}
	return dst, nil
}

// avroPayload appends the payload column's value: a bytea payload's bytes
// as they are, any other as its column's Connect value.
func avroPayload(dst []byte, col *decode.Column, ev *decode.Event) ([]byte, error) {
	if ev.PayloadBinary && ev.Payload != nil {
		if !col.NotNull {
			dst = append(dst, branch1)
			if col.Default != nil {
				dst[len(dst)-1] = branch0
			}
		}
		return appendAvroBytes(dst, ev.Payload), nil
	}
	return avroColumnValue(dst, col, ev.Payload)
}
