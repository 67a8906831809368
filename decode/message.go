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

// envelope is a logical-message outbox event, the JSON content of
// pg_logical_emit_message(true, '<prefix>', '<envelope>').
type envelope struct {
	ID            *string           `json:"id"`
	AggregateType *string           `json:"aggregatetype"`
	AggregateID   *string           `json:"aggregateid"`
	Type          *string           `json:"type"`
	Payload       json.RawMessage   `json:"payload"`
	Headers       map[string]string `json:"headers"`
}

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
	if d.cfg.MessagePrefix == "" || prefix != d.cfg.MessagePrefix && d.cfg.MessagePrefix != AllPrefixes {
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

// outsideTx hands on a message emitted with pg_logical_emit_message(false,
// ...): Postgres sends it at once, outside any transaction, and a rollback
// of the transaction that emitted it does not take it back. It is a bad
// event (fail mode stops at it, naming it) in a Tx of its own, placed at
// the message's LSN with ordinal 0; its EndLSN is just past the message, so
// that once it is dead-lettered a restart does not receive it again.
func (d *Decoder) outsideTx(lsn pglogrepl.LSN, prefix string, content []byte) *Tx {
	if d.cfg.Skip(lsn, math.MaxUint64) {
		d.skipped++
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

// envelopeEvent maps a message's JSON envelope to an event. The payload is
// the JSON value as written; a JSON string payload is its text.
func (d *Decoder) envelopeEvent(lsn pglogrepl.LSN, prefix string, content []byte) Event {
	source := "logical message " + prefix
	ev := Event{Identity: d.identity(lsn, source, nil), Source: d.cfg.Messages}
	bad := func(field, reason string, err error) Event {
		ev.Bad = &Error{Event: ev.Identity, Column: field, Reason: reason, Err: err}
		if ev.Payload == nil {
			ev.Payload = append([]byte(nil), content...) // the original bytes, for the dead letter
		}
		return ev
	}
	if !utf8.Valid(content) {
		// encoding/json would replace the bytes silently.
		return bad("", "the content is not valid UTF-8, so not JSON", nil)
	}
	var env envelope
	if err := json.Unmarshal(content, &env); err != nil {
		return bad("", "the content is not a JSON envelope", err)
	}
	str := func(p *string) []byte {
		if p == nil {
			return nil
		}
		return []byte(*p)
	}
	ev.ID, ev.AggregateType, ev.AggregateID, ev.Type = str(env.ID), str(env.AggregateType), str(env.AggregateID), str(env.Type)
	for k, v := range env.Headers {
		ev.Headers = append(ev.Headers, Header{k, v})
	}
	slices.SortFunc(ev.Headers, func(a, b Header) int { return strings.Compare(a.Key, b.Key) }) // map order is random
	if len(env.Payload) > 0 && env.Payload[0] == '"' {
		var text string
		if err := json.Unmarshal(env.Payload, &text); err != nil {
			return bad("payload", "decoding the payload string", err)
		}
		ev.Payload = []byte(text)
	} else if len(env.Payload) > 0 && string(env.Payload) != "null" {
		ev.Payload = env.Payload
	}
	// The envelope's fields are named as Debezium's default columns.
	if field, reason := ev.check(DefaultColumns(), "missing"); reason != "" {
		return bad(field, reason, nil)
	}
	// As for a row: a missing or null payload is a null value, or with
	// route.tombstone.on.empty.payload a tombstone, as is a blank one.
	if d.cfg.Messages != nil && d.cfg.Messages.TombstoneOnEmptyPayload && blank(ev.Payload) {
		ev.Payload, ev.Tombstone = nil, true
	}
	return ev
}
