package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish/format"
)

// After a takeover from Debezium (checkpoint.Takeover), the first
// transactions walstream reads may already be in Kafka: Debezium's stored
// offset trails what it delivered by up to one offset flush, and its last
// transaction is usually delivered although its offset points before it.
// Before publishing an event of such a transaction, the producer looks it
// up (Lookup) among the records of its topic, read once, read_committed,
// from the takeover's Since: Debezium's records (its processing time is
// their timestamp, never before the row's commit) and what this stream
// committed since the takeover. Events are told apart by their id header.
//
// An event without an id (a null id column, a logical message whose id
// field was null) is never looked up: it is published, a duplicate if
// Debezium had published it. Nothing tells it from an event of equal key
// and value that Debezium published before its offset, read because of
// the lookback and claimed by no event of the stretch, which would excuse
// it: the event would be lost. The takeover refuses a nullable id column
// unless an operator accepts that (pipeline).
//
// Ids may repeat (an id column without a unique index), so the lookup
// counts, never asks whether an id is there at all: each record excuses at
// most one event, and an event is skipped only while a record of its id is
// left unclaimed.
//
// Which records are copies of one event and which are events of their own
// is told by who wrote them:
//
//   - One run of Debezium's task (one producer id: a standalone worker's
//     idempotent producer gets a new one at each start, an exactly-once
//     task keeps its transactional one) publishes each event at most once.
//     At least once, a run that follows a crash publishes again, from the
//     stored offset, what an earlier run had published: copies of the
//     same events under another producer id. So Debezium's records of one
//     id count as the most any one producer id wrote of it: two
//     copies written by two runs excuse one event, two written by one run
//     two. A distinct event of a repeated id that two runs wrote one
//     each (a run killed with records in flight to another partition) is
//     then published once more: a duplicate, never a loss.
//   - walstream's own records since the takeover (a session restarted
//     within the stretch) each count, and the events of the stretch the
//     restart reads again from the slot claim them first, in commit order,
//     before any new event is looked up: the slot is not confirmed past
//     the takeover's start until the stream is past until_lsn (see
//     checkpoint.Tracker.Confirm), so that every event of the stretch
//     claims its record whichever session handled it.
//
// Records of events committed before the slot's position, read because of
// the lookback, are claimed by no event: one of them excuses a later event
// of the same id, which is why a takeover asks for a unique, not null
// event id column (pipeline).

// takeoverWait is how long the lookup waits for a transaction open on a
// partition when it reads it to end: a killed exactly-once task leaves one
// open until the broker aborts it, after the producer's
// transaction.timeout.ms (one minute by default in Kafka Connect). Only
// those open when the read reaches the partition's end are waited for,
// and only until their markers (kafka.ScanDecided): a busy producer
// writing the same topic does not hold the lookup up.
const takeoverWait = 90 * time.Second

// takeoverReadDeadline bounds reading one topic.
const takeoverReadDeadline = 10 * time.Minute

// Lookup finds the events already in Kafka after a takeover from
// Debezium, topic by topic.
type Lookup struct {
	takeover *checkpoint.Takeover
	opts     []kgo.Opt
	log      *slog.Logger
	// own returns the producer id this stream writes under.
	own func(ctx context.Context) (int64, error)
	// wait is how long a transaction open on a topic is waited for
	// (takeoverWait).
	wait time.Duration
	// tallies are, for each topic read, the records of each event id.
	tallies map[string]map[string]*tally
	// found counts the events found already published, checked those
	// looked up, idless those published without a look-up, having no id.
	found, checked, idless int
}

// NewLookup looks events up for the takeover t, with clients connecting
// with opts; own returns the producer id this stream writes under.
func NewLookup(t *checkpoint.Takeover, opts []kgo.Opt, own func(context.Context) (int64, error), log *slog.Logger) *Lookup {
	return &Lookup{takeover: t, opts: opts, own: own, wait: takeoverWait, log: log, tallies: make(map[string]map[string]*tally)}
}

// tally is what a topic holds of one event id.
type tally struct {
	own     int   // records this stream wrote
	runs    []run // every other producer's
	claimed int
}

