package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
)

// Offset is the source offset Debezium 3.x stores for one source partition
// ({"server": <topic.prefix>}) of a connector, as Kafka Connect committed
// it: the position of the last record Connect had written and, in
// exactly-once mode, committed.
type Offset struct {
	// Connector is Kafka Connect's name of the connector and Server its
	// source partition's server, Debezium's topic.prefix; Connector is
	// empty when the source (a REST answer) does not name it.
	Connector, Server string
	// LSN is the last emitted record's LSN (lsn): for a change, its WAL
	// record's start; for a logical message, its end.
	LSN pglogrepl.LSN
	// Proc is lsn_proc, the last replication message completely handled;
	// zero when absent.
	Proc pglogrepl.LSN
	// Commit is lsn_commit, the end of the last COMMIT Debezium had handled
	// when it emitted the last record: usually the previous transaction's,
	// since a transaction's own COMMIT comes after its records. Every
	// transaction whose commit record starts before it is in Kafka. Zero
	// when absent.
	Commit pglogrepl.LSN
	// TxID is the transaction of the last record (txId); HasTxID says it
	// was stored.
	TxID    int64
	HasTxID bool
	// CommitTime is that transaction's commit time (ts_usec); zero when
	// absent.
	CommitTime time.Time
	// MessageType is the kind of the last message handled: INSERT, UPDATE,
	// DELETE, MESSAGE, BEGIN or COMMIT.
	MessageType string
	// Snapshot is set while a snapshot was in progress: the offset then
	// names no place in the WAL to go on from.
	Snapshot bool
	// Raw is the offset as stored, its keys sorted: what a checkpoint
	// records of where it came from.
	Raw json.RawMessage
}

// Resume is the position Debezium resumes from itself: lsn_commit, else
// lsn_proc, else lsn. Every transaction whose commit record starts before
// it was handled in whole.
func (o Offset) Resume() pglogrepl.LSN {
	switch {
	case o.Commit != 0:
		return o.Commit
	case o.Proc != 0:
		return o.Proc
	}
	return o.LSN
}

func (o Offset) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lsn_commit %s, lsn %s", o.Commit, o.LSN)
	if o.Proc != 0 {
		fmt.Fprintf(&b, ", lsn_proc %s", o.Proc)
	}
	if o.HasTxID {
		fmt.Fprintf(&b, ", txId %d", o.TxID)
	}
	if !o.CommitTime.IsZero() {
		fmt.Fprintf(&b, ", ts_usec %s", o.CommitTime.UTC().Format(time.RFC3339Nano))
	}
	if o.MessageType != "" {
		fmt.Fprintf(&b, ", messageType %s", o.MessageType)
	}
	return b.String()
}

// ErrNoOffset means Kafka Connect holds no offset for the connector: it
// never wrote a record, or its offsets were reset.
var ErrNoOffset = errors.New("no source offset stored for the connector")

// ParseOffset reads an offset's JSON value as Kafka Connect stores it
// (the offsets topic's and file's values, the REST answer's "offset").
func ParseOffset(value []byte) (Offset, error) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return Offset{}, fmt.Errorf("decoding offset %.200q: %w", value, err)
	}
	if m == nil {
		return Offset{}, ErrNoOffset // a tombstone: the offset was reset
	}
	return fromMap(m)
}

func fromMap(m map[string]any) (Offset, error) {
	var o Offset
	var errs []error
	lsn := func(key string, required bool) pglogrepl.LSN {
		v, ok := m[key]
		if !ok || v == nil {
			if required {
				errs = append(errs, fmt.Errorf("%s is missing", key))
			}
			return 0
		}
		n, err := number(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
		return pglogrepl.LSN(n)
	}
	o.Snapshot = truthy(m["snapshot"])
	o.LSN = lsn("lsn", !o.Snapshot)
	o.Proc = lsn("lsn_proc", false)
	o.Commit = lsn("lsn_commit", false)
	if v, ok := m["txId"]; ok && v != nil {
		n, err := number(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("txId: %w", err))
		}
		o.TxID, o.HasTxID = int64(n), true
	}
	if v, ok := m["ts_usec"]; ok && v != nil {
		n, err := number(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("ts_usec: %w", err))
		}
		o.CommitTime = time.UnixMicro(int64(n)).UTC()
	}
	o.MessageType, _ = m["messageType"].(string)
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("reading Debezium's offset: %w", err)
	}
	// encoding/json sorts a map's keys: the record is the same whatever
	// order Connect wrote them in.
	o.Raw, _ = json.Marshal(m) // cannot fail: it was decoded from JSON
	return o, nil
}

// number reads a JSON number Java wrote from a long.
func number(v any) (uint64, error) {
	switch n := v.(type) {
	case json.Number:
		u, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s is not a position", n)
		}
		return u, nil
	case float64:
		if n < 0 || n != float64(uint64(n)) {
			return 0, fmt.Errorf("%v is not a position", n)
		}
		return uint64(n), nil
	}
	return 0, fmt.Errorf("%v is not a number", v)
}

