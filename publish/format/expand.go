package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/walstream/walstream/decode"
)

// table.expand.json.payload, as Debezium's EventRouterDelegate and
// JsonSchemaData do it: Jackson reads the payload text; a Connect schema is
// inferred from it (JsonSchemaData.toConnectSchema) and a Struct built
// (toConnectData); the converter writes that Struct. So the bytes are not
// the payload's, but the Struct's: numbers as Java writes ints, longs and
// doubles (10.50 is 10.5, 12345678.9 is 1.23456789E7), null fields and
// empty arrays dropped unless table.json.payload.null.behavior and
// table.json.payload.empty.array.behavior keep them.
//
// EventRouterDelegate runs the three steps in one try block that logs
// "JSON expansion failed" and goes on with what the steps had set by then,
// so a payload Debezium does not expand ends one of three ways, each
// found by running Debezium 3.6.1 (compat cases "expand unexpandable ..."):
//
//   - Jackson cannot read it (it does not start with { or [, is not JSON,
//     is nested deeper than 1,000, or has a number of more than 1,000
//     digits), or toConnectSchema throws (an array whose elements differ
//     in JSON type or in number type: [1, 2.50], [1, 3000000000],
//     [1, 123456789012345678901234567890], [{...}, 2]; an array of nulls):
//     the payload stays a string with its column's schema, which every
//     converter writes, in an envelope too. expand returns nil.
//   - toConnectData throws (errExpansion): the schema was inferred but
//     does not hold the values; an integer beyond 64 bits (a BigInteger,
//     whose FLOAT64 field takes no BigDecimal), an array of objects whose
//     fields differ in type, arrays of arrays whose elements do, or a
//     top-level array (no struct). The payload stays a string, but with
//     the inferred schema.
//   - toConnectSchema returns null (errNoSchema): a top-level []. The
//     payload stays a string with no schema.
//
// What each converter does with the last two is the encoders' (see
// errExpansion). None depends on the payloads before: the outcome is the
// payload's own, however many failed before it. What does depend on them
// is an envelope with a schema version (VersionSchemaError).

// connectSchema is an inferred Connect schema; all are optional.
type connectSchema struct {
	typ    string // boolean, int32, int64, double, string, bytes, array, struct
	name   string // a struct's name: the field path, payload.customer
	items  *connectSchema
	fields []connectField
}

type connectField struct {
	name   string
	schema *connectSchema
}

func (s *connectSchema) field(name string) *connectSchema {
	for _, f := range s.fields {
		if f.name == name {
			return f.schema
		}
	}
	return nil
}

// jsonNode is a payload read as Jackson reads it, with its schema attached
// at the top; object members keep their order.
type jsonNode struct {
	kind    byte // '{', '[', 's' string, 'i' int, 'l' long, 'd' double, 'B' BigInteger, 'b' bool, 'n' null
	text    string
	num     float64
	members []member // objects
	items   []*jsonNode
	schema  *connectSchema // the top node's, set by expand
	nesting int            // the top node's: objects and arrays nested, set by expand
}

type member struct {
	key   string
	value *jsonNode
}

var errNotExpandable = errors.New("not expandable")

// Jackson's StreamReadConstraints, which ObjectMapper.readTree applies: a
// payload past them is not read, and stays a string.
const (
	jacksonMaxDepth     = 1000 // objects and arrays nested
	jacksonMaxNumberLen = 1000 // digits of a number: integer, fraction and exponent
)

// Payloads whose expansion Debezium leaves half done (see the top of the
// file). Under StringConverter without an envelope Debezium writes the
// string. Anywhere else it stops: with an envelope Struct.put refuses the
// string (or a null field schema); JsonConverter's convertToJson throws
// "Invalid type for STRUCT" (or ARRAY) on the string; AvroData refuses it.
// One exception: a string with no schema (errNoSchema) JsonConverter
// writes with "schema":null, and AvroConverter as its Anything record.
var (
	errExpansion = errors.New("table.expand.json.payload: Debezium's router does not expand this payload and keeps it a string with the schema it inferred, which does not hold it " +
		"(an integer beyond 64 bits, array elements whose fields differ in type, or a top-level array): only StringConverter writes it without an envelope, and Debezium stops here")
	errNoSchema = errors.New("table.expand.json.payload: Debezium's router infers no schema for a top-level [] and keeps it a string with none, which an envelope cannot hold: Debezium stops here")
)

