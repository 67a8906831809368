package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
)

// testOutbox is the mapping of the producer tests' events.
var testOutbox = &decode.Outbox{Schema: "public", Table: "outbox", Columns: decode.DefaultColumns(),
	TopicRegex: decode.DefaultTopicRegex, TopicReplacement: decode.DefaultTopicReplacement}

// fakePositions stands in for checkpoint.Tracker: committed is told each
// checkpoint Kafka committed.
type fakePositions struct {
	resume, done checkpoint.Checkpoint
	at           time.Time
	committed    func(checkpoint.Checkpoint)
}

var _ positions = (*fakePositions)(nil)

func (f *fakePositions) Resume() checkpoint.Checkpoint               { return f.resume }
func (f *fakePositions) InKafka() (checkpoint.Checkpoint, time.Time) { return f.done, f.at }
func (f *fakePositions) Committed(cp checkpoint.Checkpoint, _ int, _ time.Time) error {
	f.done, f.at = cp, time.Now()
	f.committed(cp)
	return nil
}

func newProducer(t *testing.T, broker, txid string) *Producer {
	t.Helper()
	return newProducerWith(t, broker, txid, func(*Config) {})
}

// newProducerWith is newProducer with the configuration changed by mod.
func newProducerWith(t *testing.T, broker, txid string, mod func(*Config)) *Producer {
	t.Helper()
	return newProducerMetrics(t, broker, txid, nil, mod)
}

