package publish

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoPartition means an event named a partition its topic does not have.
var ErrNoPartition = errors.New("the partition from the outbox row does not exist")

// partitionChoice is an event's own partition, carried in its record's
// Context. The partitioner notes the topic's partition count in it, so
// that a refused choice can be explained.
type partitionChoice struct {
	partition int32
	of        int
}

type partitionKey struct{}

func withPartition(p int32) context.Context {
	return context.WithValue(context.Background(), partitionKey{}, &partitionChoice{partition: p})
}

func chosenPartition(r *kgo.Record) *partitionChoice {
	if r.Context == nil {
		return nil
	}
	c, _ := r.Context.Value(partitionKey{}).(*partitionChoice)
	return c
}

// partitioner places a record whose event names its partition
// (table.fields.additional.placement with partition) there, and any other
// as Kafka's default partitioner does: by the murmur2 hash of its key, as
// Debezium's records are placed.
type partitioner struct{ byKey kgo.Partitioner }

var _ kgo.Partitioner = partitioner{}

func newPartitioner() kgo.Partitioner { return partitioner{kgo.StickyKeyPartitioner(nil)} }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return topicPartitioner{p.byKey.ForTopic(topic)}
}

type topicPartitioner struct{ kgo.TopicPartitioner }

var _ kgo.TopicPartitioner = topicPartitioner{}

func (tp topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return chosenPartition(r) != nil || tp.TopicPartitioner.RequiresConsistency(r)
}

// Partition returns an event's own partition even when it is out of range:
// franz-go then fails the record, and the transaction with it.
func (tp topicPartitioner) Partition(r *kgo.Record, n int) int {
	if c := chosenPartition(r); c != nil {
		c.of = n
		return int(c.partition)
	}
	return tp.TopicPartitioner.Partition(r, n)
}
