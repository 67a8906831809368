package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Hold is a transaction open on a partition of the checkpoint topic that
// holds back the partition's last stable offset: read_committed readers
// of the topic (an operator's tools, anything consuming checkpoints) see
// no record past its first one until it ends, and Kafka ends it at its
// timeout at the latest. walstream itself reads past it (decided.go).
type Hold struct {
	Topic     string
	Partition int32
	// Stable is the partition's last stable offset, End its high
	// watermark.
	Stable, End int64
	// ProducerID is the producer whose transaction starts at Stable; -1
	// when the partition leader could not be asked.
	ProducerID int64
	// TransactionalID is the producer's, empty when its coordinator does
	// not name it.
	TransactionalID string
	// Since is when the transaction started, as its coordinator says, or
	// else the first time this process saw the offset held.
	Since time.Time
	// Timeout is the transaction's timeout; zero when unknown.
	Timeout time.Duration
}

// Holder names the producer: its transactional id, or its producer id.
func (h Hold) Holder() string {
	switch {
	case h.TransactionalID != "":
		return h.TransactionalID
	case h.ProducerID >= 0:
		return fmt.Sprintf("producer id %d", h.ProducerID)
	}
	return "an unknown producer"
}

// String says it in words as of now.
func (h Hold) String() string { return h.Describe(time.Now()) }

// Describe says it in words as of now.
func (h Hold) Describe(now time.Time) string {
	who := fmt.Sprintf("transactional id %s (producer id %d)", h.TransactionalID, h.ProducerID)
	if h.TransactionalID == "" {
		who = h.Holder()
	}
	timeout := ""
	if h.Timeout > 0 {
		timeout = fmt.Sprintf(" of its %s timeout", h.Timeout)
	}
	return fmt.Sprintf("%s-%d is held at offset %d (end %d) by the open transaction of %s, open %s%s",
		h.Topic, h.Partition, h.Stable, h.End, who, now.Sub(h.Since).Round(time.Second), timeout)
}

// holdAfter is how long a transaction must have been open before it
// counts as a hold: every stream's commits keep the offset held for
// milliseconds.
const holdAfter = 5 * time.Second

// holds watches the partitions of a topic for transactions that hold
// their last stable offset back.
type holds struct {
	adm *kadm.Client
	// seen is when each partition was first seen held at its offset.
	seen map[int32]seenAt
}

type seenAt struct {
	offset int64
	at     time.Time
}

func newHolds(cl *kgo.Client) *holds {
	return &holds{adm: kadm.NewClient(cl), seen: make(map[int32]seenAt)}
}

// check returns the transactions open for holdAfter or longer that hold
// the last stable offset of a partition of topic. Who holds it is asked
// of the partition's leader (DescribeProducers) and of the transaction
// coordinators (ListTransactions, DescribeTransactions); what cannot be
// asked (an ACL, an old broker) is left out of the hold, not the hold.
func (h *holds) check(ctx context.Context, topic string, now time.Time, after time.Duration) ([]Hold, error) {
	stable, err := listOffsets(ctx, h.adm.ListCommittedOffsets, "the last stable offsets", topic)
	if err != nil {
		return nil, err
	}
	ends, err := listOffsets(ctx, h.adm.ListEndOffsets, "the end offsets", topic)
	if err != nil {
		return nil, err
	}
	var held []Hold
	stable.Each(func(o kadm.ListedOffset) {
		end, _ := ends.Lookup(topic, o.Partition)
		if o.Offset >= end.Offset {
			delete(h.seen, o.Partition)
			return
		}
		if s, ok := h.seen[o.Partition]; !ok || s.offset != o.Offset {
			h.seen[o.Partition] = seenAt{o.Offset, now}
		}
		held = append(held, Hold{Topic: topic, Partition: o.Partition, Stable: o.Offset, End: end.Offset, ProducerID: -1,
			Since: h.seen[o.Partition].at})
	})
	for p := range h.seen {
		if _, ok := stable.Lookup(topic, p); !ok {
			delete(h.seen, p)
		}
	}
	if len(held) == 0 {
		return nil, nil
	}
	slices.SortFunc(held, func(a, b Hold) int { return int(a.Partition - b.Partition) })
	h.name(ctx, held)
	return slices.DeleteFunc(held, func(x Hold) bool { return now.Sub(x.Since) < after }), nil
}

// name fills in who holds each partition and since when.
func (h *holds) name(ctx context.Context, held []Hold) {
	set := make(kadm.TopicsSet)
	for _, x := range held {
		set.Add(x.Topic, x.Partition)
	}
	described, _ := h.adm.DescribeProducers(ctx, set) // a partial answer names what it can
	var pids []int64
	described.EachProducer(func(dp kadm.DescribedProducer) {
		for i := range held {
			if x := &held[i]; x.Topic == dp.Topic && x.Partition == dp.Partition && x.Stable == dp.CurrentTxnStartOffset {
				x.ProducerID = dp.ProducerID
				pids = append(pids, dp.ProducerID)
			}
		}
	})
	if len(pids) == 0 {
		return
	}
	listed, _ := h.adm.ListTransactions(ctx, pids, nil)
	ids := make(map[int64]string)
	var txids []string
	for _, t := range listed.Sorted() {
		ids[t.ProducerID] = t.TxnID
		txids = append(txids, t.TxnID)
	}
	var txns kadm.DescribedTransactions
	if len(txids) > 0 {
		txns, _ = h.adm.DescribeTransactions(ctx, txids...)
	}
	for i := range held {
		x := &held[i]
		if x.TransactionalID = ids[x.ProducerID]; x.TransactionalID == "" {
			continue
		}
		if t, ok := txns[x.TransactionalID]; ok && t.Err == nil && t.ProducerID == x.ProducerID && t.StartTimestamp > 0 {
			x.Since, x.Timeout = time.UnixMilli(t.StartTimestamp), time.Duration(t.TimeoutMillis)*time.Millisecond
		}
	}
}

