package store

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
)

// checkpoints are the checkpoints of key slot-a, written under txid, in
// the checkpoint topic of broker.
func checkpoints(t *testing.T, broker, txid string) *Checkpoints {
	t.Helper()
	return New(Config{Kafka: kafka.Settings{Brokers: []string{broker}}, Topic: "walstream.checkpoints", Key: "slot-a",
		TransactionalID: txid, CommitTimeout: 10 * time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// commit commits a checkpoint record under key slot-a, as owner wrote it,
// in a transaction of txid.
func commit(t *testing.T, broker, txid string, cp checkpoint.Checkpoint, owner checkpoint.Owner) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID(txid))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	value := cp.Encode(owner, time.Now())
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "walstream.checkpoints", Key: []byte("slot-a"), Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// openForeign opens a transaction of another producer on the checkpoint
// topic, with a record under key, and leaves it open: a stream frozen
// mid-commit, a paused pod. end ends it.
func openForeign(t *testing.T, broker, txid, key string) (end func(kgo.TransactionEndTry)) {
	t.Helper()
	value := checkpoint.Checkpoint{LSN: 0x7777}.Encode(checkpoint.Owner{Stream: "other", Slot: "other-slot", TransactionalID: txid}, time.Now())
	return testenv.OpenTransaction(t, broker, txid, "walstream.checkpoints", key, value)
}

// A record under the stream's own key in another producer's open
// transaction is reported open, with the producer's transactional id, and
// is no checkpoint until its marker says it committed.
func TestOpenRecordUnderKey(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	ctx := context.Background()
	c := checkpoints(t, broker, "tx-a")
	if _, err := c.ReadCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	commit(t, broker, "tx-a", checkpoint.Checkpoint{LSN: 0x100}, checkpoint.Owner{Slot: "slot-a", TransactionalID: "tx-a"})
	if rd, err := decided(ctx, c); err != nil || rd.Checkpoint.LSN != 0x100 {
		t.Fatalf("ReadCheckpoint = %+v, %v; want 0/100 committed", rd, err)
	}
	end := openForeign(t, broker, "tx-shared", "slot-a")
	rd, err := c.ReadCheckpoint(ctx)
	if err != nil || !rd.Found || rd.Checkpoint.LSN != 0x100 || len(rd.Open) != 1 {
		t.Fatalf("ReadCheckpoint = %+v, %v; want 0/100 with one open record", rd, err)
	}
	if o := rd.Open[0]; o.TransactionalID != "tx-shared" || o.Checkpoint.Owner.Slot != "other-slot" ||
		!strings.Contains(o.String(), "transactional id tx-shared") {
		t.Errorf("open record %+v (%s)", o, o)
	}
	end(kgo.TryCommit)
	rd, err = decided(ctx, c)
	if err != nil || rd.Checkpoint.LSN != 0x7777 || rd.Writer != "tx-shared" || len(rd.Open) != 0 {
		t.Fatalf("after the commit: ReadCheckpoint = %+v, %v; want the other producer's 0/7777", rd, err)
	}
}

// A checkpoint record of an earlier version does not name the
// transactional id that wrote it; the transaction coordinator still knows
// it by the record's producer id, and the read asks it.
func TestWriterOfEarlierRecord(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	ctx := context.Background()
	c := checkpoints(t, broker, "tx-new")
	if _, err := c.ReadCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	// As earlier versions wrote it: no transactional id in the record.
	commit(t, broker, "walstream-slot-a", checkpoint.Checkpoint{LSN: 0x8888}, checkpoint.Owner{Slot: "slot-a"})
	rd, err := decided(ctx, c)
	if err != nil || rd.Checkpoint.LSN != 0x8888 || rd.Checkpoint.Owner.TransactionalID != "" || rd.Writer != "walstream-slot-a" {
		t.Fatalf("ReadCheckpoint = %+v, %v; want 0/8888 written by walstream-slot-a", rd, err)
	}
}

// decided reads c's checkpoint once nothing under its key is open: under
// transaction version 2, EndTxn returns before the coordinator writes the
// markers, and until then a record is open.
func decided(ctx context.Context, c *Checkpoints) (rd Read, err error) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if rd, err = c.ReadCheckpoint(ctx); err != nil || len(rd.Open) == 0 || time.Now().After(deadline) {
			return rd, err
		}
	}
}

