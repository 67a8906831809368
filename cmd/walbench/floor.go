package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/walstream/walstream/checkpoint"
)

// Kafka's latency floor under walstream's transactions: after a live load,
// the Kafka transactions walstream committed in the measured window are
// committed again, as many, as large and begun at the same moments after
// the first, by a bare transactional producer (kafka-txn -plan:
// franz-go, then the minimal client) on the same broker, into topics of
// the same layout, while a read_committed consumer times each record from
// the moment the producer was handed it. What walstream adds to Kafka's
// own cost is the difference from its insert → visible latency.
//
// The transactions come from walstream's checkpoint records, one per
// Kafka transaction: the growth of a record's event count, and of its
// re-emit requests' rows, over the record before is what the transaction
// held, and the record's time is when walstream began to commit it (taken
// before it produced the checkpoint, its events handed to its client
// already). walstream's producer commits one transaction at a time and
// hands a transaction's first record to franz-go after the commit before,
// so the records whose Kafka timestamps (franz-go's, at the hand-over, in
// ms) fall after one commit began and no later than the next are the
// next's, and the first of them is when walstream began it: the moment
// the bare producer is handed the whole transaction, and commits it at
// once, without walstream's linger.

// LatencyFloor is one bare producer committing walstream's transactions of
// a measured window again, right after it.
type LatencyFloor struct {
	Client string `json:"client"` // franz-go or minimal
	// Txns are the transactions committed, walstream's in the window;
	// Records their records besides the checkpoints, the timed ones;
	// Reemitted the untimed records standing for re-emitted rows.
	Txns      int   `json:"txns"`
	Records   int64 `json:"records"`
	Reemitted int64 `json:"reemitted,omitempty"`
	Samples   int   `json:"samples"`
	// P50Ms, P99Ms and MaxMs are from the producer's send (the moment it
	// was handed the transaction's records and began it) to a record
	// becoming visible to a read_committed consumer.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// CommitP50Ms and CommitP99Ms are from the commit's start (EndTxn
	// sent, the records written) to visible.
	CommitP50Ms float64 `json:"commit_p50_ms"`
	CommitP99Ms float64 `json:"commit_p99_ms"`
	// Late counts transactions begun over floorLate after their moment,
	// the one before still committing (floorPause).
	Late int `json:"late"`
	// Missing records were committed but not seen within 30 s.
	Missing int64   `json:"missing"`
	Load1   float64 `json:"load1"` // 1-minute load average at the start
}

// floorLate is how far past its moment a replayed transaction may begin
// before it counts as late.
const floorLate = time.Millisecond

// floorPause is the least time between the end of a replayed transaction
// and the start of the next. On Apache Kafka 4 (transaction version 2) the
// coordinator still writes a commit's markers for a moment after EndTxn
// returns, and a Produce of the next transaction that comes in that moment
// waits in the broker for its retry backoff (add.partitions.to.txn.retry.
// backoff.ms, 20 ms): a producer that began each late transaction at once
// would pay that every time and never catch up with the plan, measuring
// that instead of the transactions. 0.5 ms was enough on the development
// machine.
const floorPause = time.Millisecond

// floorWarmup is the transactions a bare producer commits before the
// plan's, to load its producer id and the partitions' leaders.
const floorWarmup = 20

// floorClients are the bare producers, in the order they run.
func floorClients() []string { return []string{"franz-go", "minimal"} }

// kafkaTxn is a Kafka transaction walstream committed.
type kafkaTxn struct {
	begun     time.Time // when walstream handed franz-go its first record
	records   int       // live events
	reemitted int       // re-emitted rows
}