// expand returns the payload as Debezium expands it; nil when Debezium
// keeps it a string with its column's schema; or errExpansion or
// errNoSchema.
func expand(payload []byte, o *decode.Outbox) (*jsonNode, error) {
	if len(payload) == 0 || payload[0] != '{' && payload[0] != '[' { // parseJsonPayload
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	n, err := readNode(dec, 1) // Jackson's readTree ignores what follows the first value
	if err != nil {
		return nil, nil
	}
	x := expander{nulls: o.ExpandJSONNulls, emptyArrays: o.ExpandJSONEmptyArrays}
	s, err := x.schema(o.Columns.Payload, n)
	switch {
	case err != nil:
		return nil, nil // toConnectSchema threw: the payload stays a string
	case s == nil:
		return nil, errNoSchema
	case s.typ != "struct" || !fits(n, s):
		return nil, errExpansion
	}
	n.schema, n.nesting = s, nesting(n)
	return n, nil
}

func nesting(n *jsonNode) int {
	deepest := 0
	for _, m := range n.members {
		deepest = max(deepest, nesting(m.value))
	}
	for _, it := range n.items {
		deepest = max(deepest, nesting(it))
	}
	if n.kind == '{' || n.kind == '[' {
		return deepest + 1
	}
	return deepest
}

// errTooDeep: what the converter would write of an expanded payload (the
// value's JSON, or the Avro schema's text) nests objects and arrays deeper
// than Jackson writes (StreamWriteConstraints: 1,000), and Debezium stops.
// A payload nested 500 deep meets it under JsonConverter with schemas,
// 1,000 deep in an envelope, 251 deep under AvroConverter.
var errTooDeep = errors.New("table.expand.json.payload: what the converter writes of this payload would nest deeper than Jackson's limit of 1000, and Debezium stops here")

// checkNesting returns errTooDeep when the JSON text written of the
// expanded payload n nests deeper than Jackson writes. Each level of the
// payload adds at most four levels to any text written of it (an Avro
// record in a field's union), so only a payload nested over 200 deep is
// scanned.
func checkNesting(n *jsonNode, text []byte) error {
	if n == nil || n.nesting <= 200 {
		return nil
	}
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	if deepest > jacksonMaxDepth {
		return errTooDeep
	}
	return nil
}

// readNode reads the next value, at nesting depth depth.
func readNode(dec *json.Decoder, depth int) (*jsonNode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth > jacksonMaxDepth {
			return nil, errNotExpandable
		}
		switch t {
		case '{':
			n := &jsonNode{kind: '{'}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := readNode(dec, depth+1)
				if err != nil {
					return nil, err
				}
				key := k.(string)
				replaced := false
				for i := range n.members { // Jackson's ObjectNode: the last duplicate wins, in place
					if n.members[i].key == key {
						n.members[i].value, replaced = v, true
					}
				}
				if !replaced {
					n.members = append(n.members, member{key, v})
				}
			}
			_, err := dec.Token()
			return n, err
		case '[':
			n := &jsonNode{kind: '['}
			for dec.More() {
				v, err := readNode(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			_, err := dec.Token()
			return n, err
		}
	case string:
		return &jsonNode{kind: 's', text: t}, nil
	case bool:
		if t {
			return &jsonNode{kind: 'b', text: "true"}, nil
		}
		return &jsonNode{kind: 'b', text: "false"}, nil
	case nil:
		return &jsonNode{kind: 'n'}, nil
	case json.Number:
		return number(string(t))
	}
	return nil, errNotExpandable
}

// number classifies a JSON number as Jackson does: an integer literal is
// an int when it fits 32 bits, a long when it fits 64, else a BigInteger;
// anything with a fraction or exponent is a double. Jackson refuses a
// number of more than 1,000 digits.
func number(s string) (*jsonNode, error) {
	digits := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			digits++
		}
	}
	if digits > jacksonMaxNumberLen {
		return nil, errNotExpandable
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i >= math.MinInt32 && i <= math.MaxInt32 {
			return &jsonNode{kind: 'i', text: strconv.FormatInt(i, 10)}, nil
		}
		return &jsonNode{kind: 'l', text: strconv.FormatInt(i, 10)}, nil
	}
	if strings.ContainsAny(s, ".eE") {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return &jsonNode{kind: 'd', num: f}, nil
	}
	return &jsonNode{kind: 'B', text: s}, nil
}