// What became of the transaction of an open checkpoint record, as its
// coordinator says (testCoordinatorFate) and as its markers in the other
// topics it wrote say (testMarkerFate). On Apache Kafka, with transaction
// version 2 (an epoch per transaction) and 1, one broker each.
func TestOpenRecordFate(t *testing.T) {
	for _, kind := range []testenv.BrokerKind{testenv.BrokerKafka, testenv.BrokerKafkaTV1} {
		t.Run(string(kind), func(t *testing.T) {
			broker := testenv.StartBroker(t, kind).Addr()
			t.Run("coordinator", func(t *testing.T) { testCoordinatorFate(t, broker) })
			t.Run("markers", func(t *testing.T) { testMarkerFate(t, broker, kind == testenv.BrokerKafka) })
		})
	}
}

// The coordinator's word on the transaction of an open checkpoint record
// of the stream's own transactional id: committed or aborted only while
// the id's last transaction, under the record's producer id and epoch, is
// ending or ended so. Once the id's producer id is initialized again the
// coordinator no longer tells, and the record is undecided; so it is when
// the coordinator cannot be asked.
func testCoordinatorFate(t *testing.T, broker string) {
	ctx := context.Background()
	c := checkpoints(t, broker, "tx-c")
	if _, err := c.ReadCheckpoint(ctx); err != nil { // creates the checkpoint topic
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID("tx-c"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	write := func() OpenRecord {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		value := checkpoint.Checkpoint{LSN: 0x100}.Encode(checkpoint.Owner{Slot: "slot-a", TransactionalID: "tx-c"}, time.Now())
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: "walstream.checkpoints", Key: []byte("slot-a"), Value: value}).First()
		if err != nil {
			t.Fatal(err)
		}
		return OpenRecord{Partition: r.Partition, Offset: r.Offset, ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, TransactionalID: "tx-c"}
	}
	end := func(try kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.EndTransaction(ctx, try); err != nil {
			t.Fatal(err)
		}
	}
	fate := func(o OpenRecord, want kafka.Fate, what string) {
		t.Helper()
		if f, err := c.CoordinatorFate(ctx, o); err != nil || f != want {
			t.Errorf("%s: %s, %v; want %s", what, f, err, want)
		}
	}
	first := write()
	fate(first, kafka.FateOpen, "a transaction still open")
	end(kgo.TryCommit)
	fate(first, kafka.FateCommitted, "the transaction committed")
	second := write()
	end(kgo.TryAbort)
	fate(second, kafka.FateAborted, "the transaction aborted")
	third := write()
	end(kgo.TryCommit)
	fate(third, kafka.FateCommitted, "the last transaction committed")
	// A producer of tx-c initializes its producer id, as the stream's does
	// at its Fence.
	fence(t, broker, "tx-c")
	fate(third, kafka.FateOpen, "after the fencing, the coordinator no longer telling")
	// A coordinator that cannot be asked decides nothing.
	unreachable := New(Config{Kafka: kafka.Settings{Brokers: []string{"127.0.0.1:1"}}, Topic: "walstream.checkpoints", Key: "slot-a",
		TransactionalID: "tx-c"}, slog.New(slog.DiscardHandler))
	if f, err := unreachable.CoordinatorFate(ctx, third); err == nil || f != kafka.FateOpen {
		t.Errorf("a coordinator that cannot be asked: %s, %v; want undecided, with the error", f, err)
	}
}

