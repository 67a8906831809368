package kafka

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Reading past the last stable offset.
//
// A read_committed read of a partition stops at its last stable offset
// (LSO), the first offset of the oldest transaction still open there. The
// checkpoint topic is shared by every stream of a cluster, so one open
// transaction on it (another stream's, a paused walstream's, any
// producer's) hides every later checkpoint of every stream until it ends,
// which may take the broker's transaction.max.timeout.ms (15 minutes by
// default). A stream that took the last checkpoint before it for its own
// would publish again what it had committed since.
//
// What decides a transaction on a partition is its marker: the coordinator
// writes a COMMIT or ABORT control record after the transaction's last
// record there, with the producer id of its records, before the records
// count as committed or aborted. So walstream reads past the LSO
// read_uncommitted, keeping control records, and decides each record by
// the first marker of its producer id that follows it: committed, aborted,
// or, without one yet, open. The log cleaner never cleans past the LSO, so
// those markers are all in the log. Before the LSO everything is decided,
// and walstream reads it as Kafka's own consumers do: read_committed, with
// the broker's index of aborted transactions.

// Control record types (the key of a control record: version, type).
const (
	controlAbort  = 0
	controlCommit = 1
)

// Fate is what became of a transactional record.
type Fate int8

// What became of a transactional record.
const (
	FateOpen Fate = iota
	FateCommitted
	FateAborted
)

// MarkerFate returns what the control record r decides for the records of
// its producer before it; ok is false for a record that is no marker.
func MarkerFate(r *kgo.Record) (f Fate, ok bool) {
	if !r.Attrs.IsControl() || len(r.Key) < 4 {
		return FateOpen, false
	}
	switch binary.BigEndian.Uint16(r.Key[2:4]) {
	case controlAbort:
		return FateAborted, true
	case controlCommit:
		return FateCommitted, true
	}
	return FateOpen, false
}

// PartitionReader fetches one partition at a time from its leader, with a
// client of its own: Fetch v12, the last that names topics rather than
// topic ids, since the reader sends its own fetches. A fetch sent to any
// broker but the leader is refused.
type PartitionReader struct {
	cl      *kgo.Client
	adm     *kadm.Client
	leaders map[string]map[int32]int32
	// maxBytes bounds what one fetch returns of a partition; 16 MiB when
	// zero.
	maxBytes int32
	// read counts the records fetched, control records included: what a
	// read cost.
	read int64
}

// NewPartitionReader creates a reader connecting with connOpts.
func NewPartitionReader(connOpts []kgo.Opt) (*PartitionReader, error) {
	cl, err := kgo.NewClient(append(connOpts[:len(connOpts):len(connOpts)], kgo.MaxVersions(kversion.V2_8_0()))...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	return &PartitionReader{cl: cl, adm: kadm.NewClient(cl), leaders: make(map[string]map[int32]int32)}, nil
}

// Close releases the reader's client.
func (r *PartitionReader) Close() { r.cl.Close() }

// Fetched is one fetch of a partition: its records from the offset asked
// for, the offset to fetch next, and the partition's high watermark and
// last stable offset when the broker answered.
type Fetched struct {
	Records  []*kgo.Record
	Next     int64
	End, LSO int64
}

// Fetch reads partition p of topic from offset, read_committed when
// committed is set, else read_uncommitted with control records. It waits
// up to wait for a record at or past offset.
func (r *PartitionReader) Fetch(ctx context.Context, topic string, p int32, offset int64, committed bool, wait time.Duration) (Fetched, error) {
	leader, err := r.leader(ctx, topic, p)
	if err != nil {
		return Fetched{}, err
	}
	req := kmsg.NewPtrFetchRequest()
	limit := cmp.Or(r.maxBytes, 16<<20)
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, int32(wait.Milliseconds()), 1, limit
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, limit
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r.cl.Broker(int(leader)))
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		delete(r.leaders[topic], p)
		return Fetched{}, fmt.Errorf("fetching topic %s partition %d from broker %d: %w", topic, p, leader, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return Fetched{}, fmt.Errorf("fetching topic %s partition %d: the broker answered for no such partition", topic, p)
	}
	part := &resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
		// A moved leader (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH) is
		// asked for again at the next fetch.
		delete(r.leaders[topic], p)
		return Fetched{}, fmt.Errorf("fetching topic %s partition %d from broker %d: %w", topic, p, leader, err)
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		KeepControlRecords: !committed, Offset: offset, IsolationLevel: iso, Topic: topic, Partition: p,
	}, part, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		return Fetched{}, fmt.Errorf("reading topic %s partition %d at offset %d: %w", topic, p, offset, fp.Err)
	}
	r.read += int64(len(fp.Records))
	return Fetched{Records: fp.Records, Next: max(next, offset), End: part.HighWatermark, LSO: part.LastStableOffset}, nil
}

