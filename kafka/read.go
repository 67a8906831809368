package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// readDeadline bounds reading a key or a topic: the checkpoint, Kafka
// Connect's offsets; an error is better than a start that hangs.
const readDeadline = time.Minute

// ScanKey calls each with every committed record under key in topic,
// partition after partition, oldest first, with clients of its own:
// read_committed up to each partition's last stable offset, and past it
// read_uncommitted, each record decided by its transaction's marker
// (decided.go), so that another producer's open transaction hides nothing
// committed after it began. It returns the records under key whose
// transactions were still open when the read reached the high watermark.
// A topic that does not exist holds no records.
func ScanKey(ctx context.Context, connOpts []kgo.Opt, topic, key string, each func(*kgo.Record) error) (open []*kgo.Record, err error) {
	ctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	r, err := NewPartitionReader(connOpts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.scanKey(ctx, topic, key, each)
}

func (r *PartitionReader) scanKey(ctx context.Context, topic, key string, each func(*kgo.Record) error) (open []*kgo.Record, err error) {
	starts, err := startOffsets(ctx, r.adm, topic, time.Time{})
	if starts == nil || err != nil {
		return nil, err
	}
	stable, err := stableOffsets(ctx, r.adm, topic)
	if err != nil {
		return nil, err
	}
	ends, err := endOffsets(ctx, r.adm, topic)
	if err != nil {
		return nil, err
	}
	ours := func(rec *kgo.Record) bool { return string(rec.Key) == key }
	for _, p := range slices.Sorted(maps.Keys(stable[topic])) {
		start, _ := starts.Lookup(topic, p)
		lso, _ := stable.Lookup(topic, p)
		end, _ := ends.Lookup(topic, p)
		if err := r.committedUntil(ctx, topic, p, start.Offset, lso.Offset, func(rec *kgo.Record) error {
			if ours(rec) {
				return each(rec)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		if lso.Offset >= end.Offset {
			continue
		}
		undecided, err := r.pastStable(ctx, topic, p, max(lso.Offset, start.Offset), end.Offset, ours, each)
		if err != nil {
			return nil, err
		}
		open = append(open, undecided...)
	}
	return open, nil
}

// ReadTopic calls each with every committed record of topic, oldest first,
// read_committed, with a client of its own: Kafka Connect's offsets topic,
// which holds a connector's position. A topic that does not exist holds
// no records.
func ReadTopic(ctx context.Context, conn Settings, topic string, each func(key, value []byte)) error {
	ctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	return ScanTopic(ctx, conn.Opts(), topic, time.Time{}, func(r *kgo.Record) error {
		each(r.Key, r.Value)
		return nil
	})
}

// ScanTopic calls each with every committed record of topic, read_committed,
// partition after partition in offset order, from the first record
// timestamped at or after since (the log's start when since is zero) to
// the last stable offset, with a client of its own. A topic that does not
// exist holds no records.
func ScanTopic(ctx context.Context, connOpts []kgo.Opt, topic string, since time.Time, each func(*kgo.Record) error) error {
	// Fetch v12, the last that names topics rather than topic ids: the
	// reader sends its own fetches.
	cl, err := kgo.NewClient(append(connOpts[:len(connOpts):len(connOpts)], kgo.MaxVersions(kversion.V2_8_0()))...)
	if err != nil {
		return fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := startOffsets(ctx, adm, topic, since)
	if starts == nil || err != nil {
		return err
	}
	ends, err := stableOffsets(ctx, adm, topic)
	if err != nil {
		return err
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
			return fmt.Errorf("reading topic %s: %w", topic, err)
		}
		progress := false
		for _, t := range resp.Topics {
			for i := range t.Partitions {
				rp := &t.Partitions[i]
				// A partition the principal may not read answers with an
				// error code, which ProcessFetchPartition does not report.
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return fmt.Errorf("reading topic %s partition %d: %w", topic, rp.Partition, err)
				}
				fp, n := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
					Offset: next[rp.Partition], IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: rp.Partition,
				}, rp, kgo.DefaultDecompressor(), nil)
				if fp.Err != nil {
					return fmt.Errorf("reading topic %s partition %d: %w", topic, rp.Partition, fp.Err)
				}
				for _, r := range fp.Records {
					if r.Offset >= until[rp.Partition] {
						break
					}
					if err := each(r); err != nil {
						return err
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
			return fmt.Errorf("reading topic %s: no progress at offsets %v, stable offsets %v", topic, next, until)
		}
	}
	return nil
}

// startOffsets lists where a read of topic from since begins in each
// partition: at the first record timestamped at or after since, at the
// log's start when since is zero; nil for a topic that does not exist.
func startOffsets(ctx context.Context, adm *kadm.Client, topic string, since time.Time) (kadm.ListedOffsets, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing start offsets of topic %s: %w", topic, err)
	}
	if !since.IsZero() {
		if starts, err = adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic); err == nil {
			err = starts.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("listing the offsets of topic %s at %s: %w", topic, since.UTC().Format(time.RFC3339Nano), err)
		}
	}
	return starts, nil
}

// stableOffsets lists the topic's last stable offsets: everything before
// them is committed or aborted.
func stableOffsets(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
	return listOffsets(ctx, adm.ListCommittedOffsets, "committed offsets", topic)
}

// endOffsets lists the topic's end offsets (high watermarks).
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
	return listOffsets(ctx, adm.ListEndOffsets, "end offsets", topic)
}

// listOffsets lists the topic's offsets with list, one of the admin
// client's ListOffsets requests, failing on any partition's error too;
// what names the offsets in the error.
func listOffsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), what, topic string) (kadm.ListedOffsets, error) {
	offsets, err := list(ctx, topic)
	if err == nil {
		err = offsets.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s of topic %s: %w", what, topic, err)
	}
	return offsets, nil
}

// ErrOpenTransaction means a partition kept a transaction open longer than
// a reader would wait: a producer that ended without committing or
// aborting it, whose transaction the broker aborts after its transaction
// timeout.
var ErrOpenTransaction = errors.New("a transaction is open")