// newProducerMetrics is newProducerWith reporting to m.
func newProducerMetrics(t *testing.T, broker, txid string, m *Metrics, mod func(*Config)) *Producer {
	t.Helper()
	cfg := Config{Outboxes: []*decode.Outbox{testOutbox},
		Kafka: kafka.Settings{Brokers: []string{broker}}, TransactionalID: txid, CheckpointTopic: "walstream.checkpoints", CheckpointKey: "slot-a",
		Slot: "slot-a", MaxBatchEvents: 100, MaxBatchBytes: 1 << 20,
		Linger: time.Millisecond, IdleInterval: 50 * time.Millisecond, CommitTimeout: 10 * time.Second, MaxRecordBytes: 1 << 20,
	}
	mod(&cfg)
	p, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// runProducer fences p and runs it, from start, on a queue until ctx ends:
// committed gets each checkpoint it settles, errc what Run returns.
func runProducer(ctx context.Context, t *testing.T, p *Producer, start checkpoint.Checkpoint) (q *Queue, committed chan checkpoint.Checkpoint, errc chan error) {
	t.Helper()
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	committed = make(chan checkpoint.Checkpoint, 100)
	p.Start(&fakePositions{resume: start, done: start, at: time.Now(), committed: func(cp checkpoint.Checkpoint) { committed <- cp }})
	q = NewQueue(1 << 20)
	errc = make(chan error, 1)
	go func() { errc <- p.Run(ctx, q) }()
	return q, committed, errc
}

// checkpoints are the checkpoints p writes, read as a session reads them.
func checkpoints(p *Producer) *store.Checkpoints {
	return store.New(store.Config{Kafka: p.cfg.Kafka, Topic: p.cfg.CheckpointTopic, Key: p.cfg.CheckpointKey,
		TransactionalID: p.cfg.TransactionalID, CommitTimeout: p.cfg.CommitTimeout, TopicCreation: p.cfg.TopicCreation}, p.log)
}

func event(ordinal uint64, id string) decode.Event {
	return decode.Event{Identity: decode.Identity{Ordinal: ordinal, ID: []byte(id)}, Source: testOutbox, AggregateType: []byte("Order"), AggregateID: []byte("o-1"), Payload: []byte("{}")}
}

// runUntil runs the producer over txs and returns once the tracker saw want.
func runUntil(t *testing.T, p *Producer, want checkpoint.Checkpoint, txs ...*decode.Tx) {
	t.Helper()
	// Each run resumes where the last one committed, as a new session would.
	from := &fakePositions{at: time.Now()}
	if last, ok := p.tracker.(*fakePositions); ok {
		from.resume, from.done = last.done, last.done
	}
	runFrom(t, p, from, want, txs...)
}

// runFrom starts the producer on from, runs it over txs and returns once
// from was told want committed.
func runFrom(t *testing.T, p *Producer, from *fakePositions, want checkpoint.Checkpoint, txs ...*decode.Tx) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := NewQueue(1 << 20)
	reached := make(chan struct{})
	from.committed = func(cp checkpoint.Checkpoint) {
		// The position decides; the event count each checkpoint carries is
		// checked where a test names it.
		if cp.PartialCommitLSN == want.PartialCommitLSN && cp.Ordinal == want.Ordinal && cp.LSN == want.LSN {
			close(reached)
		}
	}
	p.Start(from)
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx, q) }()
	for _, tx := range txs {
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	awaitRun(ctx, t, reached, errc, fmt.Sprintf("checkpoint %s committed", want))
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

// awaitRun waits until reached is closed: what names it. Run ending first
// (errc) or ctx failing the wait fails the test.
func awaitRun(ctx context.Context, t *testing.T, reached <-chan struct{}, errc <-chan error, what string) {
	t.Helper()
	select {
	case <-reached:
	case err := <-errc:
		t.Fatalf("Run ended before %s: %v", what, err)
	case <-ctx.Done():
		t.Fatalf("not %s in time", what)
	}
}

// The checkpoint read back is the last committed one: records of an
// aborted transaction, which a crashed instance leaves behind, are not.
func TestCheckpointRoundTrip(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx := context.Background()
	p := newProducer(t, broker, "tx-a")
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if rd, err := checkpoints(p).ReadCheckpoint(ctx); err != nil || rd.Found {
		t.Fatalf("fresh broker: found=%v err=%v, want no checkpoint", rd.Found, err)
	}
	// Each checkpoint counts the events published up to it, and names the
	// last transaction published.
	whole := checkpoint.Checkpoint{LSN: 0x2000, Events: 2, Counted: true, Last: checkpoint.Last{Xid: 5, CommitLSN: 0x1000}}
	runUntil(t, p, whole, &decode.Tx{Xid: 5, CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{event(1, "a"), event(2, "b")}, Bytes: 10})
	committed := time.Date(2026, 12, 6, 1, 2, 3, 456789000, time.UTC)
	partial := checkpoint.Checkpoint{LSN: 0x2000, PartialCommitLSN: 0x3000, Ordinal: 1, Events: 3, Counted: true,
		Last: checkpoint.Last{Xid: 6, CommitLSN: 0x3000, CommitTime: committed}}
	runUntil(t, p, partial, &decode.Tx{Xid: 6, CommitLSN: 0x3000, CommitTime: committed, Events: []decode.Event{event(1, "c")}, Bytes: 5})

	// A transaction left open by a dead instance, then aborted by the next
	// one's Fence, must not count.
	zombie := newProducer(t, broker, "tx-a")
	if err := zombie.client.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	zombie.client.Produce(ctx, &kgo.Record{Topic: "walstream.checkpoints", Key: []byte("slot-a"),
		Value: checkpoint.Checkpoint{LSN: 0x9000}.Encode(checkpoint.Owner{Slot: "slot-a"}, time.Now())}, nil)
	if err := zombie.client.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	next := newProducer(t, broker, "tx-a")
	if err := next.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	rd, err := checkpoints(next).ReadCheckpoint(ctx)
	if partial.Owner = (checkpoint.Owner{Slot: "slot-a", TransactionalID: "tx-a"}); err != nil || !rd.Found || rd.Checkpoint != partial || len(rd.Open) > 0 {
		t.Fatalf("ReadCheckpoint = %+v err=%v, want %v", rd, err, partial)
	}
	// The zombie can no longer commit, and the checkpoint stays.
	if err := zombie.client.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("a fenced producer committed")
	}
	if rd, err := checkpoints(next).ReadCheckpoint(ctx); err != nil || rd.Checkpoint != partial {
		t.Fatalf("after the zombie's commit attempt: ReadCheckpoint = %+v, %v; want %v", rd, err, partial)
	}
	// The history holds every committed record, oldest first, and not the
	// aborted one.
	h, err := checkpoints(next).CheckpointHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Owner = partial.Owner; len(h) != 2 || h[0] != whole || h[1] != partial {
		t.Fatalf("CheckpointHistory = %v, want [%v %v]", h, whole, partial)
	}
}