// A checkpoint record its partition shows open is decided by its
// transaction's markers in the other topics it wrote, as the record names
// them: a marker of the record's producer id of a later epoch, following
// its records. Under transaction version 2 a commit and an abort both bump
// the epoch; under version 1 only an abort by a fencing does, and a commit
// stays undecided. A record that names no other topics is undecided.
// Another producer writes the same partitions all along.
func testMarkerFate(t *testing.T, broker string, tv2 bool) {
	ctx := context.Background()
	const outbox = "outbox.event.Order"
	c := checkpoints(t, broker, "tx-m")
	if _, err := c.ReadCheckpoint(ctx); err != nil { // creates the checkpoint topic
		t.Fatal(err)
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 3, 1, nil, outbox); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID("tx-m"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Another producer writes the same partitions all along.
	other, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	busy := func() {
		t.Helper()
		for p := range int32(3) {
			if err := other.ProduceSync(ctx, &kgo.Record{Topic: outbox, Partition: p, Value: []byte("other")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	write := func(wrote []string) OpenRecord {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		busy()
		for _, p := range []int32{0, 2} {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: outbox, Partition: p, Value: []byte("event")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		busy()
		cp := checkpoint.Checkpoint{LSN: 0x100}
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: "walstream.checkpoints", Key: []byte("slot-a"),
			Value: cp.EncodeIn(checkpoint.Owner{Slot: "slot-a", TransactionalID: "tx-m"}, time.Now(), wrote)}).First()
		if err != nil {
			t.Fatal(err)
		}
		o := OpenRecord{Partition: r.Partition, Offset: r.Offset, ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, TransactionalID: "tx-m"}
		o.Checkpoint, _, _ = checkpoint.Decode(r.Value)
		o.Wrote = checkpoint.Wrote(r.Value)
		return o
	}
	end := func(try kgo.TransactionEndTry) {
		t.Helper()
		if err := cl.EndTransaction(ctx, try); err != nil {
			t.Fatal(err)
		}
		busy()
	}
	// fate waits for the markers: under transaction version 2, EndTxn
	// returns before the coordinator writes them.
	fate := func(o OpenRecord, want kafka.Fate, what string) {
		t.Helper()
		var f kafka.Fate
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if f, err = c.MarkerFate(ctx, o); err != nil || f == want || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || f != want {
			t.Errorf("%s: %s, %v; want %s", what, f, err, want)
		}
	}
	wrote := []string{outbox, "walstream.checkpoints"}
	committed := write(wrote)
	fate(committed, kafka.FateOpen, "open")
	end(kgo.TryCommit)
	if tv2 {
		fate(committed, kafka.FateCommitted, "committed")
	} else {
		fate(committed, kafka.FateOpen, "committed, under transaction version 1")
	}
	aborted := write(wrote)
	end(kgo.TryAbort)
	if tv2 {
		fate(aborted, kafka.FateAborted, "aborted")
	}
	open := write(wrote)
	fate(open, kafka.FateOpen, "open after others ended")
	// The stream's next instance fences the id: Kafka aborts the open
	// transaction with an epoch bumped.
	fence(t, broker, "tx-m")
	busy()
	fate(open, kafka.FateAborted, "aborted by the fencing")
	if tv2 {
		fate(committed, kafka.FateCommitted, "committed, after later transactions")
	}
	// A record that names no other topic is not decided.
	old := committed
	old.Wrote = nil
	if f, err := c.MarkerFate(ctx, old); err == nil || f != kafka.FateOpen {
		t.Errorf("a record naming no topics: %s, %v; want undecided, with why", f, err)
	}
}

// fence initializes a producer id of the transactional id txid, as a
// stream's producer does at its Fence: Kafka aborts the id's open
// transaction with its epoch bumped.
func fence(t *testing.T, broker, txid string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID(txid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, _, err := cl.ProducerID(context.Background()); err != nil {
		t.Fatal(err)
	}
}
