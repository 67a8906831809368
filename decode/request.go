package decode

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/jackc/pglogrepl"
)

// ControlPrefix is the prefix of the logical decoding messages that ask the
// stream itself for something: re-emit requests and their cancels, which
// `walstream reemit` emits in a transaction of their own. Messages with
// this prefix are never outbox events, whatever MessagePrefix says.
const ControlPrefix = "walstream.reemit"

// Action is what a request asks.
type Action string

// Actions of requests.
const (
	// ActionReemit publishes the rows of an outbox table that satisfy a
	// predicate again.
	ActionReemit Action = "reemit"
	// ActionCancel ends a re-emit request before it is done: the one
	// named by ID, or those on Tables (every one when Tables is empty).
	ActionCancel Action = "cancel"
)

// Request is a re-emit request or a cancel met in the stream: the content
// of a logical decoding message with ControlPrefix (the JSON of the
// fields below), or a row of Debezium's signal table. It travels with the
// last part of its transaction, so that the Kafka transaction that
// completes its transaction also records it.
type Request struct {
	Action Action `json:"action"`
	// ID names the request; a cancel names the request it cancels, or,
	// without one, cancels the requests on Tables.
	ID string `json:"id,omitempty"`
	// Stream, when set, is the only stream that acts on the request.
	Stream string `json:"stream,omitempty"`
	// Table is the outbox table to re-emit rows of (schema.table), and
	// Where the predicate they must satisfy; empty: every row.
	Table string `json:"table,omitempty"`
	Where string `json:"where,omitempty"`
	// Tables, for a cancel without ID, are the tables whose requests it
	// cancels (Debezium's stop-snapshot); empty: every request.
	Tables []string `json:"tables,omitempty"`
	// Origin says who asked: walstream reemit (the default), or a Debezium
	// signal.
	Origin string `json:"origin,omitempty"`

	// LSN is where the message or signal row is in the WAL.
	LSN pglogrepl.LSN `json:"-"`
	// Err, when set, is why the request cannot be acted on: it is
	// refused, and the refusal recorded, never dropped silently.
	Err string `json:"-"`
}

// OriginCLI is the origin of requests walstream reemit writes.
const OriginCLI = "walstream reemit"

// MaxPredicateBytes bounds a request's predicate: every checkpoint of a
// running request carries it.
const MaxPredicateBytes = 16 << 10

// ParseRequest reads the content of a control message at lsn. A content
// that is no valid request is a Request with Err set, so that the refusal
// is recorded. A re-emit must name a table of outboxes.
func ParseRequest(content []byte, lsn pglogrepl.LSN, outboxes []*Outbox) Request {
	var r Request
	if err := json.Unmarshal(content, &r); err != nil {
		return Request{LSN: lsn, ID: fmt.Sprintf("message@%s", lsn), Origin: OriginCLI, Action: ActionReemit,
			Err: fmt.Sprintf("the control message at LSN %s is not a request: %v", lsn, err)}
	}
	r.LSN = lsn
	if r.Origin == "" {
		r.Origin = OriginCLI
	}
	switch r.Action {
	case ActionReemit:
		if r.ID == "" {
			r.ID, r.Err = fmt.Sprintf("message@%s", lsn), "the request names no id"
		} else {
			r.Err = checkReemit(r.Table, r.Where, outboxes)
		}
	case ActionCancel:
	default:
		r.Err = fmt.Sprintf("action %q is not %s or %s", r.Action, ActionReemit, ActionCancel)
	}
	return r
}

// checkReemit says what is wrong with a re-emit of table where, "" when
// nothing is.
func checkReemit(table, where string, outboxes []*Outbox) string {
	if !isOutbox(table, outboxes) {
		return fmt.Sprintf("table %q is not an outbox table of this stream (%s)", table, outboxNames(outboxes))
	}
	if err := CheckPredicate(where); err != nil {
		return err.Error()
	}
	return ""
}

func isOutbox(table string, outboxes []*Outbox) bool {
	for _, o := range outboxes {
		if o.Schema != "" && o.Name() == table {
			return true
		}
	}
	return false
}

func outboxNames(outboxes []*Outbox) string {
	var names []string
	for _, o := range outboxes {
		if o.Schema != "" {
			names = append(names, o.Name())
		}
	}
	return strings.Join(names, ", ")
}

