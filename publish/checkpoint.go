package publish

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
)

// ReadCheckpoint returns the last committed checkpoint for this producer's
// checkpoint key, creating the compacted checkpoint topic if it is missing.
// found is false when no checkpoint was ever committed. Call it after
// Fence: only then can no older instance still commit one.
func (p *Producer) ReadCheckpoint(ctx context.Context) (cp checkpoint.Checkpoint, at time.Time, found bool, err error) {
	topic := p.cfg.CheckpointTopic
	_, err = kadm.NewClient(p.client).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return cp, at, false, p.classify(fmt.Errorf("creating checkpoint topic %s: %w", topic, err))
	}
	cp, at, found, err = readCheckpoint(ctx, p.opts, topic, p.cfg.CheckpointKey)
	return cp, at, found, p.classify(err)
}

// ReadCheckpoint reads the last checkpoint committed under key in topic,
// read_committed, with clients of its own. It changes nothing, so an
// operator's tool may call it while walstream runs.
func ReadCheckpoint(ctx context.Context, conn Conn, topic, key string) (cp checkpoint.Checkpoint, at time.Time, found bool, err error) {
	return readCheckpoint(ctx, conn.opts(), topic, key)
}

func readCheckpoint(ctx context.Context, connOpts []kgo.Opt, topic, key string) (cp checkpoint.Checkpoint, at time.Time, found bool, err error) {
	admCl, err := kgo.NewClient(connOpts...)
	if err != nil {
		return cp, at, false, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return cp, at, false, nil
	}
	if err != nil {
		return cp, at, false, fmt.Errorf("listing start offsets of checkpoint topic %s: %w", topic, err)
	}
	// The last stable offset: everything before it is committed or aborted.
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return cp, at, false, fmt.Errorf("listing committed offsets of checkpoint topic %s: %w", topic, err)
	}
	from := make(map[int32]kgo.Offset)
	until := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > s.Offset {
			from[o.Partition] = kgo.NewOffset().At(s.Offset)
			until[o.Partition] = o.Offset
		}
	})
	if len(from) == 0 {
		return cp, at, false, nil
	}
	// Control records are kept so that the last offset before the stable
	// offset, always a commit or abort marker, is seen and ends the read.
	cl, err := kgo.NewClient(append(connOpts[:len(connOpts):len(connOpts)],
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return cp, at, false, fmt.Errorf("creating checkpoint reader: %w", err)
	}
	defer cl.Close()
	var last []byte
	for len(until) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return cp, at, false, fmt.Errorf("reading checkpoint topic %s: %w", topic, err)
		}
		if err := fs.Err(); err != nil {
			return cp, at, false, fmt.Errorf("reading checkpoint topic %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := until[r.Partition]; ok && r.Offset+1 >= end {
				delete(until, r.Partition)
			}
			if !r.Attrs.IsControl() && string(r.Key) == key {
				last = r.Value
			}
		})
	}
	if last == nil {
		return cp, at, false, nil
	}
	cp, at, err = checkpoint.Decode(last)
	if err != nil {
		return cp, at, false, fmt.Errorf("checkpoint key %s in topic %s: %w", key, topic, err)
	}
	return cp, at, true, nil
}