// Two slots sharing the checkpoint topic keep separate checkpoints.
func TestCheckpointKeysAreSeparate(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx := context.Background()
	a := newProducer(t, broker, "tx-a")
	a.cfg.CheckpointKey = "slot-a"
	b := newProducer(t, broker, "tx-b")
	b.cfg.CheckpointKey = "slot-b"
	for _, p := range []*Producer{a, b} {
		if err := p.Fence(ctx); err != nil {
			t.Fatal(err)
		}
	}
	runUntil(t, a, checkpoint.Checkpoint{LSN: 0x100}, decode.Marker(0x100))
	runUntil(t, b, checkpoint.Checkpoint{LSN: 0x900}, decode.Marker(0x900))
	for p, want := range map[*Producer]checkpoint.Checkpoint{a: {LSN: 0x100}, b: {LSN: 0x900}} {
		rd, err := checkpoints(p).ReadCheckpoint(ctx)
		if want.Owner = (checkpoint.Owner{Slot: p.cfg.Slot, TransactionalID: p.cfg.TransactionalID}); err != nil || !rd.Found || rd.Checkpoint != want {
			t.Fatalf("%s: ReadCheckpoint = %+v err=%v, want %v", p.cfg.CheckpointKey, rd, err, want)
		}
	}
}

// A batch due takes the transactions queued by then, for as long as the
// commit before took, even at a Linger of zero: a stream behind its load
// catches up in few Kafka transactions, not in one or two rows each (Run's
// select picks the due batch or a queued transaction at random).
func TestDueBatchTakesWhatIsQueued(t *testing.T) {
	k := testenv.StartKfake(t)
	_, commits, _ := watchCommits(k)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newProducerWith(t, k.Addr(), "tx-due", func(c *Config) { c.Linger, c.MaxBatchEvents = 0, 1000 })
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	const rows = 200
	last := pglogrepl.LSN(0x1000 + rows*0x100)
	done := make(chan struct{})
	p.Start(&fakePositions{at: time.Now(), committed: func(cp checkpoint.Checkpoint) {
		if cp.LSN == last+0x10 {
			close(done)
		}
	}})
	q := NewQueue(1 << 20)
	for i := range rows {
		if err := q.Put(ctx, oneRow(pglogrepl.LSN(0x1000+(i+1)*0x100), fmt.Sprint("e", i))); err != nil {
			t.Fatal(err)
		}
	}
	before := commits.Load()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx, q) }()
	awaitRun(ctx, t, done, errc, "the last transaction committed")
	cancel()
	<-errc
	// Taken one or two at a time, they were about half as many Kafka
	// transactions as rows (106 of 200). Each due batch takes what is
	// queued for as long as the commit before took: on a loaded machine
	// (tests beside it) a few batches, never a tenth of the rows.
	n := commits.Load() - before
	t.Logf("%d rows queued before Run: %d Kafka transactions", rows, n)
	if n > rows/10 {
		t.Fatalf("%d rows queued before Run took %d Kafka transactions, want at most %d", rows, n, rows/10)
	}
}

// Transactions queued while a batch lingers join it: the producer takes
// them when the batch is due, in one Kafka transaction, rather than being
// woken by each.
func TestLingeringBatchTakesWhatWasQueued(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A linger well beyond the puts' 60 ms of pauses, which a loaded
	// machine may stretch: the last must come while the batch lingers.
	const linger = time.Second
	p := newProducerWith(t, broker, "tx-linger", func(c *Config) { c.Linger = linger })
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	var commits []checkpoint.Checkpoint
	var mu sync.Mutex
	last := make(chan struct{})
	pos := &fakePositions{at: time.Now(), committed: func(cp checkpoint.Checkpoint) {
		mu.Lock()
		defer mu.Unlock()
		commits = append(commits, cp)
		if cp.LSN == 0x5000 {
			close(last)
		}
	}}
	p.Start(pos)
	q := NewQueue(1 << 20)
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx, q) }()
	start := time.Now()
	for i := range 4 {
		lsn := pglogrepl.LSN(0x2000 + i*0x1000)
		tx := &decode.Tx{CommitLSN: lsn - 0x10, EndLSN: lsn, Final: true, Events: []decode.Event{event(1, fmt.Sprint("e", i))}, Bytes: 10}
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	awaitRun(ctx, t, last, errc, "the last transaction committed")
	if waited := time.Since(start); waited < linger {
		t.Fatalf("committed after %s, before the %s linger", waited, linger)
	}
	cancel()
	<-errc
	mu.Lock()
	defer mu.Unlock()
	if len(commits) != 1 || commits[0].Events != 4 {
		t.Fatalf("commits = %v, want one Kafka transaction of all 4 events", commits)
	}
}
