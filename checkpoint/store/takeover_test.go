package store

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/publish/format"
)

// The count of an identity's records: the most any one run of Debezium
// wrote, and every record walstream wrote; each claims one.
func TestTally(t *testing.T) {
	const own = 7
	for _, c := range []struct {
		name string
		pids []int64
		want int
	}{
		{"one record", []int64{1}, 1},
		{"two events of one run", []int64{1, 1}, 2},
		{"one event written by two runs", []int64{1, 2}, 1},
		{"two events of one run, one written again by the next", []int64{1, 1, 2}, 2},
		{"walstream's own", []int64{own, own}, 2},
		{"Debezium's and walstream's", []int64{1, 2, own}, 2},
		{"non-idempotent producers (no producer id)", []int64{-1, -1}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tl tally
			for _, pid := range c.pids {
				tl.add(pid, own)
			}
			if got := tl.copies(); got != c.want {
				t.Fatalf("copies = %d, want %d", got, c.want)
			}
			for i := range c.want {
				if !tl.claim() {
					t.Fatalf("claim %d refused", i+1)
				}
			}
			if tl.claim() {
				t.Fatalf("claim %d granted, want at most %d", c.want+1, c.want)
			}
		})
	}
	var none *tally
	if none.claim() {
		t.Fatal("an identity without records claimed one")
	}
}

// An event without an id is never taken for one Debezium published: a
// record of equal key and value in the topic, published before Debezium's
// offset (read because of the lookback, claimed by no event of the
// stretch), would otherwise excuse it, and the event would be lost. An
// event with an id is found as before.
func TestLookupIdlessEvents(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	idless := func() *kgo.Record {
		return &kgo.Record{Topic: "outbox.event.Order", Key: []byte("k"), Value: []byte(`"same"`), Headers: []kgo.RecordHeader{{Key: format.HeaderID}}}
	}
	withID := func() *kgo.Record {
		return &kgo.Record{Topic: "outbox.event.Order", Key: []byte("o-1"), Value: []byte(`{"n":1}`), Headers: []kgo.RecordHeader{{Key: format.HeaderID, Value: []byte("r")}}}
	}
	// Debezium's records: one without an id, one with.
	if err := cl.ProduceSync(ctx, idless(), withID()).FirstErr(); err != nil {
		t.Fatal(err)
	}
	l := NewLookup(&checkpoint.Takeover{Since: time.Now().Add(-time.Minute)}, []kgo.Opt{kgo.SeedBrokers(broker)},
		func(context.Context) (int64, error) { return 1 << 40, nil }, slog.New(slog.DiscardHandler))
	if found, err := l.Has(ctx, idless()); err != nil || found {
		t.Errorf("an event without an id, of the key and value of a record in the topic: found %v, %v; want published", found, err)
	}
	if found, err := l.Has(ctx, withID()); err != nil || !found {
		t.Errorf("an event of an id in the topic: found %v, %v; want found", found, err)
	}
	if checked, found, without := l.Counts(); checked != 1 || found != 1 || without != 1 {
		t.Errorf("counts: %d checked, %d found, %d without an id; want 1, 1, 1", checked, found, without)
	}
}
