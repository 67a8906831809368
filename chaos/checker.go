package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/internal/testenv"
)

// checkpointTopic is walstream's default, which every stream shares.
const checkpointTopic = "walstream.checkpoints"

// cpPart is the checkpoint topic's one partition.
var cpPart = tp{checkpointTopic, 0}

// record is an outbox record as a read_committed consumer saw it.
type record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	ID        string // header id
	// Reemit is the walstream.reemit header: the re-emit request that
	// published the record again; empty on a live record.
	Reemit   string
	Payload  payload
	BadValue string // set when the value is not a payload
}

func parseRecord(topic string, partition int32, offset int64, key, id, reemit string, value []byte) record {
	r := record{Topic: topic, Partition: partition, Offset: offset, Key: key, ID: id, Reemit: reemit}
	if err := json.Unmarshal(value, &r.Payload); err != nil {
		r.BadValue = string(value)
	}
	r.Payload.Pad = ""
	return r
}

// verdict is the end-of-run comparison of what Kafka holds with the ledger.
type verdict struct {
	Records             int `json:"records_read"`
	Duplicates          int `json:"duplicates"`
	Lost                int `json:"lost"`
	NotInLedger         int `json:"not_in_ledger"`
	RolledBackSeen      int `json:"rolled_back_seen"`
	OrderViolations     int `json:"order_violations"`
	PartitionViolations int `json:"aggregates_in_several_partitions"`
	Mismatches          int `json:"records_disagreeing_with_ledger"`
	// LostInGap are ledger rows not in Kafka because they were committed to
	// a recreated outbox table before it was in the publication, a gap
	// walstream stopped at and named: not failures.
	LostInGap int      `json:"lost_in_named_gaps"`
	Examples  examples `json:"examples,omitempty"`
}

func (v *verdict) failures() int {
	return v.Duplicates + v.Lost + v.NotInLedger + v.OrderViolations + v.PartitionViolations + v.Mismatches
}

// add adds w, stream name's verdict, to the totals v.
func (v *verdict) add(w verdict, name string) {
	v.Records += w.Records
	v.Duplicates += w.Duplicates
	v.Lost += w.Lost
	v.NotInLedger += w.NotInLedger
	v.RolledBackSeen += w.RolledBackSeen
	v.OrderViolations += w.OrderViolations
	v.PartitionViolations += w.PartitionViolations
	v.Mismatches += w.Mismatches
	v.LostInGap += w.LostInGap
	v.Examples.addFrom(w.Examples, name)
}

// examples are a check's first failures, a line each: at most 20, so that
// a report stays short however many there are.
type examples []string

func (e *examples) add(format string, args ...any) {
	if len(*e) < 20 {
		*e = append(*e, fmt.Sprintf(format, args...))
	}
}

// addFrom adds stream name's examples, each prefixed with its name.
func (e *examples) addFrom(o examples, name string) {
	for _, x := range o {
		e.add("%s: %s", name, x)
	}
}