// Holds is Prober.Holds for an operator's tool, with a client of its own,
// which sees a partition only once: it reports the transactions whose
// coordinator says they have been open for some seconds.
func Holds(ctx context.Context, conn Settings, topic string) ([]Hold, error) {
	cl, err := kgo.NewClient(conn.Opts()...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	return newHolds(cl).check(ctx, topic, time.Now(), holdAfter)
}

// EndHanging ends the transaction open at offset start of partition p of
// topic, as kafka-transactions.sh abort does for a hanging transaction
// (KIP-664): the partition's leader names the producer whose transaction
// starts there (DescribeProducers), and a COMMIT marker, when commit is
// set, or an ABORT marker is written to the partition alone
// (WriteTxnMarkers) under that producer's id, epoch and coordinator epoch.
// Its coordinator is not told: meant for a transaction it lost track of,
// which no producer will end. It needs the ClusterAction ACL on the
// cluster. It returns the hold it ended.
func EndHanging(ctx context.Context, conn Settings, topic string, p int32, start int64, commit bool) (Hold, error) {
	cl, err := kgo.NewClient(conn.Opts()...)
	if err != nil {
		return Hold{}, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	set := make(kadm.TopicsSet)
	set.Add(topic, p)
	described, err := adm.DescribeProducers(ctx, set)
	if err == nil {
		described.EachPartition(func(d kadm.DescribedProducersPartition) { err = errors.Join(err, d.Err) })
	}
	if err != nil {
		return Hold{}, fmt.Errorf("asking the leader of %s-%d for its open transactions: %w", topic, p, err)
	}
	var found *kadm.DescribedProducer
	var open []string
	for _, d := range described.SortedProducers() {
		if d.CurrentTxnStartOffset < 0 {
			continue
		}
		if d.CurrentTxnStartOffset == start {
			found = &d
		}
		open = append(open, fmt.Sprintf("producer id %d at offset %d", d.ProducerID, d.CurrentTxnStartOffset))
	}
	if found == nil {
		if len(open) == 0 {
			open = append(open, "none")
		}
		return Hold{}, fmt.Errorf("no transaction of %s-%d starts at offset %d: transactions open there: %s", topic, p, start, strings.Join(open, ", "))
	}
	h := Hold{Topic: topic, Partition: p, Stable: start, ProducerID: found.ProducerID, Since: time.UnixMilli(found.LastTimestamp)}
	h.name(ctx, adm)
	resp, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: found.ProducerID, ProducerEpoch: found.ProducerEpoch, Commit: commit,
		CoordinatorEpoch: max(0, found.CoordinatorEpoch), Topics: set})
	if err == nil {
		resp.EachPartition(func(r kadm.TxnMarkersPartitionResponse) { err = errors.Join(err, r.Err) })
	}
	if err != nil {
		return h, fmt.Errorf("writing the marker of producer id %d epoch %d to %s-%d (the principal needs the ClusterAction ACL on the cluster): %w",
			found.ProducerID, found.ProducerEpoch, topic, p, err)
	}
	return h, nil
}

// AbortLeftOpen aborts the transaction of producer id pid at epoch or
// before on every partition of topics where it is still open: markers its
// coordinator, which aborted it, never wrote there (Kafka 4.4 was seen to
// lose them across a broker restart). Left open, the producer id's next
// commit on such a partition would commit the records with its own,
// publishing them twice. As EndHanging, under the producer's id, epoch
// and coordinator epoch, and with the ClusterAction ACL. It returns the
// partitions it aborted the transaction on.
func AbortLeftOpen(ctx context.Context, connOpts []kgo.Opt, topics []string, pid int64, epoch int16) ([]string, error) {
	r, err := NewPartitionReader(connOpts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	described, err := r.producers(ctx, topics)
	if err != nil {
		return nil, err
	}
	var ended []string
	for _, d := range described.SortedProducers() {
		if d.ProducerID != pid || d.ProducerEpoch > epoch || d.CurrentTxnStartOffset < 0 {
			continue
		}
		one := make(kadm.TopicsSet)
		one.Add(d.Topic, d.Partition)
		resp, err := r.adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: pid, ProducerEpoch: d.ProducerEpoch,
			CoordinatorEpoch: max(0, d.CoordinatorEpoch), Topics: one})
		if err == nil {
			resp.EachPartition(func(r kadm.TxnMarkersPartitionResponse) { err = errors.Join(err, r.Err) })
		}
		if err != nil {
			return ended, fmt.Errorf("writing the marker of producer id %d epoch %d to %s-%d, where its transaction is open from offset %d "+
				"(the principal needs the ClusterAction ACL on the cluster): %w", pid, d.ProducerEpoch, d.Topic, d.Partition, d.CurrentTxnStartOffset, err)
		}
		ended = append(ended, fmt.Sprintf("%s-%d", d.Topic, d.Partition))
	}
	return ended, nil
}

// name asks the coordinators for the transactional id of the hold's
// producer, when they know it.
func (h *Hold) name(ctx context.Context, adm *kadm.Client) {
	listed, _ := adm.ListTransactions(ctx, []int64{h.ProducerID}, nil)
	for _, t := range listed.Sorted() {
		if t.ProducerID == h.ProducerID {
			h.TransactionalID = t.TxnID
		}
	}
}