// kafkaTxns are the transactions walstream began to commit in [from, to),
// from the checkpoints of one key in the order Kafka holds them, and the
// Kafka timestamps of its live records, sorted. The first checkpoint is
// the base the second's counts grow from. A transaction none of whose
// live records was seen (only a checkpoint, or re-emitted rows) begins as
// it commits.
func kafkaTxns(seen []seenCheckpoint, produced []time.Time, from, to time.Time) ([]kafkaTxn, error) {
	var out []kafkaTxn
	for i := 1; i < len(seen); i++ {
		prev, cur := seen[i-1], seen[i]
		if cur.committing.Before(from) || !cur.committing.Before(to) {
			continue
		}
		if !prev.cp.Counted || !cur.cp.Counted {
			return nil, fmt.Errorf("the checkpoint at %s or the one before counts no events (walstream before the count)", cur.cp)
		}
		if cur.cp.Events < prev.cp.Events {
			return nil, fmt.Errorf("the checkpoint at %s counts %d events, the one before %d", cur.cp, cur.cp.Events, prev.cp.Events)
		}
		t := kafkaTxn{begun: cur.committing, records: int(cur.cp.Events - prev.cp.Events), reemitted: reemittedSince(prev.cp, cur.cp)}
		j := sort.Search(len(produced), func(j int) bool { return produced[j].After(prev.committing) })
		if t.records > 0 && j < len(produced) && !produced[j].After(cur.committing) {
			t.begun = produced[j]
		}
		out = append(out, t)
	}
	return out, nil
}

// reemittedSince is the rows re-emit requests published from prev to cur,
// which the event count leaves out. A request prev does not name is new.
func reemittedSince(prev, cur checkpoint.Checkpoint) int {
	if cur.Notes == nil {
		return 0
	}
	var n int64
	for _, r := range cur.Notes.Reemits {
		n += r.Rows
		if prev.Notes != nil {
			if i := prev.Notes.Reemits.Find(r.ID); i >= 0 {
				n -= prev.Notes.Reemits[i].Rows
			}
		}
	}
	return int(max(n, 0))
}

// floorPlan is what kafka-txn -plan commits: Txns, each begun at its
// moment after the start, with records of the sizes of walstream's.
type floorPlan struct {
	Topic       string `json:"topic"`        // the timed records'
	ReemitTopic string `json:"reemit_topic"` // the re-emitted rows'; empty when there are none
	// CheckpointTopic takes one record of CheckpointBytes under
	// CheckpointKey in each transaction, as walstream's checkpoint topic.
	CheckpointTopic string `json:"checkpoint_topic"`
	CheckpointKey   string `json:"checkpoint_key"`
	// ValueBytes is each record's value: the mean value and headers of
	// walstream's records. A value holds its send time as ts_us.
	ValueBytes      int        `json:"value_bytes"`
	CheckpointBytes int        `json:"checkpoint_bytes"`
	Txns            []floorTxn `json:"txns"`
	Warmup          int        `json:"warmup"`
}

// floorTxn is one transaction of a plan.
type floorTxn struct {
	AtUs      int64 `json:"at_us"` // after the start
	Records   int   `json:"records"`
	Reemitted int   `json:"reemitted,omitempty"`
}

// newFloorPlan plans txns, timed from the first's begin, with records of
// valueBytes and checkpoints of checkpointBytes, into the topics named
// from prefix.
func newFloorPlan(txns []kafkaTxn, prefix string, valueBytes, checkpointBytes int) floorPlan {
	p := floorPlan{Topic: prefix, CheckpointTopic: prefix + ".checkpoints", CheckpointKey: "walbench/floor",
		ValueBytes: valueBytes, CheckpointBytes: checkpointBytes, Warmup: floorWarmup}
	for _, t := range txns {
		p.Txns = append(p.Txns, floorTxn{AtUs: t.begun.Sub(txns[0].begun).Microseconds(), Records: t.records, Reemitted: t.reemitted})
		if t.reemitted > 0 {
			p.ReemitTopic = prefix + ".reemit"
		}
	}
	return p
}

// records counts the plan's timed and re-emitted records.
func (p *floorPlan) records() (timed, reemitted int64) {
	for _, t := range p.Txns {
		timed += int64(t.Records)
		reemitted += int64(t.Reemitted)
	}
	return timed, reemitted
}

// floorResult is what kafka-txn -plan prints: when each transaction of the
// plan was due, sent and committed, in µs since the epoch.
type floorResult struct {
	WarmupRecords int         `json:"warmup_records"`
	Txns          []floorSent `json:"txns"`
}

type floorSent struct {
	DueUs    int64 `json:"due_us"`
	SendUs   int64 `json:"send_us"`
	CommitUs int64 `json:"commit_us"`
}