// judge checks a stream's live records against its ledger: each committed
// event id exactly once, on the topic (prefix and the aggregate's type),
// key and payload the ledger implies; nothing that is not in the ledger
// (rolledBack names the ids known to have rolled back); each aggregate in
// one partition with its sequence numbers strictly increasing along it. A
// ledger row in gap, lost in a named recreation gap, may be missing, never
// duplicated. Re-emitted records are judgeReemits'.
func judge(recs []record, ledger map[string]ledgerRow, rolledBack, gap map[string]bool, prefix string) verdict {
	recs = slices.DeleteFunc(slices.Clone(recs), func(r record) bool { return r.Reemit != "" })
	slices.SortFunc(recs, func(a, b record) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	txRows := make(map[string]int)
	for _, r := range ledger {
		txRows[r.Tx]++
	}
	v := verdict{Records: len(recs)}
	seen := make(map[string]int)
	lastSeq := make(map[string]int64)
	partOf := make(map[string]string)
	for _, r := range recs {
		seen[r.ID]++
		where := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
		want, ok := ledger[r.ID]
		if !ok {
			v.NotInLedger++
			if rolledBack[r.ID] {
				v.RolledBackSeen++
			}
			v.Examples.add("%s: id %s (tx %s) is not in the ledger (rolled back: %v)", where, r.ID, r.Payload.Tx, rolledBack[r.ID])
			continue
		}
		if seen[r.ID] > 1 {
			v.Examples.add("%s: id %s (tx %s, %s seq %d) delivered again", where, r.ID, want.Tx, want.Agg, want.Seq)
			continue
		}
		typ, _, _ := strings.Cut(want.Agg, "-")
		if r.BadValue != "" || r.Topic != prefix+typ || r.Key != want.Agg ||
			r.Payload.Agg != want.Agg || r.Payload.Seq != want.Seq || r.Payload.Tx != want.Tx || r.Payload.N != txRows[want.Tx] {
			v.Mismatches++
			v.Examples.add("%s: id %s key %q payload %+v %q disagrees with ledger %+v (%d rows in tx)", where, r.ID, r.Key, r.Payload, r.BadValue, want, txRows[want.Tx])
			continue
		}
		part := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
		if p, ok := partOf[r.Key]; ok && p != part {
			v.PartitionViolations++
			v.Examples.add("%s: aggregate %s also in %s", where, r.Key, p)
		}
		partOf[r.Key] = part
		if r.Payload.Seq <= lastSeq[r.Key] {
			v.OrderViolations++
			v.Examples.add("%s: aggregate %s seq %d after %d", where, r.Key, r.Payload.Seq, lastSeq[r.Key])
		}
		lastSeq[r.Key] = max(lastSeq[r.Key], r.Payload.Seq)
	}
	for _, n := range seen {
		if n > 1 {
			v.Duplicates += n - 1
		}
	}
	for id, r := range ledger {
		if seen[id] == 0 && gap[id] {
			v.LostInGap++
			continue
		}
		if seen[id] == 0 {
			v.Lost++
			v.Examples.add("id %s (tx %s, %s seq %d) is in the ledger but not in Kafka", id, r.Tx, r.Agg, r.Seq)
		}
	}
	return v
}

// atomicity follows read_committed snapshots of the outbox topics and
// flags a writer transaction that is visible in part although it fits in
// one Kafka transaction (at most maxBatch rows). Larger ones are split by
// design, each part atomic.
//
// Apache Kafka makes a commit visible partition by partition: its
// coordinator writes the commit markers after EndTxn returns, so a reader
// may see a transaction in some partitions before the others. A partial
// transaction is flagged only at a settled snapshot, one at which no
// partition has a transaction open or a marker pending (every last stable
// offset at its high watermark): then every committed transaction is
// visible whole. The local broker writes its markers within EndTxn, which
// settles every snapshot between commits.
type atomicity struct {
	maxBatch   int
	visible    map[string]int
	partial    map[string]int // fitting transactions visible in part: tx → rows
	violated   map[string]bool
	Snapshots  int      `json:"snapshots"`
	Settled    int      `json:"settled_snapshots"`
	Violations int      `json:"violations"`
	Examples   examples `json:"examples,omitempty"`
}

func newAtomicity(maxBatch int) *atomicity {
	return &atomicity{maxBatch: maxBatch, visible: make(map[string]int), partial: make(map[string]int), violated: make(map[string]bool)}
}

// add adds b's counts to the totals a.
func (a *atomicity) add(b *atomicity) {
	a.Snapshots += b.Snapshots
	a.Settled += b.Settled
	a.Violations += b.Violations
	a.Examples = append(a.Examples, b.Examples...)
}

// snapshot takes the records that became visible since the last snapshot
// and, when settled, checks that every fitting transaction is visible whole
// or not at all.
func (a *atomicity) snapshot(newly []record, settled bool) {
	a.Snapshots++
	if settled {
		a.Settled++
	}
	for _, r := range newly {
		tx, n := r.Payload.Tx, r.Payload.N
		if tx == "" || n > a.maxBatch || r.Reemit != "" {
			continue
		}
		a.visible[tx]++
		if a.visible[tx] < n {
			a.partial[tx] = n
		} else {
			delete(a.partial, tx)
		}
	}
	for tx, n := range a.partial {
		if settled && !a.violated[tx] {
			a.violated[tx] = true
			a.Violations++
			a.Examples.add("snapshot %d: transaction %s visible with %d of its %d rows", a.Snapshots, tx, a.visible[tx], n)
		}
	}
}

// tp is a topic partition.
type tp struct {
	topic string
	part  int32
}

// cpRecord is a checkpoint record and its offset.
type cpRecord struct {
	offset int64
	cp     checkpoint.Checkpoint
}

// consumer reads every stream's outbox topics and the checkpoint topic
// continuously, read_committed, and keeps each stream's checkpoints apart
// by their key (the stream's name); records under other keys are not a
// stream's. It sends its own Fetch requests and decodes them with
// kgo.ProcessFetchPartition, so that it knows exactly how far it has read
// each partition: aborted batches advance the position without a record,
// and an aborted batch need not be followed by a marker (the local broker
// aborts a transaction left open by a crash without one). It connects to
// the brokers directly: they advertise their proxies, so the dialer sends
// a proxy's address to its broker.
type consumer struct {
	cl     *kgo.Client
	adm    *kadm.Client
	topics []string        // the outbox topics and the checkpoint topic
	keys   map[string]bool // the streams' checkpoint keys

	mu        sync.Mutex
	parts     map[string][]int32 // partitions of each topic, once all exist
	next      map[tp]int64       // everything before is read
	recs      map[tp][]record
	cps       map[string][]cpRecord // by key
	badCPs    int
	fetchErrs int
}

func newConsumer(direct string, dial func(ctx context.Context, network, host string) (net.Conn, error), streams []*stream) (*consumer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(direct, ",")...),
		kgo.Dialer(dial),
		// Fetch v12, the last that names topics rather than topic IDs.
		kgo.MaxVersions(kversion.V2_8_0()),
	)
	if err != nil {
		return nil, fmt.Errorf("creating the checker's Kafka client: %w", err)
	}
	c := &consumer{cl: cl, adm: kadm.NewClient(cl), topics: append(outboxTopics(streams), checkpointTopic), keys: make(map[string]bool),
		next: make(map[tp]int64), recs: make(map[tp][]record), cps: make(map[string][]cpRecord)}
	for _, st := range streams {
		c.keys[st.name] = true
	}
	return c, nil
}

