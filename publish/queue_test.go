package publish

import (
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

// A lingering producer is woken once the queue holds the events wakeAt
// names or an eighth of its size, not for every transaction put.
func TestQueueWakesForABatch(t *testing.T) {
	woken := func(q *Queue) bool {
		select {
		case <-q.full:
			return true
		default:
			return false
		}
	}
	one := &decode.Tx{Events: make([]decode.Event, 1), Bytes: 100}
	q := NewQueue(1 << 20)
	if !q.TryPut(one) || !woken(q) {
		t.Fatal("before the producer names its batch limit, a put must wake it")
	}
	<-q.ch
	q.done(one)
	q.wakeAt(3)
	for i := range 2 {
		if !q.TryPut(one) {
			t.Fatal("TryPut refused with room left")
		}
		if woken(q) {
			t.Fatalf("woken with %d events queued, under the 3 that wake it", i+1)
		}
	}
	<-q.ch
	q.done(one) // one event left queued
	if !q.TryPut(one) || woken(q) {
		t.Fatal("woken with 2 events queued after one was taken")
	}
	if !q.TryPut(one) || !woken(q) {
		t.Fatal("not woken with 3 events queued")
	}
	if !q.TryPut(decode.Marker(0x10)) || woken(q) {
		t.Fatal("a position marker woke the producer")
	}

	// An eighth of the queue's size wakes it whatever the event count.
	big := &decode.Tx{Events: make([]decode.Event, 1), Bytes: 1 << 17}
	q = NewQueue(1 << 20)
	q.wakeAt(1000)
	if !q.TryPut(big) || !woken(q) {
		t.Fatal("not woken with an eighth of the queue held")
	}
}