type expander struct{ nulls, emptyArrays bool }

// schema is JsonSchemaData.toConnectSchema: nil for a field it drops.
func (x expander) schema(key string, n *jsonNode) (*connectSchema, error) {
	switch n.kind {
	case 's':
		return &connectSchema{typ: "string"}, nil
	case 'b':
		return &connectSchema{typ: "boolean"}, nil
	case 'i':
		return &connectSchema{typ: "int32"}, nil
	case 'l':
		return &connectSchema{typ: "int64"}, nil
	case 'd', 'B':
		// A BigInteger is neither int nor long to toConnectSchema: FLOAT64,
		// a field that toConnectData's BigDecimal does not fit.
		return &connectSchema{typ: "double"}, nil
	case 'n':
		if x.nulls {
			return &connectSchema{typ: "bytes"}, nil
		}
		return nil, nil
	case '[':
		if len(n.items) == 0 {
			if x.emptyArrays {
				return &connectSchema{typ: "array", items: &connectSchema{typ: "string"}}, nil
			}
			return nil, nil
		}
		items, err := x.arrayItems(key, n)
		if err != nil {
			return nil, err
		}
		return &connectSchema{typ: "array", items: items}, nil
	}
	s := &connectSchema{typ: "struct", name: key}
	for _, m := range n.members {
		fieldKey := m.key
		if key != "" {
			fieldKey = key + "." + m.key
		}
		fs, err := x.schema(fieldKey, m.value)
		if err != nil {
			return nil, err
		}
		if fs != nil && s.field(m.key) == nil {
			s.fields = append(s.fields, connectField{m.key, fs})
		}
	}
	return s, nil
}

// arrayItems is toConnectSchemaWithCycles: the first non-null element sets
// the JSON type every other must have, and a number's schema every other
// number's (a double and a BigInteger share FLOAT64); object elements'
// schemas are merged.
func (x expander) arrayItems(key string, n *jsonNode) (*connectSchema, error) {
	var sample *jsonNode
	for _, it := range n.items {
		if it.kind == 'n' {
			continue
		}
		if sample == nil {
			sample = it
		}
		if numberType(it.kind) != numberType(sample.kind) || numberType(it.kind) == "" && it.kind != sample.kind {
			return nil, errors.New("not a homogenous array")
		}
	}
	if sample == nil {
		s, _ := x.schema("", &jsonNode{kind: 'n'})
		if s == nil {
			return nil, errors.New("array of nulls")
		}
		return s, nil
	}
	if sample.kind != '{' {
		s, err := x.schema("", sample)
		if err == nil && s == nil {
			err = errors.New("unrecognized member schema")
		}
		return s, err
	}
	// Debezium merges the distinct element schemas in HashSet order; for
	// elements of one shape that is the shape, otherwise walstream merges in
	// element order (see docs/debezium.md, Known differences).
	var merged *connectSchema
	for _, it := range n.items {
		if it.kind != '{' {
			continue
		}
		s, err := x.schema(key, it)
		if err != nil {
			return nil, err
		}
		if merged == nil {
			merged = s
			continue
		}
		for _, f := range s.fields {
			if old := merged.field(f.name); old == nil {
				merged.fields = append(merged.fields, f)
			} else if old.typ == "bytes" && f.schema.typ != "bytes" {
				for i := range merged.fields {
					if merged.fields[i].name == f.name {
						merged.fields[i].schema = f.schema
					}
				}
			}
		}
	}
	return merged, nil
}

// numberType is the Connect type toConnectSchema gives a number node; ""
// for any other node.
func numberType(k byte) string {
	switch k {
	case 'i':
		return "int32"
	case 'l':
		return "int64"
	case 'd', 'B':
		return "double"
	}
	return ""
}

