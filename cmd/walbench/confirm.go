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

// checkpointKey is the key of the measured walstream's checkpoints: at its
// defaults, its stream name.
func checkpointKey(ctx context.Context, conn *pgx.Conn, slot string) (string, error) {
	var database string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&database); err != nil {
		return "", fmt.Errorf("reading the database name: %w", err)
	}
	return pipeline.StreamName(database, slot), nil
}

// checkpointLog is one key's checkpoint records, read read_committed from
// the log's start on. Each record is one Kafka transaction walstream
// committed, and says what it held (kafkaTxns).
type checkpointLog struct {
	key    string
	r      *checkpointReader
	mu     sync.Mutex
	seen   []seenCheckpoint
	failed error
}

// checkpointReader reads the checkpoint topic for the logs of its keys:
// one consumer for a fleet's streams, where one each would add to the
// broker's load under measure ten fetches of every checkpoint.
type checkpointReader struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// seenCheckpoint is a checkpoint record as the log read it.
type seenCheckpoint struct {
	visible time.Time // when the consumer saw it
	// committing is the record's own time: when walstream began to commit
	// the transaction, before it produced the checkpoint record.
	committing time.Time
	cp         checkpoint.Checkpoint
	bytes      int // the record's value
}

// watchCheckpoints starts a log of the measured walstream's checkpoints,
// of its stream on slot.
func (b *bench) watchCheckpoints(ctx context.Context, broker, slot string) (*checkpointLog, error) {
	key, err := checkpointKey(ctx, b.db.conn, slot)
	if err != nil {
		return nil, err
	}
	return startCheckpointLog(broker, key)
}

func startCheckpointLog(broker, key string) (*checkpointLog, error) {
	ls, err := startCheckpointLogs(broker, []string{key})
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// startCheckpointLogs starts a log of each key's checkpoints, all read by
// one consumer.
func startCheckpointLogs(broker string, keys []string) ([]*checkpointLog, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(checkpointTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		return nil, fmt.Errorf("creating the checkpoint consumer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &checkpointReader{cl: cl, cancel: cancel, done: make(chan struct{})}
	logs := make([]*checkpointLog, len(keys))
	byKey := make(map[string]*checkpointLog, len(keys))
	for i, key := range keys {
		logs[i] = &checkpointLog{key: key, r: r}
		byKey[key] = logs[i]
	}
	go func() {
		defer close(r.done)
		for {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			if ctx.Err() != nil {
				return
			}
			fs.EachRecord(func(rec *kgo.Record) {
				if l := byKey[string(rec.Key)]; l != nil {
					l.add(rec, now)
				}
			})
		}
	}()
	return logs, nil
}

// add notes rec, one of the log's checkpoints, seen at now.
func (l *checkpointLog) add(rec *kgo.Record, now time.Time) {
	cp, at, err := checkpoint.Decode(rec.Value)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.failed == nil {
			l.failed = fmt.Errorf("checkpoint of %s at offset %d: %w", l.key, rec.Offset, err)
		}
		return
	}
	l.seen = append(l.seen, seenCheckpoint{visible: now, committing: at, cp: cp, bytes: len(rec.Value)})
}

// stop ends the log's reader, once, and returns what the log read.
func (l *checkpointLog) stop() ([]seenCheckpoint, error) {
	l.r.once.Do(func() {
		l.r.cancel()
		<-l.r.done
		l.r.cl.Close()
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen, l.failed
}

// confirmWatch measures how long after a Kafka commit the slot's
// confirmed_flush_lsn covers it: a checkpoint log notes when each
// checkpoint becomes visible, and a poller notes, every 10 ms, when the
// slot's confirmed_flush_lsn moves. What slot-lag dashboards read trails
// Kafka by that much.
type confirmWatch struct {
	log    *checkpointLog
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	moved  []position // confirmed_flush_lsn as it moved
	failed error
}

type position struct {
	at  time.Time
	lsn pglogrepl.LSN
}

const confirmPoll = 10 * time.Millisecond

func startConfirmWatch(broker, pgURL, slot string) (*confirmWatch, error) {
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("connecting the confirm poller: %w", err)
	}
	key, err := checkpointKey(ctx, conn, slot)
	var log *checkpointLog
	if err == nil {
		log, err = startCheckpointLog(broker, key)
	}
	if err != nil {
		cancel()
		conn.Close(context.Background())
		return nil, err
	}
	w := &confirmWatch{log: log, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
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
// with the delay until the watch stopped, a lower bound. Its log of
// checkpoints stops with it.
func (w *confirmWatch) stop(from, to time.Time) (delays []int64, unconfirmed int, err error) {
	stopped := time.Now()
	w.cancel()
	<-w.done
	seen, err := w.log.stop()
	if err == nil {
		err = w.failed
	}
	if err != nil {
		return nil, 0, err
	}
	// Checkpoints that do not move the position (a commit of notes alone)
	// are not waited for.
	var last pglogrepl.LSN
	j := 0
	for _, s := range seen {
		if s.cp.LSN <= last {
			continue
		}
		last = s.cp.LSN
		if s.visible.Before(from) || s.visible.After(to) {
			continue
		}
		for j < len(w.moved) && w.moved[j].lsn < s.cp.LSN {
			j++
		}
		if j == len(w.moved) {
			unconfirmed++
			delays = append(delays, stopped.Sub(s.visible).Microseconds())
			continue
		}
		delays = append(delays, max(w.moved[j].at.Sub(s.visible), 0).Microseconds())
	}
	return delays, unconfirmed, nil
}
