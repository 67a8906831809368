package kafka

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reading a key's last record back from the end.
//
// A transaction left open on the shared checkpoint partition pins its last
// stable offset, and the log cleaner compacts nothing past it: every
// checkpoint of every stream written since stays in the log. A read of a
// key forward from the last stable offset then costs every record written
// since the hold began, which grows until the one-minute read deadline
// stops every stream's start. So a stream's checkpoint is read back from
// the partition's end, in windows growing twice each time, until the key's
// last committed record: what it costs is what was written since the
// stream's own last commit. A record is decided by the nearest marker of
// its producer after it, which the read has met already: markers follow
// the records they decide.
//
// Records under the key in transactions still open at the end are found on
// the way back, and those of transactions begun before the key's last
// committed record by asking the partition's leader for its open
// transactions (DescribeProducers): each starts with its first record on
// the partition, and a walstream transaction writes one record there, its
// stream's checkpoint. A producer that writes more records to the
// checkpoint topic in one transaction is no stream of walstream's.

// firstWindow is how many offsets the first window back from a
// partition's end holds; each next one holds twice as many, up to
// maxWindow.
const (
	firstWindow = 64
	maxWindow   = 1 << 16
)

// backFetchBytes bounds a fetch of a window: what it returns past the
// window is read for nothing.
const backFetchBytes = 256 << 10

// LastUnderKey returns the last committed record under key in topic, nil
// when there is none, and the records under key in transactions still open
// at the end, in offset order, with clients of its own. Partition after
// partition: the last one holding a committed record under key gives it.
// A topic that does not exist holds no records.
func LastUnderKey(ctx context.Context, connOpts []kgo.Opt, topic, key string) (last *kgo.Record, open []*kgo.Record, err error) {
	ctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	r, err := NewPartitionReader(connOpts)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	return r.lastUnderKey(ctx, topic, key)
}

func (r *PartitionReader) lastUnderKey(ctx context.Context, topic, key string) (last *kgo.Record, open []*kgo.Record, err error) {
	starts, err := startOffsets(ctx, r.adm, topic, time.Time{})
	if starts == nil || err != nil {
		return nil, nil, err
	}
	ends, err := endOffsets(ctx, r.adm, topic)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range slices.Sorted(maps.Keys(ends[topic])) {
		start, _ := starts.Lookup(topic, p)
		end, _ := ends.Lookup(topic, p)
		l, o, low, err := r.backToKey(ctx, topic, p, key, start.Offset, end.Offset)
		if err != nil {
			return nil, nil, err
		}
		if l != nil {
			last = l
		}
		if low > start.Offset {
			before, err := r.openBefore(ctx, topic, p, key, start.Offset, low, end.Offset)
			if err != nil {
				return nil, nil, err
			}
			o = append(o, before...)
		}
		open = append(open, o...)
	}
	slices.SortFunc(open, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return byOffset(a, b)
	})
	return last, open, nil
}

// backToKey reads partition p of topic back from end (its high watermark)
// to start, window by window, until the last committed record under key.
// It returns that record, the records under key after it whose
// transactions are open at end, and the offset the read went back to.
func (r *PartitionReader) backToKey(ctx context.Context, topic string, p int32, key string, start, end int64) (last *kgo.Record, open []*kgo.Record, low int64, err error) {
	r.maxBytes = backFetchBytes
	defer func() { r.maxBytes = 0 }()
	next := make(map[int64]Fate) // the nearest marker of each producer id after the record at hand
	window := int64(firstWindow)
	for hi := end; hi > start; hi, window = max(start, hi-window), min(2*window, maxWindow) {
		lo := max(start, hi-window)
		recs, err := r.readRange(ctx, topic, p, lo, hi)
		if err != nil {
			return nil, nil, 0, err
		}
		for i := len(recs) - 1; i >= 0; i-- {
			rec := recs[i]
			if f, ok := MarkerFate(rec); ok {
				next[rec.ProducerID] = f
				continue
			}
			if rec.Attrs.IsControl() || string(rec.Key) != key {
				continue
			}
			fate := FateCommitted
			if rec.Attrs.IsTransactional() && rec.ProducerID >= 0 {
				fate = next[rec.ProducerID] // FateOpen without one
			}
			switch fate {
			case FateCommitted:
				slices.Reverse(open)
				return rec, open, lo, nil
			case FateOpen:
				open = append(open, rec)
			}
		}
	}
	slices.Reverse(open)
	return nil, open, start, nil
}

// readRange reads partition p of topic from lo to hi read_uncommitted,
// control records kept.
func (r *PartitionReader) readRange(ctx context.Context, topic string, p int32, lo, hi int64) ([]*kgo.Record, error) {
	var recs []*kgo.Record
	err := r.scanRange(ctx, topic, p, lo, hi, false, func(rec *kgo.Record) error {
		recs = append(recs, rec)
		return nil
	})
	return recs, err
}

// openBefore returns the records under key that begin transactions open
// on partition p of topic before low, where a read back from the end
// stopped: the first record of each, at the offset the partition's leader
// names. A leader that cannot say (a broker before Kafka 2.8, an ACL) is
// answered by reading forward from the partition's last stable offset to
// end, deciding each record by its marker, as ScanKey does.
func (r *PartitionReader) openBefore(ctx context.Context, topic string, p int32, key string, start, low, end int64) ([]*kgo.Record, error) {
	set := make(kadm.TopicsSet)
	set.Add(topic, p)
	described, err := r.adm.DescribeProducers(ctx, set)
	if err == nil {
		described.EachPartition(func(d kadm.DescribedProducersPartition) { err = errors.Join(err, d.Err) })
	}
	if err != nil {
		open, err := r.openForward(ctx, topic, p, key, start, end)
		return slices.DeleteFunc(open, func(rec *kgo.Record) bool { return rec.Offset >= low }), err
	}
	var open []*kgo.Record
	for _, d := range described.SortedProducers() {
		at := d.CurrentTxnStartOffset
		if at < start || at >= low {
			continue
		}
		first, err := r.recordAt(ctx, topic, p, at)
		if err != nil {
			return nil, err
		}
		if first != nil && first.ProducerID == d.ProducerID && string(first.Key) == key {
			open = append(open, first)
		}
	}
	return open, nil
}

// recordAt returns the record at offset at of partition p, nil when there
// is none there (compacted away).
func (r *PartitionReader) recordAt(ctx context.Context, topic string, p int32, at int64) (*kgo.Record, error) {
	r.maxBytes = 1 // the first batch, whatever its size
	defer func() { r.maxBytes = 0 }()
	f, err := r.Fetch(ctx, topic, p, at, false, 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	for _, rec := range f.Records {
		if rec.Offset == at {
			return rec, nil
		}
	}
	return nil, nil
}

// openForward returns the records under key whose transactions are open at
// end, read forward from the partition's last stable offset.
func (r *PartitionReader) openForward(ctx context.Context, topic string, p int32, key string, start, end int64) ([]*kgo.Record, error) {
	stable, err := stableOffsets(ctx, r.adm, topic)
	if err != nil {
		return nil, err
	}
	lso, _ := stable.Lookup(topic, p)
	ours := func(rec *kgo.Record) bool { return string(rec.Key) == key }
	return r.pastStable(ctx, topic, p, max(lso.Offset, start), end, ours, func(*kgo.Record) error { return nil })
}