// fits is Struct.put's validation of the values toConnectData puts: a
// merged array element schema can disagree with an element's value.
func fits(n *jsonNode, s *connectSchema) bool {
	if n.kind == 'n' {
		return true
	}
	switch s.typ {
	case "struct":
		if n.kind != '{' {
			return false
		}
		for _, f := range s.fields {
			if v := n.member(f.name); v != nil && !fits(v, f.schema) {
				return false
			}
		}
		return true
	case "array":
		if n.kind != '[' {
			return false
		}
		for _, it := range n.items {
			if !fits(it, s.items) {
				return false
			}
		}
		return true
	}
	want := map[string]byte{"string": 's', "boolean": 'b', "int32": 'i', "int64": 'l', "double": 'd'}[s.typ]
	return n.kind == want
}

func (n *jsonNode) member(key string) *jsonNode {
	for _, m := range n.members {
		if m.key == key {
			return m.value
		}
	}
	return nil
}

// json appends the Struct as JsonConverter writes it: every schema field in
// schema order, null where the document has none.
func (n *jsonNode) json(dst []byte) []byte { return n.jsonAs(dst, n.schema) }

func (n *jsonNode) jsonAs(dst []byte, s *connectSchema) []byte { return n.render(dst, s, false) }

// render writes the node as JsonConverter does, or, with values, as Kafka
// Connect's Values writes a header: the same but for strings (only \ and
// " escaped) and infinities (not quoted).
func (n *jsonNode) render(dst []byte, s *connectSchema, values bool) []byte {
	if n == nil || n.kind == 'n' {
		return append(dst, "null"...)
	}
	quote := func(dst []byte, s string) []byte {
		if values {
			return appendValuesString(dst, s)
		}
		return jsonString(dst, []byte(s))
	}
	switch s.typ {
	case "struct":
		dst = append(dst, '{')
		for i, f := range s.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(quote(dst, f.name), ':')
			dst = n.member(f.name).render(dst, f.schema, values)
		}
		return append(dst, '}')
	case "array":
		dst = append(dst, '[')
		for i, it := range n.items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = it.render(dst, s.items, values)
		}
		return append(dst, ']')
	case "string":
		return quote(dst, n.text)
	case "double":
		if math.IsInf(n.num, 0) && !values {
			return append(javaDouble(append(dst, '"'), n.num, 64), '"')
		}
		return javaDouble(dst, n.num, 64)
	}
	return append(dst, n.text...)
}

// javaString appends the Struct's toString, as StringConverter writes an
// expanded payload: Struct{name=value,...} without null fields, lists as
// [a, b].
func (n *jsonNode) javaString(dst []byte) []byte { return n.javaStringAs(dst, n.schema) }

func (n *jsonNode) javaStringAs(dst []byte, s *connectSchema) []byte {
	if n == nil || n.kind == 'n' {
		return append(dst, "null"...)
	}
	switch s.typ {
	case "struct":
		dst = append(dst, "Struct{"...)
		first := true
		for _, f := range s.fields {
			v := n.member(f.name)
			if v == nil || v.kind == 'n' {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = v.javaStringAs(append(append(dst, f.name...), '='), f.schema)
		}
		return append(dst, '}')
	case "array":
		dst = append(dst, '[')
		for i, it := range n.items {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = it.javaStringAs(dst, s.items)
		}
		return append(dst, ']')
	case "string":
		return append(dst, n.text...)
	case "double":
		return javaDouble(dst, n.num, 64)
	}
	return append(dst, n.text...)
}

// json appends the schema as JsonConverter.asJsonSchema writes it, with
// field, when set, last.
func (s *connectSchema) json(dst []byte, field string) []byte {
	dst = append(append(append(dst, `{"type":"`...), s.typ...), '"')
	switch s.typ {
	case "struct":
		dst = append(dst, `,"fields":[`...)
		for i, f := range s.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = f.schema.json(dst, f.name)
		}
		dst = append(dst, ']')
	case "array":
		dst = s.items.json(append(dst, `,"items":`...), "")
	}
	dst = append(dst, `,"optional":true`...)
	if s.typ == "struct" && s.name != "" {
		dst = jsonString(append(dst, `,"name":`...), []byte(s.name))
	}
	if field != "" {
		dst = jsonString(append(dst, `,"field":`...), []byte(field))
	}
	return append(dst, '}')
}
