package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/pipeline"
)

// checkpointTopic is walstream's default checkpoint topic; walbench leaves
// it at the default.
const checkpointTopic = "walstream.checkpoints"

// confirmWatch measures how long after a Kafka commit the slot's
// confirmed_flush_lsn covers it: a read_committed consumer notes when each
// checkpoint becomes visible, and a poller notes, every 10 ms, when the
// slot's confirmed_flush_lsn moves. What slot-lag dashboards read trails
// Kafka by that much.
type confirmWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	seen   []position // checkpoints as they became visible
	moved  []position // confirmed_flush_lsn as it moved
	failed error
}

type position struct {
	at  time.Time
	lsn pglogrepl.LSN
}

const confirmPoll = 10 * time.Millisecond

func startConfirmWatch(broker, pgURL, slot string) (*confirmWatch, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(checkpointTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		return nil, fmt.Errorf("creating the checkpoint consumer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		cancel()
		cl.Close()
		return nil, fmt.Errorf("connecting the confirm poller: %w", err)
	}
	// walstream's checkpoint key at its defaults is its stream name.
	var database string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&database); err != nil {
		cancel()
		cl.Close()
		conn.Close(context.Background())
		return nil, fmt.Errorf("reading the database name: %w", err)
	}
	key := pipeline.StreamName(database, slot)
	w := &confirmWatch{cancel: cancel}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		defer cl.Close()
		for {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			if ctx.Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				if string(r.Key) != key {
					return
				}
				cp, _, err := checkpoint.Decode(r.Value)
				w.mu.Lock()
				defer w.mu.Unlock()
				if err != nil {
					w.fail(err)
					return
				}
				if n := len(w.seen); n == 0 || cp.LSN > w.seen[n-1].lsn {
					w.seen = append(w.seen, position{now, cp.LSN})
				}
			})
		}
	}()
	go func() {
		defer w.wg.Done()
		defer conn.Close(context.Background())
		t := time.NewTicker(confirmPoll)
		defer t.Stop()
		for {
			var text string
			err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&text)
			now := time.Now()
			if ctx.Err() != nil {
				return
			}
			lsn, perr := pglogrepl.ParseLSN(text)
			w.mu.Lock()
			switch {
			case err != nil:
				w.fail(fmt.Errorf("polling confirmed_flush_lsn of slot %s: %w", slot, err))
			case perr != nil:
				w.fail(perr)
			case len(w.moved) == 0 || lsn > w.moved[len(w.moved)-1].lsn:
				w.moved = append(w.moved, position{now, lsn})
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w, nil
}

func (w *confirmWatch) fail(err error) {
	if w.failed == nil {
		w.failed = err
	}
}

// stop ends the watch and returns, in µs, the delay from each checkpoint
// that became visible in [from, to] to the first poll that found the slot
// confirmed at or past it, and how many were never confirmed: those count
// with the delay until the watch stopped, a lower bound.
func (w *confirmWatch) stop(from, to time.Time) (delays []int64, unconfirmed int, err error) {
	stopped := time.Now()
	w.cancel()
	w.wg.Wait()
	if w.failed != nil {
		return nil, 0, w.failed
	}
	j := 0
	for _, s := range w.seen {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		for j < len(w.moved) && w.moved[j].lsn < s.lsn {
			j++
		}
		if j == len(w.moved) {
			unconfirmed++
			delays = append(delays, stopped.Sub(s.at).Microseconds())
			continue
		}
		delays = append(delays, max(w.moved[j].at.Sub(s.at), 0).Microseconds())
	}
	return delays, unconfirmed, nil
}
