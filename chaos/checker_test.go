package chaos

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/walstream/walstream/checkpoint"
)

// fixture is a small correct run: two writer transactions over two
// aggregates, one of them in two partitions' worth of topics.
func fixture() ([]record, map[string]ledgerRow) {
	ledger := map[string]ledgerRow{
		"a1": {Tx: "w0-1", Agg: "Order-000", Seq: 1},
		"a2": {Tx: "w0-1", Agg: "Order-000", Seq: 2},
		"b1": {Tx: "w0-1", Agg: "Customer-001", Seq: 1},
		"a3": {Tx: "w0-2", Agg: "Order-000", Seq: 3},
	}
	rec := func(id string, offset int64) record {
		l := ledger[id]
		topic := map[string]string{"Order-000": "outbox.event.Order", "Customer-001": "outbox.event.Customer"}[l.Agg]
		n := map[string]int{"w0-1": 3, "w0-2": 1}[l.Tx]
		return record{Topic: topic, Partition: 1, Offset: offset, Key: l.Agg, ID: id, Payload: payload{Agg: l.Agg, Seq: l.Seq, Tx: l.Tx, N: n}}
	}
	return []record{rec("a1", 0), rec("a2", 1), rec("b1", 0), rec("a3", 3)}, ledger
}

func TestJudge(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(recs []record, ledger map[string]ledgerRow) []record
		want   func(v verdict) int
		field  string
	}{
		{"correct", func(r []record, _ map[string]ledgerRow) []record { return r }, func(v verdict) int { return v.failures() }, "failures"},
		{"duplicate", func(r []record, _ map[string]ledgerRow) []record {
			d := r[1]
			d.Offset = 7
			return append(r, d)
		}, func(v verdict) int { return v.Duplicates }, "duplicates"},
		{"lost", func(r []record, _ map[string]ledgerRow) []record { return r[1:] }, func(v verdict) int { return v.Lost }, "lost"},
		{"rolled back", func(r []record, _ map[string]ledgerRow) []record {
			x := r[0]
			x.ID, x.Offset = "rolled-back", 9
			return append(r, x)
		}, func(v verdict) int { return v.NotInLedger + v.RolledBackSeen }, "not in ledger + rolled back seen"},
		{"out of order", func(r []record, _ map[string]ledgerRow) []record {
			r[0].Offset, r[1].Offset = 1, 0
			return r
		}, func(v verdict) int { return v.OrderViolations }, "order violations"},
		{"two partitions", func(r []record, _ map[string]ledgerRow) []record {
			r[3].Partition = 2
			return r
		}, func(v verdict) int { return v.PartitionViolations }, "aggregates in several partitions"},
		{"wrong topic", func(r []record, _ map[string]ledgerRow) []record {
			r[2].Topic = "outbox.event.Order"
			return r
		}, func(v verdict) int { return v.Mismatches }, "mismatches"},
		{"wrong row count", func(r []record, _ map[string]ledgerRow) []record {
			r[3].Payload.N = 2
			return r
		}, func(v verdict) int { return v.Mismatches }, "mismatches"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, ledger := fixture()
			recs = tt.mutate(recs, ledger)
			v := judge(recs, ledger, map[string]bool{"rolled-back": true}, nil, "outbox.event.")
			got := tt.want(v)
			if tt.name == "correct" {
				if got != 0 {
					t.Fatalf("%s = %d, want 0: %v", tt.field, got, v.Examples)
				}
				return
			}
			if got == 0 {
				t.Fatalf("%s = 0, want the fault reported; verdict %+v", tt.field, v)
			}
		})
	}
}