func (c *consumer) close() { c.cl.Close() }

// run consumes until ctx ends.
func (c *consumer) run(ctx context.Context) {
	topics := c.topics
	for ctx.Err() == nil {
		if c.parts == nil {
			c.discover(ctx, topics)
			continue
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 200, 1, 64<<20
		req.IsolationLevel = 1 // read_committed
		c.mu.Lock()
		for _, topic := range topics {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = topic
			for _, p := range c.parts[topic] {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, c.next[tp{topic, p}], 8<<20
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		c.mu.Unlock()
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil {
			c.mu.Lock()
			c.fetchErrs++
			c.mu.Unlock()
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		for _, rt := range resp.Topics {
			for i := range rt.Partitions {
				c.take(rt.Topic, &rt.Partitions[i])
			}
		}
	}
}

// discover waits for the topics to exist and learns their partitions.
func (c *consumer) discover(ctx context.Context, topics []string) {
	tds, err := c.adm.ListTopics(ctx, topics...)
	if err == nil && tds.Error() == nil && len(tds) == len(topics) {
		parts := make(map[string][]int32)
		for _, td := range tds {
			parts[td.Topic] = td.Partitions.Numbers()
		}
		c.mu.Lock()
		c.parts = parts
		c.mu.Unlock()
		return
	}
	sleep(ctx, 200*time.Millisecond)
}

// take decodes one partition of a fetch response.
func (c *consumer) take(topic string, rp *kmsg.FetchResponseTopicPartition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := tp{topic, rp.Partition}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		KeepControlRecords: false,
		Offset:             c.next[k],
		IsolationLevel:     kgo.ReadCommitted(),
		Topic:              topic,
		Partition:          rp.Partition,
	}, rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		c.fetchErrs++
		return
	}
	c.next[k] = max(c.next[k], next)
	for _, r := range fp.Records {
		if topic == checkpointTopic {
			key := string(r.Key)
			if !c.keys[key] {
				continue // another producer's
			}
			cp, _, err := checkpoint.Decode(r.Value)
			if err != nil {
				c.badCPs++
				continue
			}
			c.cps[key] = append(c.cps[key], cpRecord{r.Offset, cp})
			continue
		}
		var id, reemit string
		for _, h := range r.Headers {
			switch h.Key {
			case "id":
				id = string(h.Value)
			case "walstream.reemit":
				reemit = string(h.Value)
			}
		}
		c.recs[k] = append(c.recs[k], parseRecord(topic, r.Partition, r.Offset, string(r.Key), id, reemit, r.Value))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// stableOffsets lists the last stable offset of every partition of the
// outbox and checkpoint topics in one ListOffsets request. ok is false
// while a topic does not exist yet.
func (c *consumer) stableOffsets(ctx context.Context) (map[tp]int64, bool, error) {
	return c.offsets(ctx, c.adm.ListCommittedOffsets, "stable offsets")
}

// endOffsets lists the high watermark of every partition of the outbox and
// checkpoint topics: past the last stable offset while a transaction is
// open there or its marker is still to be written.
func (c *consumer) endOffsets(ctx context.Context) (map[tp]int64, bool, error) {
	return c.offsets(ctx, c.adm.ListEndOffsets, "end offsets")
}

// offsets lists the offsets of every partition of the outbox and
// checkpoint topics with list, one of the admin client's ListOffsets
// requests; what names them in its error. ok is false while a topic does
// not exist yet or a partition's offset was not listed.
func (c *consumer) offsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), what string) (map[tp]int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	listed, err := list(ctx, c.topics...)
	if err != nil {
		return nil, false, fmt.Errorf("listing %s: %w", what, err)
	}
	out := make(map[tp]int64)
	ok := true
	for _, topic := range c.topics {
		ps := listed[topic]
		if len(ps) == 0 {
			ok = false
		}
		for p, o := range ps {
			if o.Err != nil {
				ok = false
				continue
			}
			out[tp{topic, p}] = o.Offset
		}
	}
	return out, ok, nil
}

// readTo reports whether the consumer has read partition k up to end.
func (c *consumer) readTo(k tp, end int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next[k] >= end
}

// caughtUp reports whether the consumer has read every partition up to
// its offset in lso.
func (c *consumer) caughtUp(lso map[tp]int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, o := range lso {
		if c.next[k] < o {
			return false
		}
	}
	return true
}

func (c *consumer) waitCaughtUp(ctx context.Context, lso map[tp]int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !c.caughtUp(lso) {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// between returns the outbox records with from[k] <= offset < to[k].
func (c *consumer) between(from, to map[tp]int64) []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []record
	for k, recs := range c.recs {
		lo, hi := from[k], to[k]
		i, _ := slices.BinarySearchFunc(recs, lo, func(r record, o int64) int { return cmpInt(r.Offset, o) })
		for ; i < len(recs) && recs[i].Offset < hi; i++ {
			out = append(out, recs[i])
		}
	}
	return out
}

// lastCheckpoint returns the last checkpoint under key before offset end.
func (c *consumer) lastCheckpoint(key string, end int64) (checkpoint.Checkpoint, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cps := c.cps[key]
	i, _ := slices.BinarySearchFunc(cps, end, func(r cpRecord, o int64) int { return cmpInt(r.offset, o) })
	if i == 0 {
		return checkpoint.Checkpoint{}, false
	}
	return cps[i-1].cp, true
}

// all returns every record of st's topics read so far.
func (c *consumer) all(st *stream) []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []record
	for k, recs := range c.recs {
		if st.owns(k.topic) {
			out = append(out, recs...)
		}
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sampler checks, every interval, for every stream, that its slot's
// confirmed_flush_lsn (read first, every slot in one query) is not past the
// server's WAL end (read with it) nor past the stream's checkpoint
// committed in Kafka (read second), and takes each stream's atomicity
// snapshots.
//
// walstream confirms a position once the COMMIT marker of its transaction
// follows the checkpoint record, which it reads past the last stable
// offset; the checker reads the checkpoint topic read_committed, which
// shows a checkpoint only once every transaction before it on the
// partition is resolved, of every stream and of any other producer. So a
// confirmed position past the checkpoint visible at the sample is judged
// once every record written to the checkpoint partition before the sample
// is resolved: it must not be past the last of the stream's records among
// them that Kafka committed. A transaction held open on the partition (a
// stream paused mid-commit, another producer's) defers the judgement of
// every stream's samples until it ends. (That a position is never
// confirmed before its commit is decided is what the crash points test.)
type sampler struct {
	pgURL   string
	cons    *consumer
	streams []*stream
	byTopic map[string]*stream

	mu sync.Mutex
	// Samples and Skipped count the ticks; a tick is skipped when the
	// slots, the offsets or the records cannot be read in time (a server
	// down, the consumer behind).
	Samples    int   `json:"samples"`
	Skipped    int   `json:"samples_skipped"`
	SpillTxns  int64 `json:"slot_spill_txns"`
	SpillBytes int64 `json:"slot_spill_bytes"`
	// StreamTxns and StreamBytes are the transactions Postgres streamed
	// in progress, which walstream asks for (Postgres 14 and later).
	StreamTxns  int64               `json:"slot_stream_txns"`
	StreamBytes int64               `json:"slot_stream_bytes"`
	lastSpill   map[string][4]int64 // by slot
	done        map[tp]int64        // offsets the atomicity check has taken in
	conn        *pgx.Conn
}

// lateJudgement is how long after it was taken a sample's judgement must
// have waited to count as waiting through a hold of the checkpoint
// partition: commit markers come within milliseconds otherwise.
const lateJudgement = 5 * time.Second

// cpCheck is one stream's share of the sampler: its slot's confirmed
// position against its checkpoints in Kafka and the server's WAL end.
type cpCheck struct {
	Samples int `json:"samples"`
	// Skipped are ticks before the stream's slot or first checkpoint
	// existed.
	Skipped    int `json:"samples_skipped"`
	Violations int `json:"violations"`
	// PastWALEnd counts samples with the slot confirmed past the server's
	// WAL end.
	PastWALEnd int    `json:"confirmed_past_wal_end"`
	MaxLag     uint64 `json:"max_confirmed_lag_behind_checkpoint_bytes"`
	// Deferred counts samples whose confirmed position was past the
	// visible checkpoint, judged once Kafka resolved the records written
	// before them; JudgedLate those of them judged lateJudgement or more
	// after they were taken (through a hold), MaxDeferral the longest
	// wait, Unresolved those judged at the end with records before them
	// still unresolved.
	Deferred    int      `json:"samples_judged_after_commit_markers"`
	JudgedLate  int      `json:"samples_judged_after_a_hold"`
	MaxDeferral float64  `json:"longest_deferral_seconds"`
	Unresolved  int      `json:"samples_judged_unresolved"`
	Examples    examples `json:"examples,omitempty"`
	pending     []pendingConfirm
}

// add adds d's counts to the totals c.
func (c *cpCheck) add(d *cpCheck) {
	c.Samples += d.Samples
	c.Skipped += d.Skipped
	c.Violations += d.Violations
	c.PastWALEnd += d.PastWALEnd
	c.MaxLag = max(c.MaxLag, d.MaxLag)
	c.Deferred += d.Deferred
	c.JudgedLate += d.JudgedLate
	c.MaxDeferral = max(c.MaxDeferral, d.MaxDeferral)
	c.Unresolved += d.Unresolved
	c.Examples = append(c.Examples, d.Examples...)
}

// pendingConfirm is a confirmed position past the visible checkpoint, and
// the checkpoint partition's high watermark at the sample.
type pendingConfirm struct {
	at        time.Time
	confirmed pglogrepl.LSN
	end       int64
}

func newSampler(pgURL string, cons *consumer, streams []*stream) *sampler {
	s := &sampler{pgURL: pgURL, cons: cons, streams: streams, byTopic: make(map[string]*stream),
		lastSpill: make(map[string][4]int64), done: make(map[tp]int64)}
	for _, st := range streams {
		for _, t := range st.topics() {
			s.byTopic[t] = st
		}
	}
	return s
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	defer func() {
		if s.conn != nil {
			s.conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastSpill := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ok := s.sample(ctx)
		s.mu.Lock()
		if ok {
			s.Samples++
		} else {
			s.Skipped++
		}
		s.mu.Unlock()
		if time.Since(lastSpill) > 2*time.Second {
			lastSpill = time.Now()
			s.spill(ctx)
		}
	}
}

// query runs sql on the sampler's connection and scans each row.
func (s *sampler) query(ctx context.Context, sql string, scan func(pgx.CollectableRow) error) error {
	if s.conn == nil || s.conn.IsClosed() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.pgURL)
		cancel()
		if err != nil {
			return fmt.Errorf("connecting the sampler: %w", err)
		}
		s.conn = conn
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rows, err := s.conn.Query(qctx, sql)
	if err == nil {
		_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) { return struct{}{}, scan(r) })
	}
	if err != nil {
		s.conn.Close(context.Background())
		s.conn = nil
		return fmt.Errorf("sampling the slots: %w", err)
	}
	return nil
}

// sample takes one sample of every stream; false means it could not (a
// server down, the consumer behind).
func (s *sampler) sample(ctx context.Context) bool {
	confirmed := make(map[string]pglogrepl.LSN)
	var walEnd pglogrepl.LSN
	err := s.query(ctx, "SELECT slot_name, confirmed_flush_lsn::text, pg_current_wal_lsn()::text FROM pg_replication_slots WHERE confirmed_flush_lsn IS NOT NULL",
		func(r pgx.CollectableRow) error {
			var slot, c, end string
			if err := r.Scan(&slot, &c, &end); err != nil {
				return err
			}
			lsn, err1 := pglogrepl.ParseLSN(c)
			e, err2 := pglogrepl.ParseLSN(end)
			if err := errors.Join(err1, err2); err != nil {
				return err
			}
			confirmed[slot], walEnd = lsn, e
			return nil
		})
	if err != nil {
		return false
	}
	lso, complete, err := s.cons.stableOffsets(ctx)
	if err != nil || !complete {
		return false
	}
	// Read after the stable offsets: equal to them, nothing was open or
	// pending when those were taken.
	hwm, complete, err := s.cons.endOffsets(ctx)
	if err != nil || !complete || !s.cons.waitCaughtUp(ctx, lso, 3*time.Second) {
		return false
	}
	newly := make(map[*stream][]record)
	for _, r := range s.cons.between(s.done, lso) {
		newly[s.byTopic[r.Topic]] = append(newly[s.byTopic[r.Topic]], r)
	}
	for k, o := range lso {
		if o > s.done[k] {
			s.done[k] = o
		}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		// A stream's snapshot is settled when none of its partitions has
		// a transaction open or a marker pending.
		settled := true
		for k, o := range lso {
			if st.owns(k.topic) && hwm[k] != o {
				settled = false
			}
		}
		st.atom.snapshot(newly[st], settled)
		c := st.cp
		conf, ok := confirmed[st.slot]
		if !ok {
			c.Skipped++
			continue
		}
		if conf > walEnd {
			c.PastWALEnd++
			c.Violations++
			c.Examples.add("%s: slot %s confirmed_flush_lsn %s is past the server's WAL end %s", now.Format(time.TimeOnly), st.slot, conf, walEnd)
		}
		cp, ok := s.cons.lastCheckpoint(st.name, lso[cpPart])
		if !ok {
			c.Skipped++
			continue
		}
		c.Samples++
		if conf > cp.LSN {
			c.pending = append(c.pending, pendingConfirm{at: now, confirmed: conf, end: hwm[cpPart]})
		} else if lag := uint64(cp.LSN - conf); lag > c.MaxLag {
			c.MaxLag = lag
		}
		s.judge(st, now, false)
	}
	return true
}

// judge judges st's pending confirmed positions whose checkpoint records
// Kafka has resolved since; with final, also those it never resolved.
// s.mu is held.
func (s *sampler) judge(st *stream, now time.Time, final bool) {
	c := st.cp
	rest := c.pending[:0]
	for _, p := range c.pending {
		resolved := s.cons.readTo(cpPart, p.end)
		if !resolved && !final {
			rest = append(rest, p)
			continue
		}
		c.Deferred++
		if !resolved {
			c.Unresolved++
		}
		waited := now.Sub(p.at)
		c.MaxDeferral = max(c.MaxDeferral, waited.Seconds())
		if waited >= lateJudgement {
			c.JudgedLate++
		}
		cp, _ := s.cons.lastCheckpoint(st.name, p.end)
		if p.confirmed <= cp.LSN {
			continue
		}
		c.Violations++
		c.Examples.add("%s: slot %s confirmed_flush_lsn %s is past the checkpoint committed in Kafka %s",
			p.at.Format(time.TimeOnly), st.slot, p.confirmed, cp)
	}
	c.pending = rest
}

// judgedLate returns how many of st's samples were judged after a hold so
// far.
func (s *sampler) judgedLate(st *stream) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return st.cp.JudgedLate
}

// finish judges what is still pending, once the consumer has read
// everything.
func (s *sampler) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		s.judge(st, time.Now(), true)
	}
}