// replay commits plan's transactions with commit: first plan.Warmup of one
// record, then each of the plan's begun at its moment after the warm-up,
// and never sooner than floorPause after the one before ended. Each
// transaction's records carry the moment it was sent.
func replay(ctx context.Context, commit committer, plan *floorPlan) (*floorResult, error) {
	checkpointValue := bytes.Repeat([]byte{'c'}, plan.CheckpointBytes)
	key := 0
	var recs []txnRecord
	build := func(t floorTxn, send time.Time) []txnRecord {
		value := stampedValue(plan.ValueBytes, send.UnixMicro())
		recs = recs[:0]
		for i := range t.Records + t.Reemitted {
			topic := plan.Topic
			if i >= t.Records {
				topic = plan.ReemitTopic
			}
			// Keys as walstream's records have them, its rows' aggregate ids.
			recs = append(recs, txnRecord{topic, fmt.Appendf(nil, "order-%d", key%100000), value})
			key++
		}
		return append(recs, txnRecord{plan.CheckpointTopic, []byte(plan.CheckpointKey), checkpointValue})
	}
	var ended time.Time
	at := func(due time.Time) (time.Time, error) {
		due = later(due, ended.Add(floorPause))
		if d := time.Until(due); d > 0 {
			if err := sleepCtx(ctx, d); err != nil {
				return due, err
			}
		}
		return time.Now(), nil
	}
	res := &floorResult{}
	for i := range plan.Warmup {
		send, err := at(time.Time{})
		if err == nil {
			_, err = commit(build(floorTxn{Records: 1}, send))
		}
		if err != nil {
			return nil, fmt.Errorf("committing warm-up transaction %d: %w", i, err)
		}
		ended = time.Now()
		res.WarmupRecords++
	}
	start := time.Now().Add(floorPause)
	for i, t := range plan.Txns {
		due := start.Add(time.Duration(t.AtUs) * time.Microsecond)
		send, err := at(due)
		if err != nil {
			return nil, err
		}
		committing, err := commit(build(t, send))
		if err != nil {
			return nil, fmt.Errorf("committing transaction %d of the plan, %d records: %w", i, t.Records+t.Reemitted, err)
		}
		ended = time.Now()
		res.Txns = append(res.Txns, floorSent{DueUs: due.UnixMicro(), SendUs: send.UnixMicro(), CommitUs: committing.UnixMicro()})
	}
	return res, nil
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stampedValue is a JSON value of size bytes, or as few as it takes, that
// holds us as ts_us, as the latency scenario's rows hold their insert.
func stampedValue(size int, us int64) []byte {
	v := strconv.AppendInt([]byte(`{"ts_us": `), us, 10)
	v = append(v, `, "note": "`...)
	for len(v) < size-2 {
		v = append(v, 'x')
	}
	return append(v, `"}`...)
}

// measureFloor computes a bare producer's figures from the plan, what it
// printed, and the stamps (send times, µs) and latencies (µs from them)
// its consumer saw. Records whose stamp is no transaction's of the plan are
// the warm-up's.
func measureFloor(client string, plan *floorPlan, res *floorResult, stamps, lat []int64) (LatencyFloor, error) {
	f := LatencyFloor{Client: client, Txns: len(plan.Txns)}
	f.Records, f.Reemitted = plan.records()
	if len(res.Txns) != len(plan.Txns) {
		return f, fmt.Errorf("%s committed %d transactions of the plan's %d", client, len(res.Txns), len(plan.Txns))
	}
	commitOf := make(map[int64]int64, len(res.Txns))
	for _, t := range res.Txns {
		commitOf[t.SendUs] = t.CommitUs
		if time.Duration(t.SendUs-t.DueUs)*time.Microsecond > floorLate {
			f.Late++
		}
	}
	var sent, committed []int64
	for i, s := range stamps {
		if c, ok := commitOf[s]; ok {
			sent = append(sent, lat[i])
			committed = append(committed, lat[i]-(c-s))
		}
	}
	f.Samples, f.Missing = len(sent), f.Records-int64(len(sent))
	f.P50Ms, f.P99Ms = percentile(sent, 0.50)/1e3, percentile(sent, 0.99)/1e3
	if len(sent) > 0 {
		f.MaxMs = float64(slices.Max(sent)) / 1e3
	}
	f.CommitP50Ms, f.CommitP99Ms = percentile(committed, 0.50)/1e3, percentile(committed, 0.99)/1e3
	return f, nil
}

// latencyFloors commits walstream's transactions of [from, to), as the
// checkpoints of cps, which it stops, and its live records on topic, read
// by c, tell, again with each bare producer in turn against broker, and returns
// their figures. prefix, a path, names the files that keep each plan and
// what its producer printed, and its last element the topics.
func (b *bench) latencyFloors(ctx context.Context, broker, prefix string, cps *checkpointLog, c *timedConsumer, topic string, from, to time.Time) ([]LatencyFloor, error) {
	seen, err := cps.stop()
	if err != nil {
		return nil, err
	}
	txns, err := kafkaTxns(seen, c.recordTimes(topic), from, to)
	if err != nil {
		return nil, err
	}
	if len(txns) == 0 {
		return nil, fmt.Errorf("no Kafka transaction of walstream's began from %s to %s", from.Format(time.TimeOnly), to.Format(time.TimeOnly))
	}
	cpBytes := 0
	for _, s := range seen {
		cpBytes += s.bytes
	}
	var out []LatencyFloor
	tag := filepath.Base(prefix)
	for _, client := range floorClients() {
		plan := newFloorPlan(txns, fmt.Sprintf("walbench.floor.%s.%s", tag, client), c.meanBytes(topic), cpBytes/len(seen))
		f, err := b.latencyFloor(ctx, broker, prefix+"-floor-"+client, client, &plan)
		if err != nil {
			return nil, fmt.Errorf("measuring Kafka's floor with %s: %w", client, err)
		}
		b.logf("%s: Kafka's floor with %s over walstream's %d transactions (%d records): send → visible p50 %.1f ms, p99 %.1f ms; commit → visible p99 %.1f ms; %d late, %d missing",
			tag, client, f.Txns, f.Records, f.P50Ms, f.P99Ms, f.CommitP99Ms, f.Late, f.Missing)
		out = append(out, f)
	}
	return out, nil
}

// fleetFloors commits each stream's Kafka transactions of [from, to) again,
// as its checkpoints in cps and its records, read by c from its topic in
// topics, tell: with franz-go, a producer per stream in one process, all
// at once, each into topics of its own, every one's checkpoints into one
// topic, as a fleet's streams share theirs. prefix, a path, names the
// files, and its last element the topics.
func (b *bench) fleetFloors(ctx context.Context, broker, prefix string, cps []*checkpointLog, c *timedConsumer, topics []string, from, to time.Time) ([]LatencyFloor, error) {
	tag := filepath.Base(prefix)
	plans := make([]*floorPlan, len(cps))
	for i, l := range cps {
		seen, err := l.stop()
		if err != nil {
			return nil, err
		}
		txns, err := kafkaTxns(seen, c.recordTimes(topics[i]), from, to)
		if err != nil {
			return nil, fmt.Errorf("stream %d: %w", i+1, err)
		}
		if len(txns) == 0 {
			return nil, fmt.Errorf("no Kafka transaction of stream %d began from %s to %s", i+1, from.Format(time.TimeOnly), to.Format(time.TimeOnly))
		}
		cpBytes := 0
		for _, s := range seen {
			cpBytes += s.bytes
		}
		plan := newFloorPlan(txns, fmt.Sprintf("walbench.floor.%s.%d", tag, i+1), c.meanBytes(topics[i]), cpBytes/len(seen))
		plan.CheckpointTopic, plan.CheckpointKey = "walbench.floor."+tag+".checkpoints", fmt.Sprintf("walbench/floor/%d", i+1)
		plans[i] = &plan
	}
	return b.latencyFloorsOf(ctx, broker, prefix, "franz-go", plans)
}

// latencyFloor runs kafka-txn -plan with client, a process of its own,
// and times its records (floorRound).
func (b *bench) latencyFloor(ctx context.Context, broker, prefix, client string, plan *floorPlan) (LatencyFloor, error) {
	fs, err := b.latencyFloorsOf(ctx, broker, prefix, client, []*floorPlan{plan})
	if err != nil {
		return LatencyFloor{}, err
	}
	return fs[0], nil
}

// latencyFloorsOf runs kafka-txn -plan with client and every plan at once,
// a process of its own, and times their records (floorRound).
func (b *bench) latencyFloorsOf(ctx context.Context, broker, prefix, client string, plans []*floorPlan) ([]LatencyFloor, error) {
	return floorRound(ctx, broker, b.cfg.Partitions, prefix, client, plans, func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, b.kafkaTxnExe, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%w: %s", err, bytes.TrimSpace(stderr.Bytes()))
		}
		return out, nil
	})
}