func TestAtomicity(t *testing.T) {
	rows := func(tx string, n, from, to int) []record {
		var out []record
		for i := from; i < to; i++ {
			out = append(out, record{ID: fmt.Sprintf("%s-%d", tx, i), Payload: payload{Tx: tx, N: n}})
		}
		return out
	}
	a := newAtomicity(10)
	a.snapshot(append(rows("whole", 3, 0, 3), rows("split", 12, 0, 10)...), true)
	if a.Violations != 0 {
		t.Fatalf("a whole transaction and part of a split one: %d violations, want 0: %v", a.Violations, a.Examples)
	}
	// Kafka writes commit markers partition by partition: part of a
	// transaction may show while a marker is pending elsewhere.
	a.snapshot(rows("marking", 4, 0, 2), false)
	a.snapshot(rows("marking", 4, 2, 4), true)
	if a.Violations != 0 {
		t.Fatalf("a transaction whole by the next settled snapshot: %d violations, want 0: %v", a.Violations, a.Examples)
	}
	a.snapshot(rows("torn", 4, 0, 2), false)
	if a.Violations != 0 {
		t.Fatalf("part of a transaction while markers are pending: %d violations, want 0", a.Violations)
	}
	a.snapshot(nil, true)
	if a.Violations != 1 {
		t.Fatalf("2 of 4 rows of a fitting transaction visible at a settled snapshot: %d violations, want 1", a.Violations)
	}
	a.snapshot(rows("torn", 4, 2, 4), true)
	if a.Violations != 1 {
		t.Fatalf("a torn transaction counts once: %d violations, want 1", a.Violations)
	}
}

// A row lost in a named recreation gap is excused; another lost row, or a
// gap row delivered twice, is not.
func TestJudgeGap(t *testing.T) {
	recs, ledger := fixture()
	gap := map[string]bool{"a3": true}
	if v := judge(recs[:3], ledger, nil, gap, "outbox.event."); v.failures() != 0 || v.LostInGap != 1 {
		t.Fatalf("gap row missing: %d failures, %d lost in gap; want 0 and 1: %v", v.failures(), v.LostInGap, v.Examples)
	}
	if v := judge(recs[1:3], ledger, nil, gap, "outbox.event."); v.Lost != 1 {
		t.Fatalf("a row outside the gap missing: lost = %d, want 1", v.Lost)
	}
	dup := recs[3]
	dup.Offset = 8
	if v := judge(append(recs, dup), ledger, nil, gap, "outbox.event."); v.Duplicates != 1 {
		t.Fatalf("gap row delivered twice: duplicates = %d, want 1", v.Duplicates)
	}
}

// judgeReemits counts what a wrong re-emit would publish: a row twice in a
// request, a row its request does not select, a row it misses, records
// its checkpoint does not count, records of a request nobody made; and the
// live judge leaves re-emitted copies alone.
func TestJudgeReemits(t *testing.T) {
	recs, ledger := fixture()
	orders := reemitPredicate{SQL: "aggregatetype = 'Order'", match: func(r record) bool { return r.Topic == "outbox.event.Order" }}
	copyOf := func(r record, req string, offset int64) record {
		r.Reemit, r.Offset = req, offset
		return r
	}
	reqs := []*reemitRequest{{ID: "r1", Pred: orders, before: map[string]bool{"a1": true, "a2": true, "a3": true}}}
	done := map[string]checkpoint.Reemit{"r1": {ID: "r1", State: checkpoint.ReemitDone, Rows: 3}}
	present := func(string) (map[string]bool, error) { return map[string]bool{"a1": true, "a2": true, "a3": true}, nil }
	good := append(slices.Clone(recs), copyOf(recs[0], "r1", 10), copyOf(recs[1], "r1", 11), copyOf(recs[3], "r1", 12))
	if v := judge(good, ledger, nil, nil, "outbox.event."); v.failures() != 0 {
		t.Fatalf("the live judge counts re-emitted copies: %+v", v)
	}
	v, err := judgeReemits(good, reqs, done, ledger, present)
	if err != nil || v.failures() != 0 || v.Done != 1 || v.Records != 3 {
		t.Fatalf("a correct re-emit: %+v, %v", v, err)
	}
	for _, tc := range []struct {
		name  string
		recs  []record
		state checkpoint.Reemit
		want  func(reemitVerdict) int
	}{
		{"twice", append(slices.Clone(good), copyOf(recs[0], "r1", 13)), checkpoint.Reemit{State: checkpoint.ReemitDone, Rows: 3}, func(v reemitVerdict) int { return v.Duplicates }},
		{"not selected", append(slices.Clone(good), copyOf(recs[2], "r1", 13)), checkpoint.Reemit{State: checkpoint.ReemitDone, Rows: 4}, func(v reemitVerdict) int { return v.NotSelected }},
		{"missed", good[:len(good)-1], checkpoint.Reemit{State: checkpoint.ReemitDone, Rows: 2}, func(v reemitVerdict) int { return v.Missing }},
		{"not counted", good, checkpoint.Reemit{State: checkpoint.ReemitDone, Rows: 2}, func(v reemitVerdict) int { return v.RecordsCountMismatch }},
		{"unknown request", append(slices.Clone(good), copyOf(recs[0], "r9", 13)), checkpoint.Reemit{State: checkpoint.ReemitDone, Rows: 3}, func(v reemitVerdict) int { return v.Unknown }},
		{"still running", good, checkpoint.Reemit{State: checkpoint.ReemitRunning, Rows: 3}, func(v reemitVerdict) int { return v.NotEnded }},
		{"failed", good, checkpoint.Reemit{State: checkpoint.ReemitFailed, Rows: 3, Error: "the predicate does not plan"}, func(v reemitVerdict) int { return v.NotSelected }},
	} {
		tc.state.ID = "r1"
		v, err := judgeReemits(tc.recs, reqs, map[string]checkpoint.Reemit{"r1": tc.state}, ledger, present)
		if err != nil || tc.want(v) == 0 || v.failures() == 0 {
			t.Errorf("%s: %+v, %v", tc.name, v, err)
		}
	}
	// A cancelled request need not publish every row, nor one a dropped
	// table failed.
	for _, st := range []checkpoint.Reemit{{State: checkpoint.ReemitCancelled, Rows: 2}, {State: checkpoint.ReemitFailed, Rows: 2, Error: `relation "public.outbox" does not exist`}} {
		st.ID = "r1"
		if v, err := judgeReemits(good[:len(good)-1], reqs, map[string]checkpoint.Reemit{"r1": st}, ledger, present); err != nil || v.failures() != 0 {
			t.Errorf("%s: %+v, %v", st.State, v, err)
		}
	}
}