// CheckPredicate checks that where is one SQL expression that a query can
// put in parentheses: at most MaxPredicateBytes, its parentheses balanced
// and never closing one it did not open, its quotes, quoted identifiers,
// dollar quotes and comments ended, no semicolon outside them. Postgres
// checks the rest: the predicate is planned before a request is made and
// before its rows are read. Without this, a predicate such as
// "true) OR (true" would change the query that pages through the table.
func CheckPredicate(where string) error {
	if len(where) > MaxPredicateBytes {
		return fmt.Errorf("the predicate is %d bytes, over the %d allowed: select by a key range or by a column instead of a long list", len(where), MaxPredicateBytes)
	}
	depth := 0
	for i := 0; i < len(where); {
		c := where[i]
		switch {
		case c == '(':
			depth++
		case c == ')':
			if depth--; depth < 0 {
				return fmt.Errorf("the predicate closes a parenthesis it did not open, at byte %d", i)
			}
		case c == ';':
			return fmt.Errorf("the predicate has a semicolon at byte %d: it must be one expression", i)
		case c == '\'':
			escapes := i > 0 && (where[i-1] == 'E' || where[i-1] == 'e') && (i == 1 || !identChar(where[i-2]))
			end, ok := quoted(where, i, '\'', escapes)
			if !ok {
				return fmt.Errorf("the string starting at byte %d is not ended", i)
			}
			i = end
			continue
		case c == '"':
			end, ok := quoted(where, i, '"', false)
			if !ok {
				return fmt.Errorf("the quoted identifier starting at byte %d is not ended", i)
			}
			i = end
			continue
		case c == '-' && strings.HasPrefix(where[i:], "--"):
			end := strings.IndexByte(where[i:], '\n')
			if end < 0 {
				return nil // the query puts a new line after the predicate
			}
			i += end
			continue
		case c == '/' && strings.HasPrefix(where[i:], "/*"):
			end, ok := blockComment(where, i)
			if !ok {
				return fmt.Errorf("the comment starting at byte %d is not ended", i)
			}
			i = end
			continue
		case c == '$' && (i == 0 || !identChar(where[i-1])):
			if tag := dollarTag.FindString(where[i:]); tag != "" {
				end := strings.Index(where[i+len(tag):], tag)
				if end < 0 {
					return fmt.Errorf("the dollar-quoted string starting at byte %d is not ended", i)
				}
				i += len(tag) + end + len(tag)
				continue
			}
		}
		i++
	}
	if depth != 0 {
		return errors.New("the predicate leaves a parenthesis open")
	}
	return nil
}

// dollarTag is the opening of a dollar-quoted string: $$ or $tag$.
var dollarTag = regexp.MustCompile(`^\$([A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*)?\$`)

func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// quoted returns the index after the quote q that ends the quoted text
// starting at i, where a doubled quote stands for one and, with escapes
// (a string written E'...'), a backslash escapes the next byte.
func quoted(s string, i int, q byte, escapes bool) (int, bool) {
	for j := i + 1; j < len(s); j++ {
		switch {
		case escapes && s[j] == '\\':
			j++
		case s[j] == q && j+1 < len(s) && s[j+1] == q:
			j++
		case s[j] == q:
			return j + 1, true
		}
	}
	return 0, false
}