// spill accumulates pg_stat_replication_slots' spill and stream counters
// of the streams' slots, which a crash restart of Postgres resets.
func (s *sampler) spill(ctx context.Context) {
	now := make(map[string][4]int64)
	if err := s.query(ctx, "SELECT slot_name, spill_txns, spill_bytes, stream_txns, stream_bytes FROM pg_stat_replication_slots",
		func(r pgx.CollectableRow) error {
			var slot string
			var n [4]int64
			if err := r.Scan(&slot, &n[0], &n[1], &n[2], &n[3]); err != nil {
				return err
			}
			now[slot] = n
			return nil
		}); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		n, ok := now[st.slot]
		if !ok {
			continue
		}
		last := s.lastSpill[st.slot]
		s.SpillTxns += growth(n[0], last[0])
		s.SpillBytes += growth(n[1], last[1])
		s.StreamTxns += growth(n[2], last[2])
		s.StreamBytes += growth(n[3], last[3])
		s.lastSpill[st.slot] = n
	}
}

// growth is how much a counter grew since last; a counter below last was
// reset and grew from zero.
func growth(now, last int64) int64 {
	if now < last {
		return now
	}
	return now - last
}

// kcatRead reads a topic from the beginning to its end with kcat, a
// librdkafka client independent of the one walstream uses,
// read_committed.
func kcatRead(ctx context.Context, brokerAddr, topic string) ([]record, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rs, err := testenv.Kcat(ctx, brokerAddr, topic)
	if err != nil {
		return nil, err
	}
	recs := make([]record, 0, len(rs))
	for _, r := range rs {
		recs = append(recs, parseRecord(topic, r.Partition, r.Offset, r.Key, r.Header("id"), r.Header("walstream.reemit"), []byte(r.Value)))
	}
	return recs, nil
}
