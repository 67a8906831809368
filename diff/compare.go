package diff

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish/format"
)

// Compare reads two sets of topics, read_committed, and compares them
// event by event: Debezium's topics and those walstream writes beside
// them in a shadow run (its own slot, other topic names). Events are told
// apart as the takeover tells them (the id header, or key and value where
// it is null); each event's first record on one side is compared with its
// first record on the other: partition, key, value, headers in order, and
// timestamp when asked.
type Compare struct {
	Kafka kafka.Settings
	// Pairs are the topics compared, Debezium's (Left) with walstream's
	// (Right).
	Pairs []TopicPair
	// Since, when set, leaves out records timestamped before it, on both
	// sides.
	Since time.Time
	// IgnoreHeaders are header names left out of the comparison: by
	// default Debezium's runId, which differs per run in both tools.
	IgnoreHeaders []string
	// Timestamps compares record timestamps too; Debezium's are its
	// processing time unless table.field.event.timestamp sets them.
	Timestamps bool
	// Examples is how many differences and one-sided events of each pair
	// the report names.
	Examples int
}

// TopicPair is one topic of each side.
type TopicPair struct{ Left, Right string }

// Pairs lists the topics matching pattern (a shell pattern, path.Match's:
// outbox.event.*) and pairs each with prefix + its name. Topics already
// named with the prefix are the other side's.
func Pairs(ctx context.Context, conn kafka.Settings, pattern, prefix string) ([]TopicPair, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("topic pattern %q: %w", pattern, err)
	}
	cl, err := kgo.NewClient(conn.Opts()...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", kafka.Authorization(err, ""))
	}
	var out []TopicPair
	for _, t := range topics.Names() {
		if ok, _ := path.Match(pattern, t); ok && (prefix == "" || !strings.HasPrefix(t, prefix)) {
			out = append(out, TopicPair{Left: t, Right: prefix + t})
		}
	}
	slices.SortFunc(out, func(a, b TopicPair) int { return strings.Compare(a.Left, b.Left) })
	if len(out) == 0 {
		return nil, fmt.Errorf("no topic matches %q", pattern)
	}
	return out, nil
}

// Comparison is what Compare found, pair by pair.
type Comparison struct {
	Pairs []PairComparison
}

// Differences counts the events whose records differ, across pairs.
func (c *Comparison) Differences() int {
	n := 0
	for _, p := range c.Pairs {
		n += p.Different
	}
	return n
}

// PairComparison is one pair's comparison.
type PairComparison struct {
	TopicPair
	LeftRecords, RightRecords int
	// Equal events have equal first records on both sides; Different
	// ones do not.
	Equal, Different int
	// Differences names the first Examples different events.
	Differences []Difference
	// OnlyLeft and OnlyRight are the events one side has and the other
	// lacks: at the ends of the compared stretch expected, since the two
	// started and stopped apart; within it a lost or extra event.
	OnlyLeft, OnlyRight OneSided
	// LeftDuplicates and RightDuplicates count records of an event after
	// its first on that side.
	LeftDuplicates, RightDuplicates int
}

// Difference is one event whose records differ.
type Difference struct {
	Event       string
	Fields      []string // partition, key, value, headers, timestamp
	Left, Right Place
}

// Place is where a record is.
type Place struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
}

// OneSided counts the events of one side only, with the times they span
// and the first few.
type OneSided struct {
	Events      int
	First, Last time.Time
	Examples    []string
}

// summary is what a comparison keeps of an event's first record.
type summary struct {
	place              Place
	key, value, header [sha256.Size]byte
	keyNull, valueNull bool
	records            int
}

// Run compares every pair.
func (c Compare) Run(ctx context.Context) (*Comparison, error) {
	out := &Comparison{}
	for _, p := range c.Pairs {
		pc, err := c.pair(ctx, p)
		if err != nil {
			return nil, err
		}
		out.Pairs = append(out.Pairs, pc)
	}
	return out, nil
}

func (c Compare) pair(ctx context.Context, p TopicPair) (PairComparison, error) {
	pc := PairComparison{TopicPair: p}
	left, n, err := c.read(ctx, p.Left)
	if err != nil {
		return pc, err
	}
	pc.LeftRecords = n
	right, n, err := c.read(ctx, p.Right)
	if err != nil {
		return pc, err
	}
	pc.RightRecords = n
	for _, id := range slices.Sorted(maps.Keys(left)) {
		l := left[id]
		pc.LeftDuplicates += l.records - 1
		r, ok := right[id]
		if !ok {
			pc.OnlyLeft.add(id, l.place.Timestamp, c.Examples)
			continue
		}
		if fields := c.differ(l, r); len(fields) > 0 {
			pc.Different++
			if len(pc.Differences) < c.Examples {
				pc.Differences = append(pc.Differences, Difference{Event: display(id), Fields: fields, Left: l.place, Right: r.place})
			}
		} else {
			pc.Equal++
		}
	}
	for _, id := range slices.Sorted(maps.Keys(right)) {
		r := right[id]
		pc.RightDuplicates += r.records - 1
		if _, ok := left[id]; !ok {
			pc.OnlyRight.add(id, r.place.Timestamp, c.Examples)
		}
	}
	return pc, nil
}

func (c Compare) differ(l, r *summary) []string {
	var out []string
	if l.place.Partition != r.place.Partition {
		out = append(out, "partition")
	}
	if l.key != r.key || l.keyNull != r.keyNull {
		out = append(out, "key")
	}
	if l.value != r.value || l.valueNull != r.valueNull {
		out = append(out, "value")
	}
	if l.header != r.header {
		out = append(out, "headers")
	}
	if c.Timestamps && !l.place.Timestamp.Equal(r.place.Timestamp) {
		out = append(out, "timestamp")
	}
	return out
}

func (o *OneSided) add(id string, ts time.Time, examples int) {
	o.Events++
	if o.First.IsZero() || ts.Before(o.First) {
		o.First = ts
	}
	if ts.After(o.Last) {
		o.Last = ts
	}
	if len(o.Examples) < examples {
		o.Examples = append(o.Examples, display(id))
	}
}

// read summarizes a topic's events.
func (c Compare) read(ctx context.Context, topic string) (map[string]*summary, int, error) {
	events := make(map[string]*summary)
	n := 0
	err := kafka.ScanTopic(ctx, c.Kafka.Opts(), topic, c.Since, func(r *kgo.Record) error {
		n++
		id := format.EventKey(r)
		if s, ok := events[id]; ok {
			s.records++
			return nil
		}
		s := &summary{place: Place{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}, records: 1,
			key: sha256.Sum256(r.Key), value: sha256.Sum256(r.Value), keyNull: r.Key == nil, valueNull: r.Value == nil}
		h := sha256.New()
		for _, hd := range r.Headers {
			if slices.Contains(c.IgnoreHeaders, hd.Key) {
				continue
			}
			fmt.Fprintf(h, "%d:%s", len(hd.Key), hd.Key)
			if hd.Value == nil {
				h.Write([]byte{0})
			} else {
				fmt.Fprintf(h, "%d:", len(hd.Value))
				h.Write(hd.Value)
			}
		}
		copy(s.header[:], h.Sum(nil))
		events[id] = s
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("comparing topic %s: %w", topic, kafka.Authorization(err, ""))
	}
	return events, n, nil
}

// display is an event's identity as a report names it: its id, or the
// digest of its key and value.
func display(id string) string {
	if s, ok := strings.CutPrefix(id, "id:"); ok {
		return "id " + s
	}
	return fmt.Sprintf("key and value %x", id[len("kv:"):len("kv:")+8])
}