// blockComment returns the index after the comment starting at i, which
// nests as Postgres' do.
func blockComment(s string, i int) (int, bool) {
	depth := 0
	for j := i; j+1 < len(s); j++ {
		switch {
		case s[j] == '/' && s[j+1] == '*':
			depth++
			j++
		case s[j] == '*' && s[j+1] == '/':
			depth--
			j++
			if depth == 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
}

// Debezium's signal types that walstream acts on, and the snapshot type it
// runs them as.
const (
	SignalExecuteSnapshot = "execute-snapshot"
	SignalStopSnapshot    = "stop-snapshot"
	snapshotIncremental   = "incremental"
)

// signalData is the data column of Debezium's execute-snapshot and
// stop-snapshot signals.
type signalData struct {
	DataCollections      []json.RawMessage `json:"data-collections"`
	Type                 string            `json:"type"`
	AdditionalConditions []struct {
		DataCollection string `json:"data-collection"`
		Filter         string `json:"filter"`
	} `json:"additional-conditions"`
	AdditionalCondition json.RawMessage `json:"additional-condition"`
	SurrogateKey        string          `json:"surrogate-key"`
}

// SignalRequests reads a row of Debezium's signal table, inserted at lsn:
// execute-snapshot of type incremental is a re-emit of each outbox table
// its data-collections name (Java regular expressions matching the whole
// schema.table, as Debezium expands them), with the additional-conditions
// whose data-collection matches the table as the predicate; stop-snapshot
// cancels the requests on the tables it names, or every one. Each re-emit
// is named after the signal's id and its LSN, which tells signals that
// reuse an id apart. Other signal types give no request; a signal walstream
// cannot act on as Debezium would gives refused requests.
func SignalRequests(id, typ, data string, lsn pglogrepl.LSN, outboxes []*Outbox) []Request {
	origin := "debezium signal " + id
	base := Request{LSN: lsn, Origin: origin, ID: fmt.Sprintf("%s@%s", id, lsn)}
	refuse := func(format string, args ...any) []Request {
		r := base
		r.Action, r.Err = ActionReemit, fmt.Sprintf(format, args...)
		return []Request{r}
	}
	if typ != SignalExecuteSnapshot && typ != SignalStopSnapshot {
		return nil
	}
	var d signalData
	if err := json.Unmarshal([]byte(data), &d); err != nil {
		return refuse("the data of %s signal %s is not JSON: %v", typ, id, err)
	}
	if t := strings.ToLower(strings.TrimSpace(d.Type)); t != "" && t != snapshotIncremental {
		return refuse("%s signal %s has type %q: walstream runs incremental snapshots only", typ, id, d.Type)
	}
	var patterns []string
	for _, raw := range d.DataCollections {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return refuse("%s signal %s: data-collections holds %s, not a string", typ, id, raw)
		}
		patterns = append(patterns, strings.TrimSpace(s))
	}
	tables, unmatched, err := expandCollections(patterns, outboxes)
	if err != nil {
		return refuse("%s signal %s: %v", typ, id, err)
	}
	if typ == SignalStopSnapshot {
		r := base
		r.ID, r.Action, r.Tables = "", ActionCancel, tables
		if len(patterns) > 0 && len(tables) == 0 {
			return nil // no request of this stream's tables to stop
		}
		return []Request{r}
	}
	switch {
	case len(patterns) == 0:
		return refuse("execute-snapshot signal %s names no data-collections", id)
	case len(d.AdditionalCondition) > 0 && string(d.AdditionalCondition) != "null":
		return refuse("execute-snapshot signal %s has additional-condition, which Debezium 2 and later ignore; give additional-conditions with data-collection and filter", id)
	case strings.TrimSpace(d.SurrogateKey) != "":
		return refuse("execute-snapshot signal %s has surrogate-key %q: walstream reads rows by the primary key only", id, d.SurrogateKey)
	}
	var out []Request
	for _, p := range unmatched {
		r := base
		r.ID = fmt.Sprintf("%s#%d", base.ID, len(out)+1)
		r.Action, r.Table = ActionReemit, p
		r.Err = fmt.Sprintf("data-collection %q of execute-snapshot signal %s matches no outbox table of this stream (%s)", p, id, outboxNames(outboxes))
		out = append(out, r)
	}
	for _, t := range tables {
		r := base
		if len(out) > 0 || len(tables) > 1 {
			r.ID = fmt.Sprintf("%s#%d", base.ID, len(out)+1)
		}
		r.Action, r.Table = ActionReemit, t
		var filters []string
		for _, c := range d.AdditionalConditions {
			re, err := regexp.Compile(`(?i)^(?:` + c.DataCollection + `)$`)
			if err != nil {
				r.Err = fmt.Sprintf("execute-snapshot signal %s: additional-conditions data-collection %q is not a regular expression: %v", id, c.DataCollection, err)
				break
			}
			if re.MatchString(t) && strings.TrimSpace(c.Filter) != "" {
				filters = append(filters, c.Filter)
			}
		}
		r.Where = And(filters...)
		if r.Err == "" {
			r.Err = checkReemit(r.Table, r.Where, outboxes)
		}
		out = append(out, r)
	}
	return out
}

// expandCollections matches Debezium's data-collections, regular
// expressions of whole table names, against the outbox tables: the tables
// matched, in the order of outboxes, and the patterns that matched none.
func expandCollections(patterns []string, outboxes []*Outbox) (tables, unmatched []string, err error) {
	seen := make(map[string]bool)
	for _, p := range patterns {
		re, err := regexp.Compile(`^(?:` + p + `)$`)
		if err != nil {
			return nil, nil, fmt.Errorf("data-collection %q is not a regular expression: %w", p, err)
		}
		found := false
		for _, o := range outboxes {
			if o.Schema == "" || !re.MatchString(o.Name()) {
				continue
			}
			found = true
			if !seen[o.Name()] {
				seen[o.Name()] = true
				tables = append(tables, o.Name())
			}
		}
		if !found {
			unmatched = append(unmatched, p)
		}
	}
	return tables, unmatched, nil
}

// And joins predicates with AND, each in parentheses ended on a line of
// its own so that a trailing comment ends with it; one predicate is left
// as it is.
func And(predicates ...string) string {
	var ps []string
	for _, p := range predicates {
		if strings.TrimSpace(p) != "" {
			ps = append(ps, p)
		}
	}
	if len(ps) == 1 {
		return ps[0]
	}
	for i, p := range ps {
		ps[i] = "(" + p + "\n)"
	}
	return strings.Join(ps, " AND ")
}

// control takes a message with ControlPrefix: a request of the open
// transaction, kept for its last part. One emitted outside a transaction
// (pg_logical_emit_message(false, ...)) cannot be ordered with the stream
// nor taken back by a rollback: it is handed on at once, refused.
func (d *Decoder) control(lsn pglogrepl.LSN, transactional bool, content []byte) (*Tx, error) {
	switch {
	case !transactional && d.tx == nil:
		if d.cfg.Skip(lsn, math.MaxUint64) {
			return nil, nil
		}
		r := ParseRequest(content, lsn, d.cfg.Outboxes)
		r.Err = fmt.Sprintf("the control message at LSN %s is not transactional: emit it with pg_logical_emit_message(true, ...), as walstream reemit does", lsn)
		return &Tx{CommitLSN: lsn, EndLSN: lsn + 1, Final: true, Requests: []Request{r}}, nil
	case !transactional || d.tx == nil:
		return nil, &Error{Event: at(lsn), Reason: fmt.Sprintf("logical message with prefix %q: transactional flag %v inside transaction %v", ControlPrefix, transactional, d.tx != nil)}
	case d.skipTx:
		return nil, nil
	}
	d.requests = append(d.requests, ParseRequest(content, lsn, d.cfg.Outboxes))
	return nil, nil
}

// signal takes an INSERT into Debezium's signal table, whose three
// columns Debezium reads by position: id, type and data.
func (d *Decoder) signal(rel *relation, walStart pglogrepl.LSN, data []byte) error {
	if d.skipTx {
		return nil
	}
	if len(data) < 8 || data[5] != 'N' {
		return &Error{Event: Identity{LSN: walStart, Table: rel.name}, Reason: "truncated INSERT into the signal table"}
	}
	vals, rest, err := splitTuple(d.vals[:0], data[8:], int(binary.BigEndian.Uint16(data[6:])))
	d.vals = vals
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d bytes after the last column", len(rest))
	}
	if err != nil {
		return &Error{Event: Identity{LSN: walStart, Table: rel.name}, Reason: "decoding INSERT tuple", Err: err}
	}
	if len(vals) != 3 {
		d.requests = append(d.requests, Request{LSN: walStart, Action: ActionReemit, ID: fmt.Sprintf("signal@%s", walStart), Origin: "debezium signal",
			Err: fmt.Sprintf("signal table %s has %d columns; Debezium's has three: id, type and data", rel.name, len(vals))})
		return nil
	}
	text := func(v value) string { return string(v.data) } // a NULL is empty
	d.requests = append(d.requests, SignalRequests(text(vals[0]), text(vals[1]), text(vals[2]), walStart, d.cfg.Outboxes)...)
	return nil
}
