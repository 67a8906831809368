package publish

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
)

// openForeign opens a transaction of another producer on the checkpoint
// topic, with a record under key, and leaves it open: a stream frozen
// mid-commit, a paused pod. end ends it.
func openForeign(t *testing.T, broker, txid, key string) (end func(kgo.TransactionEndTry)) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID(txid), kgo.TransactionTimeout(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	value := checkpoint.Checkpoint{LSN: 0x7777}.Encode(checkpoint.Owner{Stream: "other", Slot: "other-slot", TransactionalID: txid}, time.Now())
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "walstream.checkpoints", Key: []byte(key), Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ended := false
	end = func(try kgo.TransactionEndTry) {
		if ended {
			return
		}
		ended = true
		if err := cl.EndTransaction(ctx, try); err != nil {
			t.Errorf("ending the foreign transaction: %v", err)
		}
		cl.Close()
	}
	t.Cleanup(func() { end(kgo.TryAbort) })
	return end
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
	if _, err := p.ReadCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x100}, decode.Marker(0x100))

	end := openForeign(t, broker, "tx-foreign", "another-stream")
	// Commits past the open transaction, each confirmed at once: before,
	// each waited the commit timeout for read_committed visibility and
	// failed the session.
	start := time.Now()
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x2000}, &decode.Tx{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{event(1, "a")}, Bytes: 5})
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x3000}, decode.Marker(0x3000))
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("two commits behind an open foreign transaction took %s", d)
	}
	want := checkpoint.Checkpoint{LSN: 0x3000, Events: 1, Counted: true, Owner: checkpoint.Owner{Slot: "slot-a", TransactionalID: "tx-a"}}
	check := func(when string) {
		t.Helper()
		next := newProducer(t, broker, "tx-a")
		if err := next.Fence(ctx); err != nil {
			t.Fatal(err)
		}
		rd, err := next.ReadCheckpoint(ctx)
		if err != nil || !rd.Found || rd.Checkpoint != want || rd.Writer != "tx-a" || len(rd.Open) > 0 {
			t.Fatalf("%s: ReadCheckpoint = %+v, %v; want %v written by tx-a, nothing open", when, rd, err, want)
		}
		cp, _, found, err := ReadCheckpoint(ctx, kafka.Settings{Brokers: []string{broker}}, "walstream.checkpoints", "slot-a")
		if err != nil || !found || cp != want {
			t.Fatalf("%s: ReadCheckpoint = %v, %v, %v; want %v", when, cp, found, err, want)
		}
		next.Close()
	}
	check("while the foreign transaction is open")
	end(kgo.TryAbort)
	check("after it aborted")
}

// A record under the stream's own key in another producer's open
// transaction is reported open, with the producer's transactional id, and
// is no checkpoint until its marker says it committed.
func TestOpenRecordUnderKey(t *testing.T) {
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	ctx := context.Background()
	p := newProducer(t, broker, "tx-a")
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x100}, decode.Marker(0x100))
	end := openForeign(t, broker, "tx-shared", "slot-a")
	rd, err := p.ReadCheckpoint(ctx)
	if err != nil || !rd.Found || rd.Checkpoint.LSN != 0x100 || len(rd.Open) != 1 {
		t.Fatalf("ReadCheckpoint = %+v, %v; want 0/100 with one open record", rd, err)
	}
	if o := rd.Open[0]; o.TransactionalID != "tx-shared" || o.Checkpoint.Owner.Slot != "other-slot" ||
		!strings.Contains(o.String(), "transactional id tx-shared") {
		t.Errorf("open record %+v (%s)", o, o)
	}
	end(kgo.TryCommit)
	rd, err = decided(ctx, p)
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
	p := newProducer(t, broker, "tx-new")
	if _, err := p.ReadCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID("walstream-slot-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	// As earlier versions wrote it: no transactional id in the record.
	old := checkpoint.Checkpoint{LSN: 0x8888}.Encode(checkpoint.Owner{Slot: "slot-a"}, time.Now())
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "walstream.checkpoints", Key: []byte("slot-a"), Value: old}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	rd, err := decided(ctx, p)
	if err != nil || rd.Checkpoint.LSN != 0x8888 || rd.Checkpoint.Owner.TransactionalID != "" || rd.Writer != "walstream-slot-a" {
		t.Fatalf("ReadCheckpoint = %+v, %v; want 0/8888 written by walstream-slot-a", rd, err)
	}
}

// decided reads p's checkpoint once nothing under its key is open: under
// transaction version 2, EndTxn returns before the coordinator writes the
// markers, and until then a record is open.
func decided(ctx context.Context, p *Producer) (rd Read, err error) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if rd, err = p.ReadCheckpoint(ctx); err != nil || len(rd.Open) == 0 || time.Now().After(deadline) {
			return rd, err
		}
	}
}

// The coordinator's word on the transaction of an open checkpoint record
// of the stream's own transactional id: committed only while the id's
// last transaction, under the record's producer id and epoch, is
// committing or committed. Once the id's producer id is initialized again
// the coordinator no longer tells, and the answer is no. On Apache Kafka,
// whose coordinator it asks, with transaction version 2 (an epoch per
// transaction) and 1.
func TestCommittedOpen(t *testing.T) {
	for _, kind := range []testenv.BrokerKind{testenv.BrokerKafka, testenv.BrokerKafkaTV1} {
		t.Run(string(kind), func(t *testing.T) { testCommittedOpen(t, testenv.StartBroker(t, kind).Addr()) })
	}
}

func testCommittedOpen(t *testing.T, broker string) {
	ctx := context.Background()
	p := newProducer(t, broker, "tx-c")
	if _, err := p.ReadCheckpoint(ctx); err != nil { // creates the checkpoint topic
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
	first := write()
	if p.CommittedOpen(ctx, first) {
		t.Error("a transaction still open: reported committed")
	}
	end(kgo.TryCommit)
	if !p.CommittedOpen(ctx, first) {
		t.Error("the transaction committed: not reported committed")
	}
	second := write()
	end(kgo.TryAbort)
	if p.CommittedOpen(ctx, second) || p.CommittedOpen(ctx, first) {
		t.Error("after an aborted transaction: its record, or the one committed before it, reported committed")
	}
	third := write()
	end(kgo.TryCommit)
	if !p.CommittedOpen(ctx, third) {
		t.Error("the last transaction committed: not reported committed")
	}
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if p.CommittedOpen(ctx, third) {
		t.Error("after the fencing: reported committed, though the coordinator no longer tells")
	}
}
