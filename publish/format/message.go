package format

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/walstream/walstream/decode"
)

// A logical message's record, as Debezium writes it with
// DecodeLogicalDecodingMessageContent before the outbox router: the
// decoder makes a Kafka Connect struct of the message's JSON content
// (JsonSchemaData, as for table.expand.json.payload, with null fields
// dropped unless fields.null.include and empty arrays always dropped),
// whose fields the router reads as a row's columns. So a payload object
// is a struct (Struct{x=1} under StringConverter, {"x":1} under
// JsonConverter, its schema named "payload"), a payload string a string
// with a plain optional string schema, and the key has the schema of its
// JSON type, optional. Debezium writes no __debezium.context.* headers on
// these records.

// errMessageSchema: the schema the decoder infers from a message does not
// hold its values (an integer beyond 64 bits, array elements whose fields
// differ in type), or there is none (a top-level []).
var errMessageSchema = errors.New("the decoder Debezium runs stops at this message: the schema it infers does not hold its values")

// message is a message event's content as Debezium's decoder makes it.
type message struct {
	root   *jsonNode
	schema *connectSchema
}

func parseMessage(ev *decode.Event) (*message, error) {
	dec := json.NewDecoder(bytes.NewReader(ev.Message))
	dec.UseNumber()
	root, err := readNode(dec, 1)
	if err != nil {
		return nil, fmt.Errorf("reading the message as Debezium's decoder does: %w", err)
	}
	x := expander{nulls: ev.Source.MessageNullFields}
	s, err := x.schema("", root)
	if err != nil {
		return nil, fmt.Errorf("the decoder Debezium runs stops at this message: %w", err)
	}
	if s == nil || !fits(root, s) {
		return nil, errMessageSchema
	}
	return &message{root: root, schema: s}, nil
}

// field is a field's value and schema; ok is false when the decoded
// struct has no such field.
func (m *message) field(name string) (n *jsonNode, s *connectSchema, ok bool) {
	if s = m.schema.field(name); s == nil {
		return nil, nil, false
	}
	return m.root.member(name), s, true
}

// messageRecord encodes a message event's key and value, bound for topic,
// and its id header. A schema registry's failure is returned as it is.
func (t *tableRoute) messageRecord(ctx context.Context, topic string, ev *decode.Event) (key, value, id []byte, err error) {
	m, err := parseMessage(ev)
	if err != nil {
		return nil, nil, nil, &EncodingError{Column: "content", Err: err}
	}
	cols := ev.Source.Columns
	kn, ks, ok := m.field(cols.AggregateID)
	in, is, ok2 := m.field(cols.ID)
	pn, ps, ok3 := m.field(cols.Payload)
	if !ok || !ok2 || !ok3 {
		return nil, nil, nil, &EncodingError{Column: "content", Err: fmt.Errorf("the message lacks %s, %s or %s", cols.AggregateID, cols.ID, cols.Payload)}
	}
	var re *RegistryError
	if key, err = t.key.node(ctx, topic, kn, ks); errors.As(err, &re) {
		return nil, nil, nil, err
	} else if err != nil {
		return nil, nil, nil, &EncodingError{Column: cols.AggregateID, Err: err}
	}
	if !null(in) {
		id = in.headerString(is)
	}
	if ev.Tombstone {
		return key, nil, id, nil
	}
	if pn != nil && pn.kind == 's' && ev.Source.ExpandJSONPayload {
		expanded, err := expand([]byte(pn.text), ev.Source)
		switch {
		case err != nil && t.format.Value != String:
			return nil, nil, nil, &EncodingError{Column: cols.Payload, Err: err}
		case expanded != nil:
			pn, ps = expanded, expanded.schema
		}
	}
	if value, err = t.value.node(ctx, topic, pn, ps); errors.As(err, &re) {
		return nil, nil, nil, err
	} else if err != nil {
		return nil, nil, nil, &EncodingError{Column: cols.Payload, Err: err}
	}
	return key, value, id, nil
}

func null(n *jsonNode) bool { return n == nil || n.kind == 'n' }

// headerString is the node as SimpleHeaderConverter writes a header: a
// string as it is, a number or boolean as Java prints it, a struct or
// list as Kafka Connect's Values does.
func (n *jsonNode) headerString(s *connectSchema) []byte {
	switch s.typ {
	case "struct", "array":
		return n.render(nil, s, true)
	}
	return n.javaStringAs([]byte{}, s)
}

// appendValuesString quotes s as Values.escape does: \ and " only.
func appendValuesString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' || s[i] == '"' {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}