// run counts the records one producer id wrote.
type run struct {
	pid int64
	n   int
}

// add counts a record written by producer id pid; own is this stream's.
func (t *tally) add(pid, own int64) {
	if pid == own {
		t.own++
		return
	}
	for i := range t.runs {
		if t.runs[i].pid == pid {
			t.runs[i].n++
			return
		}
	}
	t.runs = append(t.runs, run{pid: pid, n: 1})
}

// copies is how many events the records excuse: the most any one of
// Debezium's runs wrote, and every record of this stream.
func (t *tally) copies() int {
	most := 0
	for _, r := range t.runs {
		most = max(most, r.n)
	}
	return t.own + most
}

// claim takes one of the records for an event, when one is left.
func (t *tally) claim() bool {
	if t == nil || t.claimed >= t.copies() {
		return false
	}
	t.claimed++
	return true
}

// Takeover is the takeover the lookup is for.
func (p *Lookup) Takeover() *checkpoint.Takeover { return p.takeover }

// Counts are the events looked up (Has), those found already published,
// and those published without a look-up for having no id.
func (p *Lookup) Counts() (checked, found, idless int) { return p.checked, p.found, p.idless }

// eventID is the id header of rec's event; ok is false when it has none
// or a null one.
func eventID(rec *kgo.Record) (id string, ok bool) {
	for _, h := range rec.Headers {
		if h.Key == format.HeaderID && h.Value != nil {
			return string(h.Value), true
		}
	}
	return "", false
}

// Claim reports whether rec's event is in its topic, and claims the record
// that holds it: no other event is excused by it. An event without an id
// is never found.
func (p *Lookup) Claim(ctx context.Context, rec *kgo.Record) (bool, error) {
	id, ok := eventID(rec)
	if !ok {
		return false, nil
	}
	tallies, ok := p.tallies[rec.Topic]
	if !ok {
		var err error
		if tallies, err = p.read(ctx, rec.Topic); err != nil {
			return false, err
		}
		p.tallies[rec.Topic] = tallies
	}
	return tallies[id].claim(), nil
}

// Has claims rec's record as Claim does, for an event to publish unless
// found, and counts it.
func (p *Lookup) Has(ctx context.Context, rec *kgo.Record) (bool, error) {
	if _, ok := eventID(rec); !ok {
		p.idless++
		return false, nil
	}
	found, err := p.Claim(ctx, rec)
	if err != nil {
		return false, err
	}
	p.checked++
	if found {
		p.found++
	}
	return found, nil
}

// read counts the records of each event id in topic from Since on;
// records without one are left out.
func (p *Lookup) read(ctx context.Context, topic string) (map[string]*tally, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, takeoverReadDeadline)
	defer cancel()
	own, err := p.own(ctx)
	if err != nil {
		return nil, fmt.Errorf("looking up the events Debezium published to topic %s: reading this stream's producer id: %w", topic, err)
	}
	tallies := make(map[string]*tally)
	n := 0
	err = kafka.ScanDecided(ctx, p.opts, topic, p.takeover.Since, p.wait, func(r *kgo.Record) error {
		k, ok := eventID(r)
		if !ok {
			return nil
		}
		t := tallies[k]
		if t == nil {
			t = &tally{}
			tallies[k] = t
		}
		t.add(r.ProducerID, own)
		n++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("looking up the events Debezium published to topic %s since %s: %w", topic, p.takeover.Since.UTC().Format(time.RFC3339), err)
	}
	repeated := 0
	producers := make(map[int64]bool)
	for _, t := range tallies {
		if t.copies() > 1 {
			repeated++
		}
		for _, r := range t.runs {
			producers[r.pid] = true
		}
	}
	p.log.Info("read the events Debezium may have published before the takeover", "topic", topic, "records", n, "events", len(tallies),
		"ids_excusing_several_events", repeated, "other_producers", len(producers), "since", p.takeover.Since.UTC().Format(time.RFC3339Nano), "seconds", time.Since(start).Seconds())
	return tallies, nil
}
