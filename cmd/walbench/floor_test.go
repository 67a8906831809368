package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/internal/testenv"
)

// seenAt is a checkpoint record walstream began to commit at, counting
// events and holding re-emit requests of the given rows by id, as the
// checkpoint log decodes it.
func seenAt(t *testing.T, at time.Time, lsn pglogrepl.LSN, events int, reemits map[string]int64) seenCheckpoint {
	t.Helper()
	cp := checkpoint.Checkpoint{LSN: lsn}.Published(events)
	if len(reemits) > 0 {
		cp.Notes = &checkpoint.Notes{}
		for id, rows := range reemits {
			cp.Notes.Reemits = append(cp.Notes.Reemits, checkpoint.Reemit{ID: id, State: checkpoint.ReemitRunning, Rows: rows})
		}
	}
	v := cp.Encode(checkpoint.Owner{Slot: "s"}, at)
	got, committing, err := checkpoint.Decode(v)
	if err != nil {
		t.Fatal(err)
	}
	return seenCheckpoint{visible: at.Add(5 * time.Millisecond), committing: committing, cp: got, bytes: len(v)}
}

// Each Kafka transaction walstream committed is its checkpoint record: the
// growth of its event count and of its re-emit requests' rows over the
// record before is what it held, and it began with the first record handed
// to franz-go after the commit before began.
func TestKafkaTxns(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	seen := []seenCheckpoint{
		seenAt(t, ms(0), 100, 7, nil), // the base: before the window
		seenAt(t, ms(14), 200, 17, nil),
		seenAt(t, ms(29), 300, 18, map[string]int64{"r-1": 1000}),
		seenAt(t, ms(35), 300, 18, map[string]int64{"r-1": 1500, "r-2": 20}), // re-emitted rows alone
		seenAt(t, ms(46), 400, 18, nil),                                      // notes alone, the position moved
		seenAt(t, ms(60), 500, 30, nil),                                      // after the window
	}
	// Records handed over, by their Kafka timestamps: the first transaction's
	// before the window, the second's from 8 ms (one in the ms its commit
	// began), the third's at 23 ms, the last's after the window.
	produced := []time.Time{ms(0), ms(8), ms(9), ms(14), ms(23), ms(52)}
	got, err := kafkaTxns(seen, produced, ms(1), ms(60))
	if err != nil {
		t.Fatal(err)
	}
	want := []kafkaTxn{{ms(8), 10, 0}, {ms(23), 1, 1000}, {ms(35), 0, 520}, {ms(46), 0, 0}}
	if len(got) != len(want) {
		t.Fatalf("kafkaTxns = %+v, want %+v", got, want)
	}
	for i := range want {
		if !got[i].begun.Equal(want[i].begun) || got[i].records != want[i].records || got[i].reemitted != want[i].reemitted {
			t.Errorf("transaction %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	plan := newFloorPlan(got, "walbench.floor.t", 500, 300)
	if plan.Txns[0].AtUs != 0 || plan.Txns[1].AtUs != 15000 || plan.Txns[3].AtUs != 38000 || plan.ReemitTopic != "walbench.floor.t.reemit" {
		t.Errorf("plan = %+v", plan)
	}
	if timed, reemitted := plan.records(); timed != 11 || reemitted != 1520 {
		t.Errorf("plan.records() = %d, %d; want 11, 1520", timed, reemitted)
	}

	// Without the records' timestamps, each transaction begins as it commits.
	if got, err := kafkaTxns(seen, nil, ms(1), ms(60)); err != nil || !got[0].begun.Equal(ms(14)) {
		t.Errorf("kafkaTxns without records = %+v, %v; want the first begun at its commit, 14 ms", got, err)
	}
	// A record without a count (walstream before it) gives no schedule.
	old := seen[1]
	old.cp.Counted = false
	if _, err := kafkaTxns([]seenCheckpoint{seen[0], old}, produced, ms(1), ms(60)); err == nil {
		t.Error("kafkaTxns took a checkpoint without an event count")
	}
}

// A replayed record's value is walstream's size and holds its send time
// where the latency consumer reads it.
func TestStampedValue(t *testing.T) {
	for _, size := range []int{10, 44, 430, 600} {
		v := stampedValue(size, 1732600000123456)
		if len(v) != max(size, len(stampedValue(0, 1732600000123456))) {
			t.Errorf("stampedValue(%d) is %d bytes", size, len(v))
		}
		if !json.Valid(v) {
			t.Errorf("stampedValue(%d) = %s, not JSON", size, v)
		}
		if ts, err := recordTimestamp(v); err != nil || ts != 1732600000123456 {
			t.Errorf("recordTimestamp(stampedValue(%d)) = %d, %v", size, ts, err)
		}
	}
}

// The floor's latencies are from each transaction's send, and from its
// commit's start; records of the warm-up are not counted, records not seen
// are missing, and a transaction begun over 1 ms after its moment is late.
func TestMeasureFloor(t *testing.T) {
	plan := &floorPlan{Txns: []floorTxn{{AtUs: 0, Records: 2}, {AtUs: 10_000, Records: 1}, {AtUs: 20_000, Records: 0}, {AtUs: 30_000, Records: 2}}}
	const start = 1_000_000
	res := &floorResult{WarmupRecords: 1, Txns: []floorSent{
		{DueUs: start, SendUs: start + 100, CommitUs: start + 900},
		{DueUs: start + 10_000, SendUs: start + 10_050, CommitUs: start + 10_600},
		{DueUs: start + 20_000, SendUs: start + 21_500, CommitUs: start + 21_800}, // late
		{DueUs: start + 30_000, SendUs: start + 30_010, CommitUs: start + 30_500},
	}}
	stamps := []int64{start - 5000, start + 100, start + 100, start + 10_050, start + 30_010} // the warm-up's first; one of the last missing
	lat := []int64{3000, 2000, 4000, 1000, 6000}
	f, err := measureFloor("franz-go", plan, res, stamps, lat)
	if err != nil {
		t.Fatal(err)
	}
	if f.Txns != 4 || f.Records != 5 || f.Samples != 4 || f.Missing != 1 || f.Late != 1 {
		t.Errorf("txns %d records %d samples %d missing %d late %d; want 4, 5, 4, 1, 1", f.Txns, f.Records, f.Samples, f.Missing, f.Late)
	}
	// Send → visible: 2, 4, 1, 6 ms; commit → visible: 1.2, 3.2, 0.45, 5.51 ms.
	if f.P50Ms != 2 || f.P99Ms != 6 || f.MaxMs != 6 || f.CommitP50Ms != 1.2 || f.CommitP99Ms != 5.51 {
		t.Errorf("p50 %v p99 %v max %v commit p50 %v p99 %v; want 2, 6, 6, 1.2, 5.51", f.P50Ms, f.P99Ms, f.MaxMs, f.CommitP50Ms, f.CommitP99Ms)
	}
	if _, err := measureFloor("minimal", plan, &floorResult{Txns: res.Txns[:3]}, stamps, lat); err == nil {
		t.Error("measureFloor took a result short of the plan's transactions")
	}
}

// The floor stands beside walstream's latency in the summary and in the
// runs' table, and is left out when no run measured it.
func TestFloorInReport(t *testing.T) {
	load := Load{Rate: 1000, RowsPerTx: 1}
	run := func(n int, p99, floor float64) Latency {
		return Latency{Run: n, Load: load, P50Ms: p99 / 2, P99Ms: p99, Seconds: 1, Floors: []LatencyFloor{
			{Client: "franz-go", P50Ms: floor / 2, P99Ms: floor, CommitP99Ms: floor - 1},
			{Client: "minimal", P50Ms: floor / 4, P99Ms: floor / 2, CommitP99Ms: floor/2 - 1}}}
	}
	r := &Report{Latency: []Latency{run(1, 20, 8), run(2, 30, 10), run(3, 25, 12)}}
	figs := r.summarize()
	idx := func(name string) int {
		for i, f := range figs {
			if f.Name == name {
				return i
			}
		}
		t.Fatalf("no figure %q in %+v", name, figs)
		return -1
	}
	p99 := idx("insert → visible p99")
	for _, c := range []struct {
		name   string
		median float64
	}{
		{"Kafka's floor, franz-go committing walstream's transactions again: send → visible p50", 5},
		{"Kafka's floor, franz-go committing walstream's transactions again: send → visible p99", 10},
		{"Kafka's floor, franz-go committing walstream's transactions again: commit → visible p99", 9},
		{"Kafka's floor, minimal committing walstream's transactions again: send → visible p99", 5},
	} {
		i := idx(c.name)
		if f := figs[i]; f.Median != c.median || f.Runs != 3 {
			t.Errorf("%s: median %v of %d runs, want %v of 3", c.name, f.Median, f.Runs, c.median)
		}
		if i < p99 || i > p99+6 {
			t.Errorf("%s is figure %d, not beside walstream's p99 (%d)", c.name, i, p99)
		}
	}
	if md := r.markdown(); !strings.Contains(md, "| 20.00 | 4.00 / 8.00; 2.00 / 4.00 |") {
		t.Errorf("the latency runs' table lacks the floors beside the p99:\n%s", md)
	}

	r.Latency[0].Floors, r.Latency[1].Floors, r.Latency[2].Floors = nil, nil, nil
	for _, f := range r.summarize() {
		if strings.Contains(f.Name, "floor") {
			t.Errorf("figure %q without a floor measured", f.Name)
		}
	}
}

// Against a broker, each bare producer commits the plan's transactions at
// their moments, and every timed record becomes visible to a
// read_committed consumer, stamped with its transaction's send; several
// plans, committed at once by a producer each, share a checkpoint topic.
func TestFloorRound(t *testing.T) {
	b := testenv.StartBroker(t, testenv.BrokerKfake)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, client := range floorClients() {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d", client, n), func(t *testing.T) {
				var txns []kafkaTxn
				from := time.Now()
				for i := range 30 {
					txns = append(txns, kafkaTxn{begun: from.Add(time.Duration(i) * 10 * time.Millisecond), records: i % 4, reemitted: i % 3})
				}
				var plans []*floorPlan
				for i := range n {
					plan := newFloorPlan(txns, fmt.Sprintf("walbench.floor.test.%s.%d.%d", client, n, i), 430, 300)
					if n > 1 {
						plan.CheckpointTopic, plan.CheckpointKey = fmt.Sprintf("walbench.floor.test.%s.%d.checkpoints", client, n), fmt.Sprintf("walbench/floor/%d", i)
					}
					plans = append(plans, &plan)
				}
				prefix := filepath.Join(t.TempDir(), "floor")
				// kafka-txn as walbench starts it, in this process.
				var res []floorResult
				kafkaTxn := func(args ...string) ([]byte, error) {
					var stdout, stderr bytes.Buffer
					if err := run(ctx, args, &stdout, &stderr); err != nil {
						return nil, fmt.Errorf("%w: %s", err, stderr.Bytes())
					}
					dec := json.NewDecoder(bytes.NewReader(stdout.Bytes()))
					for dec.More() {
						var r floorResult
						if err := dec.Decode(&r); err != nil {
							return nil, err
						}
						res = append(res, r)
					}
					return stdout.Bytes(), nil
				}
				floors, err := floorRound(ctx, b.Addr(), 3, prefix, client, plans, kafkaTxn)
				if err != nil {
					t.Fatal(err)
				}
				if len(floors) != n || len(res) != n {
					t.Fatalf("%d floors and %d results printed for %d plans", len(floors), len(res), n)
				}
				checkpoints := 0
				for p, plan := range plans {
					for i, s := range res[p].Txns {
						if s.SendUs < s.DueUs || s.CommitUs < s.SendUs {
							t.Errorf("plan %d, transaction %d: due %d, sent %d, commit sent %d", p, i, s.DueUs, s.SendUs, s.CommitUs)
						}
						if s.DueUs-res[p].Txns[0].DueUs != plan.Txns[i].AtUs {
							t.Errorf("plan %d, transaction %d due %d µs after the first, want %d", p, i, s.DueUs-res[p].Txns[0].DueUs, plan.Txns[i].AtUs)
						}
					}
					f := floors[p]
					timed, reemitted := plan.records()
					if f.Txns != len(txns) || f.Missing != 0 || f.Samples != int(timed) || f.P50Ms <= 0 || f.CommitP99Ms > f.MaxMs {
						t.Errorf("plan %d: floor %+v: want %d transactions, every one of %d records, latencies above 0, commit → visible within send → visible", p, f, len(txns), timed)
					}
					// Besides the seasoning's two records a partition.
					if n, err := countRecords(ctx, b.Addr(), plan.ReemitTopic); err != nil || n != reemitted+2*3 {
						t.Errorf("%s holds %d records (%v), want %d and the seasoning's 6", plan.ReemitTopic, n, err, reemitted)
					}
					checkpoints += plan.Warmup + len(plan.Txns)
				}
				if n, err := countRecords(ctx, b.Addr(), plans[0].CheckpointTopic); err != nil || n != int64(checkpoints) {
					t.Errorf("%s holds %d records (%v), want one a transaction, %d", plans[0].CheckpointTopic, n, err, checkpoints)
				}
				kept := []string{prefix + ".sent.json"}
				for i := range n {
					if n == 1 {
						kept = append(kept, prefix+".plan.json")
					} else {
						kept = append(kept, fmt.Sprintf("%s-%d.plan.json", prefix, i+1))
					}
				}
				for _, path := range kept {
					if _, err := os.Stat(path); err != nil {
						t.Errorf("the round kept no %s: %v", path, err)
					}
				}
			})
		}
	}
}
