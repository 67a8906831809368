package publish

import (
	"context"
	"sync/atomic"
	"unsafe"

	"github.com/walstream/walstream/decode"
	"golang.org/x/sync/semaphore"
)

// Queue hands transactions from the replication loop to the producer. It is
// bounded by bytes, so a slow broker stops WAL from being read instead of
// filling memory; the slot retains the WAL meanwhile.
//
// A producer whose Kafka transaction lingers does not take transactions one
// by one as they come: each take would wake it, a goroutine switch per row
// at low rates. It sleeps until the linger is over and then takes what has
// come. Only a queue that holds a part of a batch wakes it early, through
// full, so that a backlog still streams and the replication loop never
// waits on a sleeping producer.
type Queue struct {
	ch       chan *decode.Tx
	sem      *semaphore.Weighted
	maxBytes int64

	// held and events are what the queue holds: the weight and the events
	// of the transactions put and not yet done.
	held, events atomic.Int64
	// batchEvents is how many queued events wake a lingering producer;
	// zero until the producer says, which wakes it for every transaction.
	batchEvents atomic.Int64
	full        chan struct{}
}

// NewQueue returns a queue holding at most maxBytes of event bytes.
func NewQueue(maxBytes int64) *Queue {
	return &Queue{ch: make(chan *decode.Tx, 1<<14), sem: semaphore.NewWeighted(maxBytes), maxBytes: maxBytes,
		full: make(chan struct{}, 1)}
}

// Put enqueues tx, waiting for room. It either enqueues tx or returns
// ctx's error having enqueued nothing, so the caller may retry with the
// same tx after doing other work (such as a status update).
//
// A full queue is refilled in steps of a quarter: Put waits until that much
// is free, not just room for tx. Waiting for tx alone woke the replication
// loop for every transaction the producer took, two goroutine switches per
// row while WAL is read faster than Kafka commits.
func (q *Queue) Put(ctx context.Context, tx *decode.Tx) error {
	w := q.weight(tx)
	step := min(max(w, q.maxBytes/4), q.maxBytes)
	if err := q.sem.Acquire(ctx, step); err != nil {
		return err
	}
	q.sem.Release(step - w)
	q.count(tx, w)
	select {
	case q.ch <- tx:
		q.wake(tx)
		return nil
	case <-ctx.Done():
		q.uncount(tx, w)
		q.sem.Release(w)
		return ctx.Err()
	}
}

// TryPut enqueues tx if there is room now, without waiting. The
// replication loop tries it first, because a deadline context for Put
// costs a timer per transaction.
func (q *Queue) TryPut(tx *decode.Tx) bool {
	w := q.weight(tx)
	if !q.sem.TryAcquire(w) {
		return false
	}
	q.count(tx, w)
	select {
	case q.ch <- tx:
		q.wake(tx)
		return true
	default:
		q.uncount(tx, w)
		q.sem.Release(w)
		return false
	}
}

// wakeAt sets the number of queued events that wakes a lingering producer.
func (q *Queue) wakeAt(events int) { q.batchEvents.Store(int64(events)) }

func (q *Queue) count(tx *decode.Tx, w int64) {
	q.held.Add(w)
	q.events.Add(int64(len(tx.Events)))
}

func (q *Queue) uncount(tx *decode.Tx, w int64) {
	q.held.Add(-w)
	q.events.Add(-int64(len(tx.Events)))
}

// wake tells a lingering producer to take what is queued, once the queue
// holds the number of events wakeAt set or an eighth of its size. Well
// under a batch, so that a backlog streams into the producer while it
// reads on instead of arriving in batch-sized gulps, and well under the
// quarter that Put waits for, so that the replication loop never waits on
// a sleeping producer; at low rates neither is reached.
func (q *Queue) wake(tx *decode.Tx) {
	if len(tx.Events) == 0 {
		return
	}
	be := q.batchEvents.Load()
	if q.held.Load() < q.maxBytes/8 && (be > 0 && q.events.Load() < be) {
		return
	}
	select {
	case q.full <- struct{}{}:
	default:
	}
}

// done releases tx's room once its records are handed to the client.
func (q *Queue) done(tx *decode.Tx) {
	w := q.weight(tx)
	q.uncount(tx, w)
	q.sem.Release(w)
}

// weight is what tx holds in memory: its event bytes and, per event, the
// Event itself, which for outbox rows of a few hundred bytes is as much
// again and which counting tx.Bytes alone let the queue hold unbounded by
// its size. It is at least one byte per Tx so position markers are bounded
// too, and at most the whole queue so that one oversized part still fits.
func (q *Queue) weight(tx *decode.Tx) int64 {
	return min(max(int64(tx.Bytes)+int64(len(tx.Events))*eventOverhead, 1), q.maxBytes)
}

// eventOverhead is the memory of an event beyond tx.Bytes: the Event value
// and the rest of its row (the columns that are not event fields).
const eventOverhead = int64(unsafe.Sizeof(decode.Event{})) + 64
