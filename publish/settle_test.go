package publish

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
)

// watchCommits counts, on kfake, the produce requests that carry events
// (any topic but the checkpoint topic) and the commits; while hide is set
// it answers every fetch of the checkpoint topic with nothing
// (testenv.Kfake.HideFetches).
func watchCommits(k *testenv.Kfake) (produced, commits *atomic.Int32, hide *atomic.Bool) {
	produced, commits = new(atomic.Int32), new(atomic.Int32)
	c := k.Cluster()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic != "walstream.checkpoints" {
				produced.Add(1)
				break
			}
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req.(*kmsg.EndTxnRequest).Commit {
			commits.Add(1)
		}
		return nil, nil, false
	})
	hide, _ = k.HideFetches("walstream.checkpoints")
	return produced, commits, hide
}

// oneRow is a one-event Postgres transaction committed at lsn.
func oneRow(lsn pglogrepl.LSN, id string) *decode.Tx {
	tx := &decode.Tx{CommitLSN: lsn, EndLSN: lsn + 0x10, Final: true, Events: []decode.Event{event(1, id)}}
	tx.Bytes = tx.Events[0].Size()
	return tx
}

// running waits up to 10 s for cond while Run, whose result errc
// receives, still runs: a Run that returned early fails the test with its
// error rather than as a wait that timed out.
func running(t *testing.T, errc chan error, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case err := <-errc:
			t.Fatalf("%s: Run returned first: %v", what, err)
		case <-deadline:
			t.Fatalf("%s: not within 10s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A commit is looked for on the checkpoint partition later, not as Kafka
// writes its marker, and found decided before the next commits, whose
// checkpoint covers its events. One Kafka transaction per event
// (MaxBatchEvents 1), and the commit settled only Linger (an hour) after
// it, unless another comes. The look for the hidden marker takes
// CommitTimeout, which bounds the first commit too: 4 s, not 1, lets that
// commit through on a loaded machine.
func TestCommitSettledBeforeTheNext(t *testing.T) {
	for _, tc := range []struct {
		name string
		// queued puts both transactions on the queue before Run: the
		// second begins right after the first commit. Either way it sends
		// nothing before that commit is settled (begin).
		queued bool
	}{{"a while after", false}, {"right after", true}} {
		t.Run(tc.name, func(t *testing.T) {
			k := testenv.StartKfake(t)
			_, commits, hide := watchCommits(k)
			var afterCommit atomic.Int32 // produce requests with events after the first commit
			c := k.Cluster()
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				for _, tp := range req.(*kmsg.ProduceRequest).Topics {
					if tp.Topic != "walstream.checkpoints" && commits.Load() > 0 {
						afterCommit.Add(1)
						break
					}
				}
				return nil, nil, false
			})
			hide.Store(true)
			p := newProducerWith(t, k.Addr(), "tx-settle", func(c *Config) {
				c.MaxBatchEvents, c.Linger, c.IdleInterval, c.CommitTimeout = 1, time.Hour, time.Hour, 4*time.Second
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := p.Fence(ctx); err != nil {
				t.Fatal(err)
			}
			var settled atomic.Int32
			start := checkpoint.Checkpoint{LSN: 0x10}
			p.Start(&fakePositions{resume: start, done: start, at: time.Now(), committed: func(checkpoint.Checkpoint) { settled.Add(1) }})
			q := NewQueue(1 << 20)
			if err := q.Put(ctx, oneRow(0x100, "a")); err != nil {
				t.Fatal(err)
			}
			if tc.queued {
				if err := q.Put(ctx, oneRow(0x200, "b")); err != nil {
					t.Fatal(err)
				}
			}
			errc := make(chan error, 1)
			go func() { errc <- p.Run(ctx, q) }()
			if !tc.queued {
				running(t, errc, "the first commit", func() bool { return commits.Load() == 1 })
				if err := q.Put(ctx, oneRow(0x200, "b")); err != nil {
					t.Fatal(err)
				}
			}
			var ie *InvisibleError
			if err := <-errc; !errors.As(err, &ie) || ie.Checkpoint != (checkpoint.Checkpoint{LSN: 0x110}).String() {
				t.Fatalf("Run = %v, want the first commit (checkpoint 0/110) not visible", err)
			}
			if n := afterCommit.Load(); n != 0 {
				t.Errorf("%d produce requests with events after the first commit, want none while its marker was not found", n)
			}
			if n := commits.Load(); n != 1 {
				t.Errorf("%d commits, want 1: the second committed before the first was found decided", n)
			}
			if n := settled.Load(); n != 0 {
				t.Errorf("%d commits reached the tracker, want none", n)
			}
		})
	}
}

// The last commit, settled only Linger after it, is settled as Run ends
// at its context's end, so that the session's last status update confirms
// it.
func TestLastCommitSettledAtTheEnd(t *testing.T) {
	k := testenv.StartKfake(t)
	_, commits, _ := watchCommits(k)
	p := newProducerWith(t, k.Addr(), "tx-settle-last", func(c *Config) {
		c.MaxBatchEvents, c.Linger, c.IdleInterval = 1, time.Hour, time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	q, got, errc := runProducer(rctx, t, p, checkpoint.Checkpoint{LSN: 0x10})
	if err := q.Put(ctx, oneRow(0x100, "a")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the commit", func() bool { return commits.Load() == 1 })
	select {
	case cp := <-got:
		t.Fatalf("checkpoint %s settled before Linger passed", cp)
	case <-time.After(100 * time.Millisecond):
	}
	stop()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	select {
	case cp := <-got:
		if want := (checkpoint.Checkpoint{LSN: 0x110}); cp.LSN != want.LSN {
			t.Errorf("settled %s, want %s", cp, want)
		}
	default:
		t.Fatal("the last commit was not settled as Run ended")
	}
}

// A commit no other follows is settled within half of CommitTimeout even
// when Linger is longer: its marker was looked for only Linger after it,
// past CommitTimeout, which failed the commit as not visible.
func TestLingerLongerThanCommitTimeout(t *testing.T) {
	k := testenv.StartKfake(t)
	p := newProducerWith(t, k.Addr(), "tx-long-linger", func(c *Config) {
		c.MaxBatchEvents, c.Linger, c.IdleInterval, c.CommitTimeout = 1, time.Hour, time.Hour, 2*time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, got, errc := runProducer(ctx, t, p, checkpoint.Checkpoint{LSN: 0x10})
	if err := q.Put(ctx, oneRow(0x100, "a")); err != nil {
		t.Fatal(err)
	}
	select {
	case cp := <-got:
		if cp.LSN != 0x110 {
			t.Errorf("settled %s, want 0/110", cp)
		}
	case err := <-errc:
		t.Fatalf("Run = %v, want the commit settled", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the commit was not settled within 10 s")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

// Each settled commit is timed from Kafka's answer to its marker read on
// the checkpoint partition (walstream_commit_marker_seconds). On Apache
// Kafka, whose coordinator writes the markers after it answers.
func TestCommitMarkerTimed(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	reg := prometheus.NewRegistry()
	p := newProducerMetrics(t, broker, "tx-marker", NewMetrics(reg), func(c *Config) { c.MaxBatchEvents, c.IdleInterval = 1, time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, got, errc := runProducer(ctx, t, p, checkpoint.Checkpoint{LSN: 0x10})
	for _, tx := range []*decode.Tx{oneRow(0x100, "a"), oneRow(0x200, "b")} {
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	for settled := 0; settled < 2; settled++ {
		select {
		case <-got:
		case err := <-errc:
			t.Fatalf("Run = %v", err)
		case <-ctx.Done():
			t.Fatalf("%d commits settled, want 2", settled)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h *dto.Histogram
	for _, mf := range mfs {
		if mf.GetName() == "walstream_commit_marker_seconds" {
			h = mf.GetMetric()[0].GetHistogram()
		}
	}
	if h == nil || h.GetSampleCount() != 2 || h.GetSampleSum() < 0 || h.GetSampleSum() > 2*p.cfg.CommitTimeout.Seconds() {
		t.Fatalf("walstream_commit_marker_seconds = %v, want 2 samples within the commit timeout", h)
	}
	cancel()
	<-errc
}

// Another producer's transaction open on the checkpoint partition holds
// back its last stable offset, and with it what read_committed readers
// see. A stream must neither wait for it (its commits are confirmed by
// their markers) nor, at its next start, read the checkpoint before it as
// its own, which would publish again what it committed since. On Apache
// Kafka: the broker computes the last stable offset and writes the markers.
func TestForeignTransactionOnCheckpointPartition(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	ctx := context.Background()
	// A commit that waited for the open transaction would wait out the
	// commit timeout and fail the run: 10 s tells that from a loaded
	// machine's slow commits.
	p := newProducerWith(t, broker, "tx-a", func(c *Config) { c.CommitTimeout = 10 * time.Second })
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	// As a session does: this creates the checkpoint topic, of one
	// partition, which every stream's checkpoints share.
	if _, err := checkpoints(p).ReadCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x100}, decode.Marker(0x100))

	end := testenv.OpenTransaction(t, broker, "tx-foreign", "walstream.checkpoints", "another-stream",
		checkpoint.Checkpoint{LSN: 0x7777}.Encode(checkpoint.Owner{Stream: "other", Slot: "other-slot", TransactionalID: "tx-foreign"}, time.Now()))
	// Commits past the open transaction, each confirmed at once: before,
	// each waited the commit timeout for read_committed visibility and
	// failed the session.
	start := time.Now()
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x2000}, &decode.Tx{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{event(1, "a")}, Bytes: 5})
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x3000}, decode.Marker(0x3000))
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("two commits behind an open foreign transaction took %s", d)
	}
	want := checkpoint.Checkpoint{LSN: 0x3000, Events: 1, Counted: true, Last: checkpoint.Last{CommitLSN: 0x1000},
		Owner: checkpoint.Owner{Slot: "slot-a", TransactionalID: "tx-a"}}
	check := func(when string) {
		t.Helper()
		next := newProducer(t, broker, "tx-a")
		if err := next.Fence(ctx); err != nil {
			t.Fatal(err)
		}
		rd, err := checkpoints(next).ReadCheckpoint(ctx)
		if err != nil || !rd.Found || rd.Checkpoint != want || rd.Writer != "tx-a" || len(rd.Open) > 0 {
			t.Fatalf("%s: ReadCheckpoint = %+v, %v; want %v written by tx-a, nothing open", when, rd, err, want)
		}
		cp, _, found, err := store.ReadCheckpoint(ctx, kafka.Settings{Brokers: []string{broker}}, "walstream.checkpoints", "slot-a")
		if err != nil || !found || cp != want {
			t.Fatalf("%s: ReadCheckpoint = %v, %v, %v; want %v", when, cp, found, err, want)
		}
		next.Close()
	}
	check("while the foreign transaction is open")
	end(kgo.TryAbort)
	check("after it aborted")
}