// leader returns the broker leading partition p of topic, from metadata
// asked for once and again after a fetch failed.
func (r *PartitionReader) leader(ctx context.Context, topic string, p int32) (int32, error) {
	if l, ok := r.leaders[topic][p]; ok {
		return l, nil
	}
	md, err := r.adm.Metadata(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("asking for the leader of topic %s partition %d: %w", topic, p, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return 0, fmt.Errorf("asking for the leader of topic %s partition %d: %w", topic, p, errors.Join(td.Err, kerr.UnknownTopicOrPartition))
	}
	leaders := make(map[int32]int32)
	for _, pd := range td.Partitions {
		if pd.Err == nil && pd.Leader >= 0 {
			leaders[pd.Partition] = pd.Leader
		}
	}
	r.leaders[topic] = leaders
	l, ok := leaders[p]
	if !ok {
		return 0, fmt.Errorf("topic %s partition %d has no leader: %w", topic, p, kerr.LeaderNotAvailable)
	}
	return l, nil
}

// pastStable reads partition p of topic read_uncommitted from from (its
// last stable offset) to end (its high watermark), and calls committed
// with each record for which want is true once the marker of its
// transaction says it committed, in offset order. It returns such records
// whose transaction is still open at end. Records outside transactions
// (no producer id) count as committed as they come.
func (r *PartitionReader) pastStable(ctx context.Context, topic string, p int32, from, end int64, want func(*kgo.Record) bool,
	committed func(*kgo.Record) error) (open []*kgo.Record, err error) {
	pending := make(map[int64][]*kgo.Record) // by producer id, awaiting a marker
	var done []*kgo.Record
	if err := r.scanRange(ctx, topic, p, from, end, false, func(rec *kgo.Record) error {
		if fa, ok := MarkerFate(rec); ok {
			if fa == FateCommitted {
				done = append(done, pending[rec.ProducerID]...)
			}
			delete(pending, rec.ProducerID)
			return nil
		}
		switch {
		case rec.Attrs.IsControl() || !want(rec):
		case !rec.Attrs.IsTransactional() || rec.ProducerID < 0:
			done = append(done, rec)
		default:
			pending[rec.ProducerID] = append(pending[rec.ProducerID], rec)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	slices.SortFunc(done, byOffset)
	for _, rec := range done {
		if err := committed(rec); err != nil {
			return nil, err
		}
	}
	for _, recs := range pending {
		open = append(open, recs...)
	}
	slices.SortFunc(open, byOffset)
	return open, nil
}

func byOffset(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) }

// committedUntil calls each with every committed record of partition p of
// topic from from to until (a last stable offset), read_committed.
func (r *PartitionReader) committedUntil(ctx context.Context, topic string, p int32, from, until int64, each func(*kgo.Record) error) error {
	return r.scanRange(ctx, topic, p, from, until, true, each)
}

// scanRange calls each with every record of partition p of topic from from
// to until, in offset order: read_committed when committed is set, else
// read_uncommitted with control records.
func (r *PartitionReader) scanRange(ctx context.Context, topic string, p int32, from, until int64, committed bool, each func(*kgo.Record) error) error {
	stalls := 0
	for next := from; next < until; {
		f, err := r.Fetch(ctx, topic, p, next, committed, 100*time.Millisecond)
		if err != nil {
			if stalls++; stalls > 100 || ctx.Err() != nil {
				return err
			}
			continue
		}
		for _, rec := range f.Records {
			if rec.Offset >= until {
				break
			}
			if err := each(rec); err != nil {
				return err
			}
		}
		if f.Next > next {
			next, stalls = f.Next, 0
		} else if stalls++; stalls > 100 {
			return fmt.Errorf("reading topic %s partition %d: no progress at offset %d, reading up to %d", topic, p, next, until)
		}
	}
	return nil
}

// TransactionFate decides, by its markers in the partitions of topics, the
// transaction of producer id pid whose records carry epoch, when another
// partition it wrote shows it open (a marker the coordinator never wrote
// there). Transaction version 2 bumps the epoch as a transaction ends and
// writes its markers with the bumped epoch, and fencing a producer (an
// InitProducerId) bumps it and aborts the transaction it had open. So a
// marker of pid of a later epoch, following records of pid of epoch, ends
// that transaction, provided it was pid's last: a later transaction of pid
// would have written the same partition as the caller's record, and its
// marker there would have decided the record. Under transaction version 1
// a commit keeps the epoch, so its marker cannot be told from an earlier
// transaction's: such a commit is not decided here. FateOpen means no
// partition decides it; partitions that disagree are an error.
func TransactionFate(ctx context.Context, connOpts []kgo.Opt, topics []string, pid int64, epoch int16) (Fate, error) {
	r, err := NewPartitionReader(connOpts)
	if err != nil {
		return FateOpen, err
	}
	defer r.Close()
	// A partition's producer state holds the epoch of pid's last record or
	// marker there: only where it is past epoch, and no transaction of pid
	// is open, can a marker of a later epoch be.
	described, err := r.producers(ctx, topics)
	if err != nil {
		return FateOpen, err
	}
	var ended []kadm.DescribedProducer
	described.EachProducer(func(d kadm.DescribedProducer) {
		if d.ProducerID == pid && d.ProducerEpoch > epoch && d.CurrentTxnStartOffset < 0 {
			ended = append(ended, d)
		}
	})
	slices.SortFunc(ended, func(a, b kadm.DescribedProducer) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	fate, by := FateOpen, ""
	for _, d := range ended {
		f, err := r.endOf(ctx, d.Topic, d.Partition, pid, epoch)
		if err != nil {
			return FateOpen, err
		}
		where := fmt.Sprintf("%s-%d", d.Topic, d.Partition)
		switch {
		case f == FateOpen:
		case fate == FateOpen:
			fate, by = f, where
		case f != fate:
			return FateOpen, fmt.Errorf("the markers of producer id %d epoch %d disagree: %s in %s, %s in %s", pid, epoch, fate, by, f, where)
		}
	}
	return fate, nil
}

// producers describes the producers of every partition of topics, as
// their leaders know them.
func (r *PartitionReader) producers(ctx context.Context, topics []string) (kadm.DescribedProducersTopics, error) {
	md, err := r.adm.Metadata(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("asking for the partitions of topics %v: %w", topics, err)
	}
	set := make(kadm.TopicsSet)
	for _, t := range topics {
		td, ok := md.Topics[t]
		if !ok || td.Err != nil {
			return nil, fmt.Errorf("asking for the partitions of topic %s: %w", t, errors.Join(td.Err, kerr.UnknownTopicOrPartition))
		}
		for _, pd := range td.Partitions {
			set.Add(t, pd.Partition)
		}
	}
	described, err := r.adm.DescribeProducers(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("describing the producers of topics %v: %w", topics, err)
	}
	var failed error
	described.EachPartition(func(d kadm.DescribedProducersPartition) {
		if d.Err != nil && failed == nil {
			failed = fmt.Errorf("describing the producers of topic %s partition %d: %w", d.Topic, d.Partition, d.Err)
		}
	})
	return described, failed
}

func (f Fate) String() string {
	switch f {
	case FateCommitted:
		return "committed"
	case FateAborted:
		return "aborted"
	}
	return "open"
}

// endWindow is how many offsets endOf reads at a time, back from a
// partition's end.
const endWindow = 4096

// endOf returns what the marker of pid that ends its records of epoch in
// partition p of topic says, reading back from the partition's end in
// windows until a record or marker of pid of an earlier transaction: the
// first marker of a later epoch following records of epoch. A record of
// pid of a later epoch before any such marker is a later transaction
// whose start tells nothing of the end: FateOpen.
func (r *PartitionReader) endOf(ctx context.Context, topic string, p int32, pid int64, epoch int16) (Fate, error) {
	starts, err := listOffsets(ctx, r.adm.ListStartOffsets, "start offsets", topic)
	if err != nil {
		return FateOpen, err
	}
	ends, err := endOffsets(ctx, r.adm, topic)
	if err != nil {
		return FateOpen, err
	}
	start, _ := starts.Lookup(topic, p)
	end, _ := ends.Lookup(topic, p)
	// earlier: a record of an earlier transaction of pid, or the marker
	// that ended one; pid's records of epoch follow it.
	earlier := func(rec *kgo.Record) bool {
		_, marker := MarkerFate(rec)
		return marker && rec.ProducerEpoch <= epoch || !rec.Attrs.IsControl() && rec.ProducerEpoch < epoch
	}
	var seq []*kgo.Record // pid's records and markers from the window read last on
	for hi := end.Offset; hi > start.Offset; {
		lo := max(start.Offset, hi-endWindow)
		var got []*kgo.Record
		if err := r.scanRange(ctx, topic, p, lo, hi, false, func(rec *kgo.Record) error {
			if rec.ProducerID == pid {
				got = append(got, rec)
			}
			return nil
		}); err != nil {
			return FateOpen, err
		}
		seq = append(got, seq...)
		if slices.ContainsFunc(got, earlier) {
			break
		}
		hi = lo
	}
	from := 0
	for i, rec := range seq {
		if earlier(rec) {
			from = i + 1
		}
	}
	ours := false
	for _, rec := range seq[from:] {
		f, marker := MarkerFate(rec)
		switch {
		case marker && ours:
			return f, nil
		case rec.Attrs.IsControl():
		case rec.ProducerEpoch == epoch:
			ours = true
		default:
			return FateOpen, nil
		}
	}
	return FateOpen, nil
}

// ScanDecided calls each with every committed record of topic from the
// first timestamped at or after since (the log's start when since is
// zero), partition after partition, with clients of its own. It reads as
// ScanKey does, so that a transaction another producer holds open stops
// nothing: read_committed up to each partition's last stable offset, and
// past it each record decided by its transaction's marker. Records of
// transactions still open when the read reaches the high watermark are
// waited for, up to wait, reading on for their producers' markers alone:
// an exactly-once task killed in a transaction leaves one open until the
// broker aborts it, and what it wrote is committed or not only then. A
// busy producer's transactions begun after the read reached the end are
// not waited for. Within a partition records come in offset order, but
// those whose markers came after the read reached the end, which come
// last. A topic that does not exist holds no records.
func ScanDecided(ctx context.Context, connOpts []kgo.Opt, topic string, since time.Time, wait time.Duration, each func(*kgo.Record) error) error {
	r, err := NewPartitionReader(connOpts)
	if err != nil {
		return err
	}
	defer r.Close()
	starts, err := startOffsets(ctx, r.adm, topic, since)
	if starts == nil || err != nil {
		return err
	}
	stable, err := stableOffsets(ctx, r.adm, topic)
	if err != nil {
		return err
	}
	ends, err := endOffsets(ctx, r.adm, topic)
	if err != nil {
		return err
	}
	all := func(*kgo.Record) bool { return true }
	deadline := time.Now().Add(wait)
	for _, p := range slices.Sorted(maps.Keys(ends[topic])) {
		start, ok := starts.Lookup(topic, p)
		end, _ := ends.Lookup(topic, p)
		if !ok || start.Offset < 0 || start.Offset >= end.Offset {
			continue
		}
		lso, _ := stable.Lookup(topic, p)
		if err := r.committedUntil(ctx, topic, p, start.Offset, min(lso.Offset, end.Offset), each); err != nil {
			return err
		}
		if lso.Offset >= end.Offset {
			continue
		}
		open, err := r.pastStable(ctx, topic, p, max(lso.Offset, start.Offset), end.Offset, all, each)
		if err != nil {
			return err
		}
		if len(open) == 0 {
			continue
		}
		decided, err := r.awaitMarkers(ctx, topic, p, end.Offset, open, deadline)
		if err != nil {
			return err
		}
		for _, rec := range decided {
			if err := each(rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// awaitMarkers reads partition p of topic on from from until the marker of
// the producer of each record of open, and returns those committed in
// offset order. Past deadline, a producer without one is
// ErrOpenTransaction.
func (r *PartitionReader) awaitMarkers(ctx context.Context, topic string, p int32, from int64, open []*kgo.Record, deadline time.Time) ([]*kgo.Record, error) {
	pending := make(map[int64][]*kgo.Record)
	for _, rec := range open {
		pending[rec.ProducerID] = append(pending[rec.ProducerID], rec)
	}
	var done []*kgo.Record
	for next := from; len(pending) > 0; {
		if time.Now().After(deadline) {
			var pids []string
			for pid, recs := range pending {
				pids = append(pids, fmt.Sprintf("producer id %d (from offset %d)", pid, recs[0].Offset))
			}
			slices.Sort(pids)
			return nil, fmt.Errorf("%w: topic %s partition %d: %s kept a transaction open until %s", ErrOpenTransaction, topic, p,
				strings.Join(pids, ", "), deadline.UTC().Format(time.RFC3339))
		}
		f, err := r.Fetch(ctx, topic, p, next, false, 200*time.Millisecond)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, rec := range f.Records {
			fa, ok := MarkerFate(rec)
			if !ok || pending[rec.ProducerID] == nil {
				continue
			}
			if fa == FateCommitted {
				done = append(done, pending[rec.ProducerID]...)
			}
			delete(pending, rec.ProducerID)
		}
		next = max(next, f.Next)
	}
	slices.SortFunc(done, byOffset)
	return done, nil
}
