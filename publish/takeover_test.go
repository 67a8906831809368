package publish

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
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
			Headers: []kgo.RecordHeader{{Key: HeaderID, Value: []byte(id)}}}
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
	rd, err := p.ReadCheckpoint(ctx)
	cp := rd.Checkpoint
	if err != nil || !rd.Found || cp.Notes == nil || cp.Notes.Takeover == nil || cp.Notes.Takeover.Until != 0x5000 {
		t.Fatalf("checkpoint in Kafka %+v, %v: want the takeover recorded", cp, err)
	}
}

func TestEventKey(t *testing.T) {
	withID := &kgo.Record{Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "other", Value: []byte("x")}, {Key: HeaderID, Value: []byte("e-1")}}}
	if got := eventKey(withID); got != "id:e-1" {
		t.Errorf("eventKey = %q, want the id header", got)
	}
	// A null id: key and value tell the event, a null key from an empty one.
	a := eventKey(&kgo.Record{Key: nil, Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: HeaderID}}})
	b := eventKey(&kgo.Record{Key: []byte{}, Value: []byte("v")})
	c := eventKey(&kgo.Record{Key: []byte{}, Value: []byte("v")})
	if a == b || b != c {
		t.Errorf("keys of null and empty key: %q, %q, %q", a, b, c)
	}
}
