package store

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

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
	first := write()
	if c.CommittedOpen(ctx, first) {
		t.Error("a transaction still open: reported committed")
	}
	end(kgo.TryCommit)
	if !c.CommittedOpen(ctx, first) {
		t.Error("the transaction committed: not reported committed")
	}
	second := write()
	end(kgo.TryAbort)
	if c.CommittedOpen(ctx, second) || c.CommittedOpen(ctx, first) {
		t.Error("after an aborted transaction: its record, or the one committed before it, reported committed")
	}
	third := write()
	end(kgo.TryCommit)
	if !c.CommittedOpen(ctx, third) {
		t.Error("the last transaction committed: not reported committed")
	}
	// A producer of tx-c initializes its producer id, as the stream's does
	// at its Fence.
	fencer, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID("tx-c"))
	if err != nil {
		t.Fatal(err)
	}
	defer fencer.Close()
	if _, _, err := fencer.ProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	if c.CommittedOpen(ctx, third) {
		t.Error("after the fencing: reported committed, though the coordinator no longer tells")
	}
}
