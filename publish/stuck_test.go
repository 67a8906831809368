package publish

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
)

// runToError runs a producer that has a fresh start over txs and returns
// the error Run ends with; it fails the test if anything is committed.
func runToError(t *testing.T, p *Producer, txs ...*decode.Tx) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := NewQueue(1 << 20)
	p.Start(&fakePositions{at: time.Now(), committed: func(cp checkpoint.Checkpoint) { t.Errorf("committed %s past a bad event", cp) }})
	for _, tx := range txs {
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	return p.Run(ctx, q)
}

// The producer stops at the first event in commit order that cannot be
// published, whether routing finds it (a topic Kafka rejects) or decoding
// did (a NULL aggregate id, a recreated table after it).
func TestProducerStopsAtFirstBadEvent(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	badTopic := event(2, "bad-topic")
	badTopic.AggregateType = []byte("Bad Type!")
	badRow := event(3, "null-key")
	badRow.AggregateID = nil
	badRow.Bad = &decode.Error{Event: badRow.Identity, Column: "aggregateid", Reason: "aggregate id is NULL"}
	stop := &decode.Error{Reason: "outbox table was recreated"}
	for _, tc := range []struct {
		name string
		txs  []*decode.Tx
		want string
	}{
		{"routing before decoding", []*decode.Tx{{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{event(1, "good"), badTopic, badRow}}}, "event id bad-topic"},
		{"decoding before routing", []*decode.Tx{{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{event(1, "good"), badRow, badTopic}}}, "event id null-key"},
		{"a bad row before a stop", []*decode.Tx{{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{badRow}}, {Stop: stop}}, "event id null-key"},
		{"a stop alone", []*decode.Tx{{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{event(1, "good")}}, {Stop: stop}}, "outbox table was recreated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A linger longer than the test: a commit of the events before
			// the stop, due after 1 ms by newProducer's, would race the
			// stop, which is already queued.
			p := newProducerWith(t, broker, "tx-"+strings.ReplaceAll(tc.name, " ", "-"), func(c *Config) { c.Linger = time.Hour })
			err := runToError(t, p, tc.txs...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want %q", err, tc.want)
			}
		})
	}
}

// A row of a table that does not fit the mapping is not dead-lettered: it
// would take every row of the table. Naming it sends that one event to the
// dead-letter topic, and every later checkpoint records the skip.
func TestProducerSkipsNamedEvent(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	unmapped := event(2, "unmapped")
	unmapped.CommitLSN = 0x1000
	unmapped.Bad = &decode.Error{Event: unmapped.Identity, Column: "payload", Reason: "outbox column is missing", Unmapped: true}
	txs := func() []*decode.Tx {
		first := event(1, "good")
		first.CommitLSN = 0x1000
		return []*decode.Tx{{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{first, unmapped}, Bytes: 10}}
	}

	p := newProducer(t, broker, "tx-dlq")
	p.cfg.DeadLetterTopic = "walstream.dlq"
	if err := runToError(t, p, txs()...); err == nil || !strings.Contains(err.Error(), "event id unmapped") {
		t.Fatalf("dead-letter mode: Run = %v, want a stop at the unmapped row", err)
	}

	p = newProducer(t, broker, "tx-skip")
	p.cfg.SkipEvent, p.cfg.SkipTopic = decode.Ref{CommitLSN: 0x1000, Ordinal: 2}, "walstream.dlq"
	p.cfg.Tables = map[string]uint32{"public.outbox": 16454}
	if err := p.Fence(context.Background()); err != nil {
		t.Fatal(err)
	}
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x2000}, txs()...)
	// A later checkpoint, of a later session resuming from Kafka's, still
	// carries the skip.
	rd, err := checkpoints(p).ReadCheckpoint(context.Background())
	cp, found := rd.Checkpoint, rd.Found
	if err != nil || !found || cp.Notes == nil || cp.Notes.Skipped == nil {
		t.Fatalf("ReadCheckpoint = %+v, %v; want the skip recorded", cp, err)
	}
	p.tracker.(*fakePositions).done = cp
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x4000}, &decode.Tx{CommitLSN: 0x3000, EndLSN: 0x4000, Final: true, Events: []decode.Event{event(1, "later")}, Bytes: 5})
	rd, err = checkpoints(p).ReadCheckpoint(context.Background())
	cp, found = rd.Checkpoint, rd.Found
	if err != nil || !found || cp.LSN != 0x4000 || cp.Notes == nil || cp.Notes.Skipped == nil {
		t.Fatalf("ReadCheckpoint = %+v, %v, %v; want the skip recorded", cp, found, err)
	}
	if s := cp.Notes.Skipped; s.Event != "0/1000:2" || s.EventID != "unmapped" || !strings.Contains(s.Reason, "column payload: outbox column is missing") || cp.Notes.Tables["public.outbox"] != 16454 {
		t.Fatalf("checkpoint notes %+v %+v", cp.Notes, s)
	}
	if dead := readTopic(t, broker, "walstream.dlq"); len(dead) != 1 || string(dead[0].Headers[0].Value) != "unmapped" {
		t.Fatalf("dead letters %v, want the one named event", dead)
	}
}

// readTopic reads a topic's committed records, to its end: not those a
// reader happened to fetch within a fixed time.
func readTopic(t *testing.T, broker, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	if err := testenv.ReadCommitted(ctx, broker, topic, func(r *kgo.Record) { out = append(out, r) }); err != nil {
		t.Fatal(err)
	}
	return out
}
