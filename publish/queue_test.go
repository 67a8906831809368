package publish

import (
	"context"
	"testing"
	"time"

	"github.com/walstream/walstream/decode"
)

// The queue weighs a transaction by the memory its events hold, not only
// their field bytes: with 430-byte rows the Event values are as large
// again, and a queue counting field bytes alone held twice its size.
func TestQueueWeighsEventMemory(t *testing.T) {
	q := NewQueue(1 << 20)
	tx := &decode.Tx{Events: make([]decode.Event, 100), Bytes: 100 * 430}
	if got, want := q.weight(tx), int64(100*430)+100*eventOverhead; got != want {
		t.Fatalf("weight = %d, want %d", got, want)
	}
	if eventOverhead < 200 {
		t.Fatalf("eventOverhead = %d, less than an Event value", eventOverhead)
	}
	if got := q.weight(decode.Marker(0x10)); got != 1 {
		t.Fatalf("a position marker weighs %d, want 1", got)
	}
	huge := &decode.Tx{Events: make([]decode.Event, 10000), Bytes: 10 << 20}
	if got, want := q.weight(huge), int64(1<<20); got != want {
		t.Fatalf("an oversized part weighs %d, want the whole queue %d so that it still fits", got, want)
	}
	// Room for ten such transactions, not for an eleventh.
	q = NewQueue(10 * q.weight(tx))
	for i := range 10 {
		if !q.TryPut(tx) {
			t.Fatalf("TryPut %d refused with room left", i)
		}
	}
	if q.TryPut(tx) {
		t.Fatal("TryPut took a transaction over the queue's size")
	}
}

// A Put that waits on a full queue returns only once a quarter of it is
// free, not as soon as there is room for its transaction.
func TestQueuePutWaitsForAQuarter(t *testing.T) {
	tx := &decode.Tx{Events: make([]decode.Event, 1), Bytes: 100}
	w := (&Queue{maxBytes: 1 << 30}).weight(tx)
	q := NewQueue(8 * w)
	for range 8 {
		if !q.TryPut(tx) {
			t.Fatal("TryPut refused with room left")
		}
	}
	put := make(chan error, 1)
	go func() { put <- q.Put(t.Context(), tx) }()
	take := func() {
		<-q.ch
		q.done(tx)
	}
	take() // room for one: not enough
	select {
	case err := <-put:
		t.Fatalf("Put returned (%v) with one transaction of eight free", err)
	case <-time.After(50 * time.Millisecond):
	}
	take() // a quarter free
	select {
	case err := <-put:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Put still waits with a quarter of the queue free")
	}
	// The room it did not need is free again: one more fits.
	if !q.TryPut(tx) {
		t.Fatal("Put kept the room beyond its transaction")
	}
}

// A queued transaction goes before a queued chunk, whatever their order:
// a live transaction waits behind the chunk being committed at most.
func TestQueueTransactionsBeforeChunks(t *testing.T) {
	ctx := context.Background()
	q := NewQueue(1 << 20)
	chunk := &decode.Tx{Chunk: &decode.Chunk{Request: "r"}}
	live := &decode.Tx{CommitLSN: 0x100, EndLSN: 0x110, Final: true}
	for _, tx := range []*decode.Tx{chunk, live} {
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []*decode.Tx{live, chunk} {
		lv, ch := q.next()
		var got *decode.Tx
		select {
		case got = <-lv:
		case got = <-ch:
		}
		if got != want {
			t.Fatalf("took %+v, want %+v", got, want)
		}
		q.done(got)
	}
}
