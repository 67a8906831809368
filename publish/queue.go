package publish

import (
	"context"
	"unsafe"

	"github.com/walstream/walstream/decode"
	"golang.org/x/sync/semaphore"
)

// Queue hands transactions from the replication loop to the producer, and
// re-emitted chunks from the reemitter. It is bounded by bytes, so a slow
// broker stops WAL from being read instead of filling memory; the slot
// retains the WAL meanwhile. Chunks wait in a lane of their own, which the
// producer takes from only while no transaction is queued: a live
// transaction waits behind the chunk being committed at most, not behind
// the next one too.
type Queue struct {
	ch       chan *decode.Tx
	chunks   chan *decode.Tx
	sem      *semaphore.Weighted
	maxBytes int64
}

// NewQueue returns a queue holding at most maxBytes of event bytes.
func NewQueue(maxBytes int64) *Queue {
	return &Queue{ch: make(chan *decode.Tx, 1<<14), chunks: make(chan *decode.Tx, 1), sem: semaphore.NewWeighted(maxBytes), maxBytes: maxBytes}
}

// lane is the channel tx goes through.
func (q *Queue) lane(tx *decode.Tx) chan *decode.Tx {
	if tx.Chunk != nil {
		return q.chunks
	}
	return q.ch
}

// next is the lane the producer takes from: both, unless a transaction
// is queued, which goes first.
func (q *Queue) next() (live, chunks <-chan *decode.Tx) {
	if len(q.ch) > 0 {
		return q.ch, nil
	}
	return q.ch, q.chunks
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
	select {
	case q.lane(tx) <- tx:
		return nil
	case <-ctx.Done():
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
	select {
	case q.lane(tx) <- tx:
		return true
	default:
		q.sem.Release(w)
		return false
	}
}

// done releases tx's room once its records are handed to the client.
func (q *Queue) done(tx *decode.Tx) { q.sem.Release(q.weight(tx)) }

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
