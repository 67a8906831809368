package publish

import (
	"testing"

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
