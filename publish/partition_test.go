package publish

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
)

// partitioned is an event of key o-1 that names its partition, as
// table.fields.additional.placement with partition has it.
func partitioned(ordinal uint64, id string, partition int32) decode.Event {
	ev := event(ordinal, id)
	ev.Partitioned, ev.Partition = true, partition
	return ev
}

// An event that names its partition is placed there, whatever its key
// hashes to; one naming a partition its topic does not have fails the
// transaction with ErrNoPartition, a permanent error, and nothing of it is
// committed.
func TestEventsOwnPartition(t *testing.T) {
	conn, _ := cluster(t, 1, kfake.SeedTopics(3, "outbox.event.Order"))
	p := producerOn(t, conn, nil, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x2000, Events: 3, Counted: true}, &decode.Tx{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true,
		Events: []decode.Event{partitioned(1, "a", 2), partitioned(2, "b", 0), partitioned(3, "c", 1)}, Bytes: 30})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := testenv.ReadRecords(ctx, conn.Brokers[0], "outbox.event.Order")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, r := range recs {
		got[r.Headers] = r.Partition
	}
	if want := map[string]int32{"id=a": 2, "id=b": 0, "id=c": 1}; len(recs) != 3 || !maps.Equal(got, want) {
		t.Fatalf("records by id header and partition %v, want %v", got, want)
	}

	p.Start(&fakePositions{resume: checkpoint.Checkpoint{LSN: 0x2000}, done: checkpoint.Checkpoint{LSN: 0x2000}, at: time.Now(), committed: func(checkpoint.Checkpoint) {}})
	q := NewQueue(1 << 20)
	if err := q.Put(ctx, &decode.Tx{CommitLSN: 0x3000, EndLSN: 0x3010, Final: true, Events: []decode.Event{partitioned(1, "d", 7)}, Bytes: 10}); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx, q); !errors.Is(err, ErrNoPartition) || !Permanent(err) {
		t.Fatalf("Run = %v, want a permanent ErrNoPartition", err)
	}
	if recs, err := testenv.ReadRecords(ctx, conn.Brokers[0], "outbox.event.Order"); err != nil || len(recs) != 3 {
		t.Fatalf("%d records read (%v), want the 3 committed before", len(recs), err)
	}
}
