package publish

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/walstream/walstream/checkpoint"
)

// ReadCheckpoint returns the last committed checkpoint for this producer's
// checkpoint key, creating the checkpoint topic if it is missing and
// warning if it is weaker than wanted (EnsureCheckpointTopic). found is
// false when no checkpoint was ever committed. Call it after Fence: only
// then can no older instance still commit one.
func (p *Producer) ReadCheckpoint(ctx context.Context) (cp checkpoint.Checkpoint, at time.Time, found bool, err error) {
	topic := p.cfg.CheckpointTopic
	if _, err := ensureCheckpointTopic(ctx, p.client, topic, p.cfg.TopicCreation, p.log); err != nil {
		return cp, at, false, p.markPermanent(err)
	}
	cp, at, found, err = readCheckpoint(ctx, p.opts, topic, p.cfg.CheckpointKey)
	return cp, at, found, p.markPermanent(err)
}

// ReadCheckpoint reads the last checkpoint committed under key in topic,
// read_committed, with clients of its own. It changes nothing, so an
// operator's tool may call it while walstream runs.
func ReadCheckpoint(ctx context.Context, kafka KafkaSettings, topic, key string) (cp checkpoint.Checkpoint, at time.Time, found bool, err error) {
	return readCheckpoint(ctx, kafka.opts(), topic, key)
}

// readDeadline bounds reading the checkpoint; an error is better than a
// start that hangs.
const readDeadline = time.Minute

func readCheckpoint(ctx context.Context, connOpts []kgo.Opt, topic, key string) (cp checkpoint.Checkpoint, at time.Time, found bool, err error) {
	var last []byte
	err = scanKey(ctx, connOpts, topic, key, func(v []byte) error {
		last = append(last[:0], v...)
		return nil
	})
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		err = fmt.Errorf("%w: the principal needs the Read ACL on checkpoint topic %s: %w", ErrAuthorization, topic, err)
	}
	err = authorization(err)
	if err != nil || last == nil {
		return cp, at, false, err
	}
	cp, at, err = checkpoint.Decode(last)
	if err != nil {
		return cp, at, false, fmt.Errorf("checkpoint key %s in topic %s: %w", key, topic, err)
	}
	return cp, at, true, nil
}

// scanKey calls each with the value of every committed record under key
// in topic, oldest first, read_committed, with a client of its own. A topic
// that does not exist holds no records.
func scanKey(ctx context.Context, connOpts []kgo.Opt, topic, key string, each func(value []byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	// Fetch v12, the last that names topics rather than topic ids: the
	// reader sends its own fetches.
	cl, err := kgo.NewClient(append(connOpts[:len(connOpts):len(connOpts)], kgo.MaxVersions(kversion.V2_8_0()))...)
	if err != nil {
		return fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing start offsets of checkpoint topic %s: %w", topic, err)
	}
	// The last stable offset: everything before it is committed or aborted.
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("listing committed offsets of checkpoint topic %s: %w", topic, err)
	}
	next := make(map[int32]int64)
	until := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > s.Offset {
			next[o.Partition], until[o.Partition] = s.Offset, o.Offset
		}
	})
	// Raw fetches, decoded by franz-go, tell exactly how far the read got,
	// however the broker represents aborted batches before the stable
	// offset; a consumer only says what it returns.
	for stalls := 0; len(until) > 0; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 100, 1, 64<<20
		req.IsolationLevel = 1 // read_committed
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		for p := range until {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, next[p], 16<<20
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			return fmt.Errorf("reading checkpoint topic %s: %w", topic, err)
		}
		progress := false
		for _, t := range resp.Topics {
			for i := range t.Partitions {
				rp := &t.Partitions[i]
				// A partition the principal may not read answers with an
				// error code, which ProcessFetchPartition does not report.
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return fmt.Errorf("reading checkpoint topic %s partition %d: %w", topic, rp.Partition, err)
				}
				fp, n := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
					Offset: next[rp.Partition], IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: rp.Partition,
				}, rp, kgo.DefaultDecompressor(), nil)
				if fp.Err != nil {
					return fmt.Errorf("reading checkpoint topic %s partition %d: %w", topic, rp.Partition, fp.Err)
				}
				for _, r := range fp.Records {
					if string(r.Key) == key {
						if err := each(r.Value); err != nil {
							return err
						}
					}
				}
				if n > next[rp.Partition] {
					next[rp.Partition], progress = n, true
				}
				if next[rp.Partition] >= until[rp.Partition] {
					delete(until, rp.Partition)
				}
			}
		}
		if progress {
			stalls = 0
		} else if stalls++; stalls > 100 { // each fetch waits up to 100ms for data
			return fmt.Errorf("reading checkpoint topic %s: no progress at offsets %v, stable offsets %v", topic, next, until)
		}
	}
	return nil
}
