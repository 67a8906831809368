package kafka

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The transaction state partition of a transactional id is Kafka's:
// Utils.abs(id.hashCode()) % partitions, values from Java 17.
func TestTransactionLogPartition(t *testing.T) {
	for _, tc := range []struct {
		id       string
		n        int
		want     int32
		javaHash int32 // String.hashCode, for the record
	}{
		{"walstream-walstream", 50, 1, 2084340151},
		{"walstream-walstream", 3, 1, 2084340151},
		{"shared", 50, 35, -903566235},
		{"", 50, 0, 0},
		{"Ünïcödé-€", 50, 44, 657285044},
		{"polygenelubricants", 50, 0, -2147483648}, // Integer.MIN_VALUE: abs is 0
	} {
		if got := TransactionLogPartition(tc.id, tc.n); got != tc.want {
			t.Errorf("TransactionLogPartition(%q, %d) = %d, want %d", tc.id, tc.n, got, tc.want)
		}
	}
}

// A partition cannot take writes without a live leader, or with its ISR
// shrunk below min.insync.replicas; the transaction state topic counts
// only for the transactional id's partition.
func TestUnwritable(t *testing.T) {
	part := func(p, leader int32, replicas, isr []int32) kmsg.MetadataResponseTopicPartition {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.Replicas, mp.ISR = p, leader, replicas, isr
		return mp
	}
	topic := func(name string, code int16, parts ...kmsg.MetadataResponseTopicPartition) kmsg.MetadataResponseTopic {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.ErrorCode, mt.Partitions = kmsg.StringPtr(name), code, parts
		return mt
	}
	all := []int32{1, 2, 3}
	resp := kmsg.NewPtrMetadataResponse()
	for _, id := range []int32{1, 3} { // broker 2 is down
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID = id
		resp.Brokers = append(resp.Brokers, b)
	}
	resp.Topics = []kmsg.MetadataResponseTopic{
		topic("walstream.checkpoints", 0, part(0, 1, all, []int32{1})),
		topic("outbox.event.Order", 0,
			part(0, 1, all, all),           // healthy
			part(1, 2, all, []int32{2, 3}), // its leader is down
			part(2, -1, all, []int32{2}),   // offline
			part(3, 3, all, []int32{3, 1}), // one replica out: still min.insync.replicas
		),
		topic("outbox.event.Small", 0, part(0, 1, []int32{1}, []int32{1})), // min.insync.replicas 2 over one replica: a setting
		topic("outbox.event.Missing", kerr.UnknownTopicOrPartition.Code),
		topic("__transaction_state", 0, part(0, 1, all, []int32{1}), part(1, 3, all, []int32{3}), part(2, 1, all, all)),
	}
	asked := map[string]int{}
	got := unwritable(resp, "walstream-walstream", func(topic string) int {
		asked[topic]++
		return 2
	})
	want := []string{
		"walstream.checkpoints-0: 1 of 3 replicas in sync, fewer than min.insync.replicas 2: Kafka refuses writes (NOT_ENOUGH_REPLICAS)",
		"outbox.event.Order-1: no leader",
		"outbox.event.Order-2: no leader",
		"__transaction_state-1 (the transaction coordinator's partition for transactional id walstream-walstream): 1 of 3 replicas in sync, fewer than min.insync.replicas 2: Kafka refuses writes (NOT_ENOUGH_REPLICAS)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("unwritable:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for topic, n := range asked {
		if n != 1 {
			t.Errorf("min.insync.replicas of %s asked %d times, want once", topic, n)
		}
	}
	if asked["outbox.event.Small"] != 0 {
		t.Error("min.insync.replicas asked for a topic whose ISR has not shrunk")
	}
}
