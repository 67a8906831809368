package decode

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"
)

// AllPrefixes as Config.MessagePrefix takes the messages of every prefix,
// as Debezium does unless message.prefix.include.list names some.
const AllPrefixes = "*"

// message decodes a logical decoding message ('M'): flags, LSN, prefix,
// content. With the configured prefix and inside a transaction it is an
// outbox event, ordered with the rows of its transaction.
func (d *Decoder) message(walStart pglogrepl.LSN, data []byte) (*Tx, error) {
	// 'M', flags (1), LSN (8), prefix (NUL-terminated), length (4), content
	if len(data) < 11 {
		return nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("logical message is %d bytes, want at least 11", len(data))}
	}
	transactional := data[1] == 1
	lsn := pglogrepl.LSN(binary.BigEndian.Uint64(data[2:]))
	rest := data[10:]
	end := bytes.IndexByte(rest, 0)
	if end < 0 || len(rest) < end+5 {
		return nil, &Error{Event: at(walStart), Reason: "truncated logical message"}
	}
	prefix := string(rest[:end])
	n := binary.BigEndian.Uint32(rest[end+1:])
	content := rest[end+5:]
	if uint64(n) != uint64(len(content)) {
		return nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("logical message content is %d bytes, its length says %d", len(content), n)}
	}
	if prefix == ControlPrefix {
		return d.control(lsn, transactional, content)
	}
	if !d.TakesMessage(prefix) {
		return nil, nil
	}
	if !transactional && d.tx == nil {
		return d.outsideTx(lsn, prefix, content), nil
	}
	if !transactional || d.tx == nil {
		return nil, &Error{Event: at(lsn), Reason: fmt.Sprintf("logical message with prefix %q: transactional flag %v inside transaction %v", prefix, transactional, d.tx != nil)}
	}
	if d.replayed() {
		return nil, nil
	}
	return d.hand(d.envelopeEvent(lsn, prefix, content))
}

// TakesMessage says whether a logical decoding message with prefix is
// something to the decoder: an outbox event or a control message.
func (d *Decoder) TakesMessage(prefix string) bool {
	return prefix == ControlPrefix || d.cfg.MessagePrefix != "" && (prefix == d.cfg.MessagePrefix || d.cfg.MessagePrefix == AllPrefixes)
}

// outsideTx hands on a message emitted with pg_logical_emit_message(false,
// ...): Postgres sends it at once, outside any transaction, and a rollback
// of the transaction that emitted it does not take it back. It is a bad
// event (fail mode stops at it, naming it) in a Tx of its own, placed at
// the message's LSN with ordinal 0; its EndLSN is just past the message, so
// that once it is dead-lettered a restart does not receive it again.
func (d *Decoder) outsideTx(lsn pglogrepl.LSN, prefix string, content []byte) *Tx {
	if d.cfg.Skip(lsn, math.MaxUint64) {
		d.skipped++
		if d.cfg.Replayed != nil {
			d.cfg.Replayed(&Tx{CommitLSN: lsn, EndLSN: lsn + 1, Final: true}, 1)
		}
		return nil
	}
	d.tx = &Tx{CommitLSN: lsn}
	d.ordinal = 0
	ev := d.envelopeEvent(lsn, prefix, content)
	d.tx = nil
	ev.Payload = append([]byte(nil), content...) // the data is the connection's buffer
	reason := fmt.Sprintf("logical message with prefix %q is not transactional: it cannot be published exactly once; emit it with pg_logical_emit_message(true, ...)", prefix)
	if ev.Bad != nil {
		reason += "; also " + ev.Bad.Reason
	}
	ev.Bad = &Error{Event: ev.Identity, Reason: reason}
	return &Tx{CommitLSN: lsn, EndLSN: lsn + 1, Final: true, Events: []Event{ev}, Bytes: ev.Size()}
}