func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		return b == "true"
	}
	return false
}

// Key is a record key of Kafka Connect's offsets: the connector's name and
// its source partition, ["<name>",{"server":"<topic.prefix>"}].
type Key struct {
	Connector string
	Server    string
}

// ParseKey reads an offsets record's key; ok is false for a key of another
// shape (another kind of connector's partition).
func ParseKey(b []byte) (k Key, ok bool) {
	var parts []json.RawMessage
	if json.Unmarshal(b, &parts) != nil || len(parts) != 2 {
		return k, false
	}
	var partition map[string]any
	if json.Unmarshal(parts[0], &k.Connector) != nil || json.Unmarshal(parts[1], &partition) != nil {
		return k, false
	}
	k.Server, ok = partition["server"].(string)
	return k, ok && len(partition) == 1
}

// Selector picks the connector's offset among those a source holds.
type Selector struct {
	// Connector is Kafka Connect's name of the connector; empty accepts
	// any where the source holds one connector's offsets only.
	Connector string
	// Server is the connector's topic.prefix; empty accepts any where the
	// connector has one source partition.
	Server string
}

func (s Selector) String() string {
	name := s.Connector
	if name == "" {
		name = "(any name)"
	}
	if s.Server != "" {
		return fmt.Sprintf("connector %s, topic.prefix %s", name, s.Server)
	}
	return "connector " + name
}

// choose picks the offset of the selected connector among the latest
// value of each key, refusing a choice it cannot make.
func (s Selector) choose(latest map[Key][]byte, where string) (Offset, error) {
	var keys []Key
	for k := range latest {
		if (s.Connector == "" || k.Connector == s.Connector) && (s.Server == "" || k.Server == s.Server) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b Key) int {
		return strings.Compare(a.Connector+"\x00"+a.Server, b.Connector+"\x00"+b.Server)
	})
	switch len(keys) {
	case 0:
		var have []string
		for _, k := range slices.Collect(maps.Keys(latest)) {
			have = append(have, fmt.Sprintf("%s (topic.prefix %s)", k.Connector, k.Server))
		}
		slices.Sort(have)
		if len(have) == 0 {
			return Offset{}, fmt.Errorf("%w: %s holds no Debezium offsets", ErrNoOffset, where)
		}
		return Offset{}, fmt.Errorf("%w: %s holds none of %s, only of %s", ErrNoOffset, where, s, strings.Join(have, ", "))
	case 1:
	default:
		var names []string
		for _, k := range keys {
			names = append(names, fmt.Sprintf("%s (topic.prefix %s)", k.Connector, k.Server))
		}
		return Offset{}, fmt.Errorf("%s holds offsets of %s: name the connector and its topic.prefix", where, strings.Join(names, ", "))
	}
	k := keys[0]
	o, err := ParseOffset(latest[k])
	if err != nil {
		return o, fmt.Errorf("%s, connector %s (topic.prefix %s): %w", where, k.Connector, k.Server, err)
	}
	o.Connector, o.Server = k.Connector, k.Server
	return o, nil
}

// Latest keeps the last value of every Debezium key among records read in
// order: what Kafka Connect's offset store reads from its topic. A null
// value (a reset) removes the key.
type Latest map[Key][]byte

// Add records one offsets record.
func (l Latest) Add(key, value []byte) {
	k, ok := ParseKey(key)
	if !ok {
		return
	}
	if value == nil || string(value) == "null" {
		delete(l, k)
		return
	}
	l[k] = bytes.Clone(value)
}

// Choose picks the selected connector's offset; where names the source
// for errors.
func (l Latest) Choose(s Selector, where string) (Offset, error) { return s.choose(l, where) }

// ParseREST reads the answer of GET /connectors/<name>/offsets:
// {"offsets":[{"partition":{"server":...},"offset":{...}}]}.
func ParseREST(b []byte, s Selector, where string) (Offset, error) {
	var answer struct {
		Offsets *[]struct {
			Partition map[string]any  `json:"partition"`
			Offset    json.RawMessage `json:"offset"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal(b, &answer); err != nil || answer.Offsets == nil {
		if err == nil {
			err = errors.New(`no "offsets" list`)
		}
		return Offset{}, fmt.Errorf("%s is not an answer of Kafka Connect's offsets endpoint: %w", where, err)
	}
	latest := make(map[Key][]byte)
	for _, e := range *answer.Offsets {
		server, ok := e.Partition["server"].(string)
		if !ok || len(e.Partition) != 1 {
			continue
		}
		// The answer is the connector's own; its name is the selector's.
		latest[Key{Connector: s.Connector, Server: server}] = e.Offset
	}
	return s.choose(latest, where)
}