// floorRound creates the plans' topics on broker, the records' with
// partitions partitions, has kafkaTxn (walbench's arguments in, its output
// out) run kafka-txn -plan with client and every plan, committed at once
// by a producer each, and times the records with one read_committed
// consumer. The plans and what kafka-txn printed go to files named from
// prefix.
func floorRound(ctx context.Context, broker string, partitions int, prefix, client string, plans []*floorPlan, kafkaTxn func(args ...string) ([]byte, error)) ([]LatencyFloor, error) {
	var timed, topics, cpTopics, paths []string
	for i, plan := range plans {
		timed = append(timed, plan.Topic)
		topics = append(topics, plan.Topic)
		if plan.ReemitTopic != "" {
			topics = append(topics, plan.ReemitTopic)
		}
		if !slices.Contains(cpTopics, plan.CheckpointTopic) {
			cpTopics = append(cpTopics, plan.CheckpointTopic)
		}
		js, err := json.Marshal(plan)
		if err != nil {
			return nil, fmt.Errorf("encoding the plan: %w", err)
		}
		path := prefix + ".plan.json"
		if len(plans) > 1 {
			path = fmt.Sprintf("%s-%d.plan.json", prefix, i+1)
		}
		if err := os.WriteFile(path, js, 0o644); err != nil {
			return nil, fmt.Errorf("writing the plan: %w", err)
		}
		paths = append(paths, path)
	}
	if err := createTopics(ctx, broker, partitions, topics...); err != nil {
		return nil, err
	}
	// Past their first index entries, as walstream's are by the time it is
	// measured (seasonTopics); their records are stamped 0, before start.
	if err := seasonTopics(ctx, broker, partitions, topics...); err != nil {
		return nil, err
	}
	for _, t := range cpTopics {
		if err := createCheckpointTopic(ctx, broker, t); err != nil {
			return nil, err
		}
	}
	c, err := startTimedConsumer(broker, timed, time.Now())
	if err != nil {
		return nil, err
	}
	defer c.close()
	load, err := loadAvg()
	if err != nil {
		return nil, err
	}
	out, err := kafkaTxn(kafkaTxnCommand, "-client", client, "-broker", broker, "-plan", strings.Join(paths, ","))
	if err != nil {
		return nil, fmt.Errorf("running %s -plan %s: %w", kafkaTxnCommand, strings.Join(paths, ","), err)
	}
	if err := os.WriteFile(prefix+".sent.json", out, 0o644); err != nil {
		return nil, fmt.Errorf("keeping what %s -plan printed: %w", kafkaTxnCommand, err)
	}
	res := make([]floorResult, len(plans))
	dec := json.NewDecoder(bytes.NewReader(out))
	var want int64
	for i, plan := range plans {
		if err := dec.Decode(&res[i]); err != nil {
			return nil, fmt.Errorf("reading what %s -plan printed of plan %d: %w", kafkaTxnCommand, i+1, err)
		}
		timed, _ := plan.records()
		want += int64(res[i].WarmupRecords) + timed
	}
	_ = awaitArrival(c.received, want, nil) // no process to exit; what does not arrive is Missing
	c.close()
	if err := c.err(); err != nil {
		return nil, err
	}
	floors := make([]LatencyFloor, len(plans))
	for i, plan := range plans {
		stamps, lat := c.stamps(plan.Topic)
		if floors[i], err = measureFloor(client, plan, &res[i], stamps, lat); err != nil {
			return nil, err
		}
		floors[i].Load1 = load
	}
	return floors, nil
}

// createCheckpointTopic creates topic as walstream creates its checkpoint
// topic on one broker: one partition, compacted.
func createCheckpointTopic(ctx context.Context, broker, topic string) error {
	return createTopicsWith(ctx, broker, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic)
}