// envelopeEvent maps a message's JSON content to an event, as Debezium's
// DecodeLogicalDecodingMessageContent and outbox router read it: the
// content is a JSON object whose fields, named as the router's columns
// (id, aggregatetype, aggregateid, payload by default), are the row's.
// publish encodes the event from the content (Event.Message) as Debezium
// does, by the types JSON gives its values; here are the checks on which
// Debezium's task stops, and the fields that name the event. A JSON null
// is a field the decoder drops unless MessageNullFields keeps it.
func (d *Decoder) envelopeEvent(lsn pglogrepl.LSN, prefix string, content []byte) Event {
	source := "logical message " + prefix
	o := d.cfg.Messages
	ev := Event{Identity: d.identity(lsn, source, nil), Source: o, Message: append([]byte(nil), content...)}
	bad := func(field, reason string, err error) Event {
		ev.Bad = &Error{Event: ev.Identity, Column: field, Reason: reason, Err: err}
		if ev.Payload == nil {
			ev.Payload = ev.Message // the original bytes, for the dead letter
		}
		return ev
	}
	if !utf8.Valid(content) {
		// encoding/json would replace the bytes silently.
		return bad("", "the content is not valid UTF-8, so not JSON", nil)
	}
	if len(content) == 0 || content[0] != '{' {
		return bad("", "the content is not a JSON object (Debezium's DecodeLogicalDecodingMessageContent decodes objects only)", nil)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(content, &env); err != nil {
		return bad("", "the content is not a JSON object", err)
	}
	// field is a field as the decoded struct has it: absent, or a JSON
	// null the decoder dropped, is not there.
	field := func(name string) (json.RawMessage, bool) {
		raw, ok := env[name]
		if !ok || string(raw) == "null" && !o.MessageNullFields {
			return nil, false
		}
		return raw, true
	}
	// scalar is a field's text: a string's, a number's or a boolean's
	// literal; nil for null.
	scalar := func(raw json.RawMessage) ([]byte, bool) {
		switch {
		case string(raw) == "null":
			return nil, true
		case raw[0] == '"':
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return nil, false
			}
			return []byte(s), true
		case raw[0] == '{' || raw[0] == '[':
			return nil, false
		}
		return raw, true
	}
	cols := o.Columns
	for _, name := range []string{cols.ID, cols.AggregateType, cols.AggregateID, cols.Payload} {
		if _, ok := field(name); !ok {
			return bad(name, "field is missing (or null): Debezium's router stops at such a message", nil)
		}
	}
	idRaw, _ := field(cols.ID)
	id, ok := scalar(idRaw)
	if !ok {
		return bad(cols.ID, "event id is not a string, number or boolean", nil)
	}
	ev.ID, ev.Identity.ID = id, id
	typeRaw, _ := field(cols.AggregateType)
	if typeRaw[0] != '"' {
		// Struct.getString: a null or another type stops Debezium.
		return bad(cols.AggregateType, "aggregate type is not a string: no topic can be derived", nil)
	}
	ev.AggregateType, _ = scalar(typeRaw)
	keyRaw, _ := field(cols.AggregateID)
	ev.AggregateID, _ = scalar(keyRaw)
	if raw, ok := env[cols.Type]; ok {
		ev.Type, _ = scalar(raw)
	}
	if raw, ok := env["headers"]; ok {
		var headers map[string]string
		if err := json.Unmarshal(raw, &headers); err != nil {
			return bad("headers", "headers is not an object of strings", err)
		}
		for k, v := range headers {
			ev.Headers = append(ev.Headers, Header{k, v})
		}
		slices.SortFunc(ev.Headers, func(a, b Header) int { return strings.Compare(a.Key, b.Key) }) // map order is random
	}
	payloadRaw, _ := field(cols.Payload)
	switch {
	case string(payloadRaw) == "null":
	case payloadRaw[0] == '"':
		ev.Payload, _ = scalar(payloadRaw)
	default:
		ev.Payload = payloadRaw
	}
	if field, reason := ev.check(cols, "missing"); reason != "" {
		return bad(field, reason, nil)
	}
	if cols.Timestamp != "" {
		return bad(cols.Timestamp, "table.field.event.timestamp is set, and Debezium's router stops at every logical message then (a message's field has no timestamp schema)", nil)
	}
	for _, a := range o.Additional {
		if _, ok := env[a.Column]; ok || !o.AdditionalOptional {
			return bad(a.Column, "walstream does not apply table.fields.additional.placement to logical messages", nil)
		}
	}
	// EventRouterDelegate: payload == null || payload.toString().trim().isEmpty();
	// a struct's toString is never empty.
	if o.TombstoneOnEmptyPayload && (string(payloadRaw) == "null" || payloadRaw[0] == '"' && blank(ev.Payload)) {
		ev.Payload, ev.Tombstone = nil, true
	}
	return ev
}
