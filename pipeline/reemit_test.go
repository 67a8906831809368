package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/walstream/walstream/decode"
)

// putQueue takes every chunk at once, as a queue with room does.
type putQueue chan *decode.Tx

func (q putQueue) Put(ctx context.Context, tx *decode.Tx) error {
	select {
	case q <- tx:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ chunkQueue = putQueue(nil)

// The reader hands on chunksAhead chunks the producer is not done with,
// one it publishes and one waiting, and the next only once the producer
// is done with the first: reading and publishing overlap without either
// waiting for the other's every chunk, and no more chunks than that are
// held in memory.
func TestReemitterHandsChunksAhead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := make(putQueue, 10)
	r := &reemitter{out: q}
	chunk := func(req string) *decode.Tx { return &decode.Tx{Chunk: &decode.Chunk{Request: req}} }
	for _, req := range []string{"1", "2"} {
		if err := r.hand(ctx, chunk(req)); err != nil {
			t.Fatalf("handing chunk %s on with fewer than %d outstanding: %v", req, chunksAhead, err)
		}
	}
	handed := make(chan error, 1)
	go func() { handed <- r.hand(ctx, chunk("3")) }()
	select {
	case err := <-handed:
		t.Fatalf("chunk 3 handed on (%v) while the producer was done with neither chunk before it", err)
	case <-time.After(100 * time.Millisecond):
	}
	first := <-q
	first.Chunk.Taken()
	if err := <-handed; err != nil {
		t.Fatalf("chunk 3 after the producer was done with chunk 1: %v", err)
	}
	if second := <-q; second.Chunk.Request != "2" {
		t.Fatalf("second chunk on the queue is %s, want 2", second.Chunk.Request)
	}
	if third := <-q; third.Chunk.Request != "3" {
		t.Fatalf("third chunk on the queue is %s, want 3", third.Chunk.Request)
	}
}