// A confirmed position past the visible checkpoint waits while the
// checkpoint partition is held, and is judged once the consumer read past
// the hold: against the stream's checkpoints Kafka committed meanwhile.
func TestJudgeThroughHold(t *testing.T) {
	st := &stream{name: "db/slot", slot: "slot", cp: &cpCheck{}}
	cons := &consumer{next: map[tp]int64{cpPart: 10},
		cps: map[string][]cpRecord{st.name: {{offset: 5, cp: checkpoint.Checkpoint{LSN: 100}}}}}
	s := &sampler{cons: cons}
	t0 := time.Now()
	// Sampled during the hold, at the partition's high watermark 20: both
	// past the visible checkpoint.
	st.cp.pending = []pendingConfirm{{at: t0, confirmed: 200, end: 20}, {at: t0, confirmed: 300, end: 20}}
	s.judge(st, t0.Add(time.Second), false)
	if got := len(st.cp.pending); got != 2 || st.cp.Deferred != 0 {
		t.Fatalf("while held: %d pending, %d judged; want 2 and 0", got, st.cp.Deferred)
	}
	// The hold ends; the stream had committed a checkpoint at 250 during it.
	cons.next[cpPart] = 25
	cons.cps[st.name] = append(cons.cps[st.name], cpRecord{offset: 15, cp: checkpoint.Checkpoint{LSN: 250}})
	s.judge(st, t0.Add(30*time.Second), false)
	if st.cp.Deferred != 2 || st.cp.JudgedLate != 2 || st.cp.Violations != 1 || len(st.cp.pending) != 0 {
		t.Fatalf("after the hold: %d judged (%d late), %d violations, %d pending; want 2 (2), 1, 0: %v",
			st.cp.Deferred, st.cp.JudgedLate, st.cp.Violations, len(st.cp.pending), st.cp.Examples)
	}
	// At the end, a sample Kafka never resolved is judged and counted.
	st.cp.pending = []pendingConfirm{{at: t0, confirmed: 250, end: 40}}
	s.judge(st, t0.Add(time.Minute), true)
	if st.cp.Unresolved != 1 || st.cp.Violations != 1 {
		t.Fatalf("at the end: %d unresolved, %d violations; want 1 and 1", st.cp.Unresolved, st.cp.Violations)
	}
}
