package publish

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish/format"
)

// After a takeover from Debezium, an event of a transaction before
// until_lsn whose id is in its topic (from Since on) is not published
// again; the checkpoint still moves past it and carries the takeover.
// kfake: the producer's logic, not the broker's, is under test (compat's
// TestCutover runs the same on Apache Kafka).
func TestTakeoverSkipsPublished(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx := context.Background()
	now := time.Now()
	// Debezium's records: a and b since the takeover's Since, and old an
	// hour before it, which the lookup does not read.
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := func(id string, at time.Time) *kgo.Record {
		return &kgo.Record{Topic: "outbox.event.Order", Key: []byte("o-1"), Value: []byte("{}"), Timestamp: at,
			Headers: []kgo.RecordHeader{{Key: format.HeaderID, Value: []byte(id)}}}
	}
	if err := cl.ProduceSync(ctx, rec("old", now.Add(-2*time.Hour)), rec("a", now.Add(-time.Second)), rec("b", now)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tk := &checkpoint.Takeover{Source: "kafka:connect-offsets", Connector: "outbox", Offset: []byte(`{"lsn":1}`), Until: 0x5000,
		Since: now.Add(-time.Hour), Time: now}
	p := newProducer(t, broker, "tx-takeover")
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	resume := checkpoint.Checkpoint{LSN: 0x1000, Notes: &checkpoint.Notes{Takeover: tk}}
	var mu sync.Mutex
	var last checkpoint.Checkpoint
	committed := func() checkpoint.Checkpoint {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
	pos := &fakePositions{resume: resume, at: time.Now(), committed: func(cp checkpoint.Checkpoint) {
		mu.Lock()
		defer mu.Unlock()
		last = cp
	}}
	p.Start(pos)
	if p.seen == nil {
		t.Fatal("no lookup after a takeover whose until_lsn lies ahead")
	}
	q := NewQueue(1 << 20)
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- p.Run(rctx, q) }()
	for _, tx := range []*decode.Tx{
		{Xid: 1, CommitLSN: 0x2000, EndLSN: 0x2100, Final: true, Events: []decode.Event{event(1, "a"), event(2, "b"), event(3, "c"), event(4, "old")}, Bytes: 8},
		// At until_lsn: looked up no more, whatever its id.
		{Xid: 2, CommitLSN: 0x5000, EndLSN: 0x5100, Final: true, Events: []decode.Event{event(1, "a")}, Bytes: 2},
	} {
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for committed().LSN < 0x5100 && time.Now().Before(deadline) {
		select {
		case err := <-errc:
			t.Fatalf("Run = %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	<-errc
	last = committed()
	if last.LSN != 0x5100 || last.Events != 3 {
		t.Fatalf("last checkpoint %s counting %d events, want 0/5100 counting 3 (c, old and the a past until_lsn)", last, last.Events)
	}
	if p.seen != nil {
		t.Error("the lookup is still on past until_lsn")
	}
	recs, err := testenv.ReadRecords(ctx, broker, "outbox.event.Order")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Header("id"))
	}
	if want := []string{"old", "a", "b", "c", "old", "a"}; !slices.Equal(ids, want) {
		t.Fatalf("topic holds events %q, want %q", ids, want)
	}
	rd, err := checkpoints(p).ReadCheckpoint(ctx)
	cp := rd.Checkpoint
	if err != nil || !rd.Found || cp.Notes == nil || cp.Notes.Takeover == nil || cp.Notes.Takeover.Until != 0x5000 {
		t.Fatalf("checkpoint in Kafka %+v, %v: want the takeover recorded", cp, err)
	}
}

// The records of one identity are counted, by who wrote them: two runs of
// Debezium count as the one that wrote most (a run after a crash publishes
// again what the run before published), walstream's own records each
// count, and the events a restarted session reads again claim their
// records before any new event is looked up. Every event with an id is
// then in Kafka exactly once: ids that repeat, Debezium's own duplicates,
// across a session restart within the stretch. An event with a null id is
// never looked up: it is published, once more if Debezium had published it
// (store.Lookup).
func TestTakeoverCountsCopies(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx := context.Background()
	now := time.Now()
	const topic = "outbox.event.Order"
	nullID := func(ordinal uint64) decode.Event {
		ev := event(ordinal, "")
		ev.ID, ev.AggregateID, ev.Payload = nil, []byte("k"), []byte(`"same"`)
		return ev
	}
	tk := &checkpoint.Takeover{Source: "kafka:connect-offsets", Connector: "outbox", Offset: []byte(`{"lsn":1}`), Until: 0x9000,
		Since: now.Add(-time.Hour), Time: now}
	p := newProducer(t, broker, "tx-counts")
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	// Debezium's records, as walstream writes them: run A published r
	// twice (two events with that id), d, and the null id's event; run B,
	// after a crash, d and the null id's event again.
	for _, run := range [][]decode.Event{{event(1, "r"), event(2, "r"), event(3, "d"), nullID(4)}, {event(3, "d"), nullID(4)}} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		for i := range run {
			rec, err := p.router.Record(ctx, &run[i])
			if err != nil {
				t.Fatal(err)
			}
			rec.Timestamp = now
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
	}
	tx := func(commit pglogrepl.LSN, evs ...decode.Event) *decode.Tx {
		return &decode.Tx{Xid: uint32(commit), CommitLSN: commit, EndLSN: commit + 0x100, Final: true, Events: evs, Bytes: len(evs)}
	}
	stretch := []*decode.Tx{
		tx(0x2000, event(1, "r"), event(2, "d"), nullID(3)), // Debezium's; its null id event published again
		tx(0x3000, event(1, "x")),                           // not in Kafka
		tx(0x4000, event(1, "r")),                           // Debezium's second r
		// The session restarts here.
		tx(0x5000, event(1, "r")),                // a third r: not Debezium's
		tx(0x6000, event(1, "d")),                // Debezium's d was one event written twice
		tx(0x7000, nullID(1)),                    // published: a null id is never looked up
		tx(0x8000, event(1, "x")),                // a second x: walstream's x is the first one's
		tx(0xA000, event(1, "r"), event(2, "d")), // past until_lsn
	}
	session := func(resume checkpoint.Checkpoint, want pglogrepl.LSN, txs ...*decode.Tx) {
		t.Helper()
		p := newProducer(t, broker, "tx-counts")
		if err := p.Fence(ctx); err != nil {
			t.Fatal(err)
		}
		runFrom(t, p, &fakePositions{resume: resume, at: time.Now()}, checkpoint.Checkpoint{LSN: want}, txs...)
	}
	session(checkpoint.Checkpoint{LSN: 0x1000, Notes: &checkpoint.Notes{Takeover: tk}}, 0x4100, stretch[:3]...)
	rd, err := checkpoints(p).ReadCheckpoint(ctx)
	resume, found := rd.Checkpoint, rd.Found
	if err != nil || !found || resume.LSN != 0x4100 || resume.TakeoverAhead() == nil {
		t.Fatalf("checkpoint after the first session: %s, %v, %v; want 0/4100 with the takeover ahead", resume, found, err)
	}
	// The next session reads the stretch again from the slot: the decoder
	// hands on its replays.
	session(resume, 0xA100, stretch...)

	recs, err := testenv.ReadRecords(ctx, broker, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]int)
	for _, r := range recs {
		got[r.Header("id")]++
	}
	// Debezium's r, r, d, d, null, null; walstream's null, x, r, d, null,
	// x, r, d.
	if want := map[string]int{"r": 4, "d": 4, "": 4, "x": 2}; !maps.Equal(got, want) {
		t.Fatalf("records by id %v, want %v", got, want)
	}
	rd, err = checkpoints(p).ReadCheckpoint(ctx)
	if last := rd.Checkpoint; err != nil || last.Events != 8 {
		t.Fatalf("last checkpoint %s counts %d events (%v), want the 8 walstream published", last, rd.Checkpoint.Events, err)
	}
	// The record names the topics its transaction wrote, by which its
	// markers are found should its own partition show it open.
	last, _, err := kafka.LastUnderKey(ctx, []kgo.Opt{kgo.SeedBrokers(broker)}, "walstream.checkpoints", "slot-a")
	if err != nil || last == nil || !slices.Equal(checkpoint.Wrote(last.Value), []string{topic, "walstream.checkpoints"}) {
		t.Errorf("the last checkpoint record does not name the topics its transaction wrote: %v, %v", last, err)
	}
}
