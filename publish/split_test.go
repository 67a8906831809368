package publish

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
)

// parts splits a transaction of n events committed at commitLSN the way
// decode hands it on with a part limit of limit: every part has events, and
// the last is Final.
func parts(commitLSN pglogrepl.LSN, n, limit int) []*decode.Tx {
	var txs []*decode.Tx
	for first := 1; first <= n; first += limit {
		tx := &decode.Tx{CommitLSN: commitLSN}
		for o := first; o < first+limit && o <= n; o++ {
			tx.Events = append(tx.Events, event(uint64(o), "e"))
			tx.Bytes += tx.Events[len(tx.Events)-1].Size()
		}
		txs = append(txs, tx)
	}
	last := txs[len(txs)-1]
	last.Final, last.EndLSN = true, commitLSN+0x100
	return txs
}

// The Kafka transaction carrying the last part of a split Postgres
// transaction also carries the whole-transaction checkpoint, whether the
// size is an exact multiple of the batch limit or not; and a resumed
// session whose checkpoint is at the last event completes the transaction
// at once. IdleInterval is an hour, so a checkpoint left to the idle timer
// never comes.
func TestSplitTransactionCheckpoint(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	const commit pglogrepl.LSN = 0x5000
	whole := checkpoint.Checkpoint{LSN: commit + 0x100}
	partial := func(ordinal uint64) checkpoint.Checkpoint {
		return checkpoint.Checkpoint{LSN: 0x10, PartialCommitLSN: commit, Ordinal: ordinal}
	}
	for _, tc := range []struct {
		name   string
		resume checkpoint.Checkpoint
		txs    []*decode.Tx
		want   []checkpoint.Checkpoint // committed, in order
	}{
		{"2 x max", checkpoint.Checkpoint{LSN: 0x10}, parts(commit, 4, 2), []checkpoint.Checkpoint{partial(2), whole}},
		{"2 x max + 1", checkpoint.Checkpoint{LSN: 0x10}, parts(commit, 5, 2), []checkpoint.Checkpoint{partial(2), partial(4), whole}},
		{"1 x max", checkpoint.Checkpoint{LSN: 0x10}, parts(commit, 2, 2), []checkpoint.Checkpoint{whole}},
		{"resumed at the last event", partial(4), []*decode.Tx{{CommitLSN: commit, EndLSN: commit + 0x100, Final: true}}, []checkpoint.Checkpoint{whole}},
		// Postgres's keepalive before it sends the transaction again: its
		// position is past the checkpoint's LSN but not past the events
		// of the transaction in Kafka.
		{"resumed at the last event, a keepalive first", partial(4), []*decode.Tx{decode.Marker(commit - 0x1000), {CommitLSN: commit, EndLSN: commit + 0x100, Final: true}}, []checkpoint.Checkpoint{whole}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProducerWith(t, broker, "tx-split", func(c *Config) { c.MaxBatchEvents, c.IdleInterval = 2, time.Hour })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := p.Fence(ctx); err != nil {
				t.Fatal(err)
			}
			got := make(chan checkpoint.Checkpoint, 10)
			// Only the position matters here, not what else the checkpoint
			// records (events counted, the server's identity).
			position := func(cp checkpoint.Checkpoint) checkpoint.Checkpoint {
				return checkpoint.Checkpoint{LSN: cp.LSN, PartialCommitLSN: cp.PartialCommitLSN, Ordinal: cp.Ordinal}
			}
			p.Start(&fakePositions{resume: tc.resume, done: tc.resume, at: time.Now(), committed: func(cp checkpoint.Checkpoint) { got <- position(cp) }})
			q := NewQueue(1 << 20)
			errc := make(chan error, 1)
			go func() { errc <- p.Run(ctx, q) }()
			for _, tx := range tc.txs {
				if err := q.Put(ctx, tx); err != nil {
					t.Fatal(err)
				}
			}
			var seq []checkpoint.Checkpoint
			for len(seq) < len(tc.want) {
				select {
				case cp := <-got:
					seq = append(seq, cp)
				case err := <-errc:
					t.Fatalf("Run ended after committing %v: %v", seq, err)
				case <-ctx.Done():
					t.Fatalf("committed %v, want %v: the whole-transaction checkpoint waits on a timer", seq, tc.want)
				}
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, want context.Canceled", err)
			}
			if !slices.Equal(seq, tc.want) {
				t.Fatalf("committed %v, want %v", seq, tc.want)
			}
		})
	}
}
