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

// checkpointTopic and slot are walstream's defaults, which the suite uses.
const (
	checkpointTopic = "walstream.checkpoints"
	slotName        = "walstream"
)

func outboxTopics() []string {
	var ts []string
	for _, typ := range aggregateTypes {
		ts = append(ts, "outbox.event."+typ)
	}
	return ts
}

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
	Examples  []string `json:"examples,omitempty"`
}

func (v *verdict) failures() int {
	return v.Duplicates + v.Lost + v.NotInLedger + v.OrderViolations + v.PartitionViolations + v.Mismatches
}

func (v *verdict) example(format string, args ...any) {
	if len(v.Examples) < 20 {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

// judge checks the live records against the ledger: each committed event
// id exactly once, on the topic, key and payload the ledger implies;
// nothing that is not in the ledger (rolledBack names the ids known to
// have rolled back); each aggregate in one partition with its sequence
// numbers strictly increasing along it. A ledger row in gap, lost in a
// named recreation gap, may be missing, never duplicated. Re-emitted
// records are judgeReemits'.
func judge(recs []record, ledger map[string]ledgerRow, rolledBack, gap map[string]bool) verdict {
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
			v.example("%s: id %s (tx %s) is not in the ledger (rolled back: %v)", where, r.ID, r.Payload.Tx, rolledBack[r.ID])
			continue
		}
		if seen[r.ID] > 1 {
			v.example("%s: id %s (tx %s, %s seq %d) delivered again", where, r.ID, want.Tx, want.Agg, want.Seq)
			continue
		}
		typ, _, _ := strings.Cut(want.Agg, "-")
		if r.BadValue != "" || r.Topic != "outbox.event."+typ || r.Key != want.Agg ||
			r.Payload.Agg != want.Agg || r.Payload.Seq != want.Seq || r.Payload.Tx != want.Tx || r.Payload.N != txRows[want.Tx] {
			v.Mismatches++
			v.example("%s: id %s key %q payload %+v %q disagrees with ledger %+v (%d rows in tx)", where, r.ID, r.Key, r.Payload, r.BadValue, want, txRows[want.Tx])
			continue
		}
		part := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
		if p, ok := partOf[r.Key]; ok && p != part {
			v.PartitionViolations++
			v.example("%s: aggregate %s also in %s", where, r.Key, p)
		}
		partOf[r.Key] = part
		if r.Payload.Seq <= lastSeq[r.Key] {
			v.OrderViolations++
			v.example("%s: aggregate %s seq %d after %d", where, r.Key, r.Payload.Seq, lastSeq[r.Key])
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
			v.example("id %s (tx %s, %s seq %d) is in the ledger but not in Kafka", id, r.Tx, r.Agg, r.Seq)
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
	Examples   []string `json:"examples,omitempty"`
}

func newAtomicity(maxBatch int) *atomicity {
	return &atomicity{maxBatch: maxBatch, visible: make(map[string]int), partial: make(map[string]int), violated: make(map[string]bool)}
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
			if len(a.Examples) < 20 {
				a.Examples = append(a.Examples, fmt.Sprintf("snapshot %d: transaction %s visible with %d of its %d rows", a.Snapshots, tx, a.visible[tx], n))
			}
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

// consumer reads the outbox topics and the checkpoint topic continuously,
// read_committed. It sends its own Fetch requests and decodes them with
// kgo.ProcessFetchPartition, so that it knows exactly how far it has read
// each partition: aborted batches advance the position without a record,
// and an aborted batch need not be followed by a marker (the local broker
// aborts a transaction left open by a crash without one). It connects to
// the brokers directly: they advertise their proxies, so the dialer sends
// a proxy's address to its broker.
type consumer struct {
	cl  *kgo.Client
	adm *kadm.Client

	mu        sync.Mutex
	parts     map[string][]int32 // partitions of each topic, once all exist
	next      map[tp]int64       // everything before is read
	recs      map[tp][]record
	cps       []cpRecord
	badCPs    int
	fetchErrs int
}

func newConsumer(direct string, dial func(ctx context.Context, network, host string) (net.Conn, error)) (*consumer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(direct, ",")...),
		kgo.Dialer(dial),
		// Fetch v12, the last that names topics rather than topic IDs.
		kgo.MaxVersions(kversion.V2_8_0()),
	)
	if err != nil {
		return nil, fmt.Errorf("creating the checker's Kafka client: %w", err)
	}
	return &consumer{cl: cl, adm: kadm.NewClient(cl), next: make(map[tp]int64), recs: make(map[tp][]record)}, nil
}

func (c *consumer) close() { c.cl.Close() }

// run consumes until ctx ends.
func (c *consumer) run(ctx context.Context) {
	topics := append(outboxTopics(), checkpointTopic)
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
			// The stream's records, whatever its key: the stream name
			// (<database>/<slot> by default) names the slot in each.
			cp, _, err := checkpoint.Decode(r.Value)
			if err != nil {
				c.badCPs++
				continue
			}
			if cp.Owner.Slot != slotName {
				continue
			}
			c.cps = append(c.cps, cpRecord{r.Offset, cp})
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
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	listed, err := c.adm.ListCommittedOffsets(ctx, append(outboxTopics(), checkpointTopic)...)
	if err != nil {
		return nil, false, fmt.Errorf("listing stable offsets: %w", err)
	}
	return offsetsOf(listed)
}

// endOffsets lists the high watermark of every partition of the outbox and
// checkpoint topics: past the last stable offset while a transaction is
// open there or its marker is still to be written.
func (c *consumer) endOffsets(ctx context.Context) (map[tp]int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	listed, err := c.adm.ListEndOffsets(ctx, append(outboxTopics(), checkpointTopic)...)
	if err != nil {
		return nil, false, fmt.Errorf("listing end offsets: %w", err)
	}
	return offsetsOf(listed)
}

func offsetsOf(listed kadm.ListedOffsets) (map[tp]int64, bool, error) {
	out := make(map[tp]int64)
	ok := true
	for _, topic := range append(outboxTopics(), checkpointTopic) {
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

// lastCheckpoint returns the last checkpoint before offset end.
func (c *consumer) lastCheckpoint(end int64) (checkpoint.Checkpoint, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, _ := slices.BinarySearchFunc(c.cps, end, func(r cpRecord, o int64) int { return cmpInt(r.offset, o) })
	if i == 0 {
		return checkpoint.Checkpoint{}, false
	}
	return c.cps[i-1].cp, true
}

// all returns every outbox record read so far.
func (c *consumer) all() []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []record
	for _, recs := range c.recs {
		out = append(out, recs...)
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

// sampler checks, every interval, that the slot's confirmed_flush_lsn
// (read first) is not past the server's WAL end (read with it) nor the
// checkpoint committed in Kafka (read second), and takes the atomicity
// snapshots.
//
// walstream confirms once EndTxn returns, when Kafka's commit is decided
// and durable, but Apache Kafka writes the marker that makes the
// checkpoint visible after that. So a confirmed position past the
// checkpoint visible at the sample is judged once every record written to
// the checkpoint partition before the sample is resolved: it must not be
// past the last of them that Kafka committed. (That a position is never
// confirmed before its commit is decided is what the crash points test.)
type sampler struct {
	pgURL string
	cons  *consumer
	atom  *atomicity

	mu         sync.Mutex
	Samples    int `json:"samples"`
	Skipped    int `json:"samples_skipped"`
	Violations int `json:"violations"`
	// PastWALEnd counts samples with the slot confirmed past the server's
	// WAL end.
	PastWALEnd int      `json:"confirmed_past_wal_end"`
	MaxLag     uint64   `json:"max_confirmed_lag_behind_checkpoint_bytes"`
	Examples   []string `json:"examples,omitempty"`
	SpillTxns  int64    `json:"slot_spill_txns"`
	SpillBytes int64    `json:"slot_spill_bytes"`
	// StreamTxns and StreamBytes are the transactions Postgres streamed
	// in progress, which walstream asks for (Postgres 14 and later).
	StreamTxns  int64 `json:"slot_stream_txns"`
	StreamBytes int64 `json:"slot_stream_bytes"`
	lastSpill   [4]int64
	// Deferred counts samples whose confirmed position was past the
	// visible checkpoint, judged once Kafka resolved the records written
	// before them; pending are those not judged yet.
	Deferred int `json:"samples_judged_after_commit_markers"`
	pending  []pendingConfirm
	done     map[tp]int64 // offsets the atomicity check has taken in
	conn     *pgx.Conn
}

// pendingConfirm is a confirmed position past the visible checkpoint, and
// the checkpoint partition's high watermark at the sample.
type pendingConfirm struct {
	at        time.Time
	confirmed pglogrepl.LSN
	end       int64
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	defer func() {
		if s.conn != nil {
			s.conn.Close(context.Background())
		}
	}()
	s.done = make(map[tp]int64)
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

func (s *sampler) query(ctx context.Context, sql string, dst ...any) error {
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
	if err := s.conn.QueryRow(qctx, sql, slotName).Scan(dst...); err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			s.conn.Close(context.Background())
			s.conn = nil
		}
		return fmt.Errorf("sampling the slot: %w", err)
	}
	return nil
}

// sample takes one sample; false means it could not (a server down, the
// consumer behind, nothing committed yet).
func (s *sampler) sample(ctx context.Context) bool {
	var confirmedText *string
	var walEndText string
	if err := s.query(ctx, "SELECT confirmed_flush_lsn::text, pg_current_wal_lsn()::text FROM pg_replication_slots WHERE slot_name = $1",
		&confirmedText, &walEndText); err != nil || confirmedText == nil {
		return false
	}
	confirmed, err1 := pglogrepl.ParseLSN(*confirmedText)
	walEnd, err2 := pglogrepl.ParseLSN(walEndText)
	if err1 != nil || err2 != nil {
		return false
	}
	if confirmed > walEnd {
		s.mu.Lock()
		s.PastWALEnd++
		s.Violations++
		if len(s.Examples) < 20 {
			s.Examples = append(s.Examples, fmt.Sprintf("%s: slot confirmed_flush_lsn %s is past the server's WAL end %s",
				time.Now().Format(time.TimeOnly), confirmed, walEnd))
		}
		s.mu.Unlock()
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
	cpPart := tp{checkpointTopic, 0}
	cp, ok := s.cons.lastCheckpoint(lso[cpPart])
	if !ok {
		return false
	}
	settled := true
	for k, o := range lso {
		if hwm[k] != o {
			settled = false
		}
	}
	newly := s.cons.between(s.done, lso)
	for k, o := range lso {
		if o > s.done[k] {
			s.done[k] = o
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.atom.snapshot(newly, settled)
	if confirmed > cp.LSN {
		s.pending = append(s.pending, pendingConfirm{at: time.Now(), confirmed: confirmed, end: hwm[cpPart]})
	} else if lag := uint64(cp.LSN - confirmed); lag > s.MaxLag {
		s.MaxLag = lag
	}
	s.judge(false)
	return true
}

// judge judges the pending confirmed positions whose checkpoint records
// Kafka has resolved since; with final, also those it never resolved.
// s.mu is held.
func (s *sampler) judge(final bool) {
	cpPart := tp{checkpointTopic, 0}
	rest := s.pending[:0]
	for _, p := range s.pending {
		if !s.cons.readTo(cpPart, p.end) && !final {
			rest = append(rest, p)
			continue
		}
		s.Deferred++
		cp, _ := s.cons.lastCheckpoint(p.end)
		if p.confirmed <= cp.LSN {
			continue
		}
		s.Violations++
		if len(s.Examples) < 20 {
			s.Examples = append(s.Examples, fmt.Sprintf("%s: slot confirmed_flush_lsn %s is past the checkpoint committed in Kafka %s",
				p.at.Format(time.TimeOnly), p.confirmed, cp))
		}
	}
	s.pending = rest
}

// finish judges what is still pending, once the consumer has read
// everything.
func (s *sampler) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.judge(true)
}

// spill accumulates pg_stat_replication_slots' spill and stream counters,
// which a crash restart of Postgres resets.
func (s *sampler) spill(ctx context.Context) {
	var now [4]int64
	if err := s.query(ctx, "SELECT spill_txns, spill_bytes, stream_txns, stream_bytes FROM pg_stat_replication_slots WHERE slot_name = $1",
		&now[0], &now[1], &now[2], &now[3]); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.SpillTxns += growth(now[0], s.lastSpill[0])
	s.SpillBytes += growth(now[1], s.lastSpill[1])
	s.StreamTxns += growth(now[2], s.lastSpill[2])
	s.StreamBytes += growth(now[3], s.lastSpill[3])
	s.lastSpill = now
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
