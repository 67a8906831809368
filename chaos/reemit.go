package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/checkpoint"
)

// faultReemit makes a re-emit request under the load, and cancels one
// request in three after a moment. The kill armed with the mid-chunk crash
// point makes one first, so that the restarted walstream meets it.
const faultReemit = "reemit-requested"

// reemitArgs make requests last long enough for the other faults to meet
// them: chunks of 200 rows, 3,000 rows a second.
var reemitArgs = []string{"--reemit-chunk-rows", "200", "--reemit-rate", "3000"}

// reemitPredicate selects the rows of a request: as SQL, and as the
// checker tells whether a record is one of them.
type reemitPredicate struct {
	SQL   string `json:"where"`
	match func(r record) bool
}

// reemitRequest is a request the harness made, and what the outbox held
// of its rows when it did.
type reemitRequest struct {
	ID        string          `json:"id"`
	Pred      reemitPredicate `json:"predicate"`
	At        time.Time       `json:"at"`
	Cancelled bool            `json:"cancel_made"`
	// before are the ids that satisfied the predicate in the transaction
	// that made the request: those still in the table at the end must be
	// published once by it, unless it was cancelled.
	before map[string]bool
}

// reemits are the requests made so far.
type reemits struct {
	mu   sync.Mutex
	list []*reemitRequest
}

func (rs *reemits) add(r *reemitRequest) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.list = append(rs.list, r)
}

func (rs *reemits) all() []*reemitRequest {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.list)
}

// predicate draws the rows of a request on st: an aggregate type, a few
// aggregates, one writer's transactions, or a range of event ids.
func (f *faults) predicate(st *stream) reemitPredicate {
	switch f.rng.IntN(4) {
	case 0:
		return st.typePredicate(aggregateTypes[f.rng.IntN(len(aggregateTypes))])
	case 1:
		aggs := make(map[string]bool)
		var lits []string
		for range 5 {
			k := f.rng.IntN(numAggregates)
			a := fmt.Sprintf("%s-%03d", aggregateTypes[k%len(aggregateTypes)], k)
			aggs[a] = true
			lits = append(lits, "'"+a+"'")
		}
		return reemitPredicate{SQL: "aggregateid IN (" + strings.Join(lits, ", ") + ")", match: func(r record) bool { return aggs[r.Key] }}
	case 2:
		w := fmt.Sprintf("w%d-", f.rng.IntN(st.load.writers))
		return reemitPredicate{SQL: fmt.Sprintf("payload->>'tx' LIKE '%s%%'", w), match: func(r record) bool { return strings.HasPrefix(r.Payload.Tx, w) }}
	}
	lo := fmt.Sprintf("%x", f.rng.IntN(12))
	hi := fmt.Sprintf("%x", f.rng.IntN(4)+12)
	return reemitPredicate{SQL: fmt.Sprintf("id >= '%s0000000-0000-0000-0000-000000000000' AND id < '%s0000000-0000-0000-0000-000000000000'", lo, hi),
		match: func(r record) bool { return r.ID >= lo && r.ID < hi }}
}

// typePredicate selects the rows of one aggregate type.
func (st *stream) typePredicate(typ string) reemitPredicate {
	return reemitPredicate{SQL: fmt.Sprintf("aggregatetype = '%s'", typ), match: func(r record) bool { return r.Topic == st.prefix+typ }}
}

// request makes a re-emit request on st as walstream reemit writes one,
// from the harness, so that its id is known whether or not the commit's
// answer arrives: in one transaction, the ids its predicate selects and
// the transactional logical message.
func (f *faults) request(ctx context.Context, st *stream, pred reemitPredicate) (*reemitRequest, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	r := &reemitRequest{ID: "chaos-" + hex.EncodeToString(b[:]), Pred: pred, At: time.Now(), before: make(map[string]bool)}
	msg, _ := json.Marshal(map[string]string{"action": "reemit", "id": r.ID, "table": "public.outbox", "where": pred.SQL, "origin": "chaos"})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, st.url)
	if err != nil {
		return r, fmt.Errorf("connecting: %w", err) // made no request
	}
	defer conn.Close(context.Background())
	// Whatever the commit's answer, the request may be in the WAL: the
	// checker counts its records.
	st.reemits.add(r)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT id::text FROM public.outbox WHERE "+pred.SQL)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			r.before[id] = true
		}
		_, err = tx.Exec(ctx, "SELECT pg_logical_emit_message(true, 'walstream.reemit', $1::text)", string(msg))
		return err
	})
	return r, err
}

// cancelReemit writes the cancel of a request on st.
func (f *faults) cancelReemit(ctx context.Context, st *stream, r *reemitRequest) error {
	msg, _ := json.Marshal(map[string]string{"action": "cancel", "id": r.ID})
	if _, err := f.exec(ctx, st.url, fmt.Sprintf("SELECT pg_logical_emit_message(true, 'walstream.reemit', '%s')", msg)); err != nil {
		return err
	}
	f.mu.Lock()
	r.Cancelled = true
	f.mu.Unlock()
	return nil
}

// reemit is the fault: a request on st, and one in three cancelled after
// up to two seconds.
func (f *faults) reemit(ctx context.Context, st *stream) string {
	r, err := f.request(ctx, st, f.predicate(st))
	if err != nil {
		// Postgres may be restarting: a request that did not commit
		// publishes nothing, which the checker confirms.
		f.note("re-emit request %s: %v", r.ID, err)
		return "request failed: " + err.Error()
	}
	if f.rng.IntN(3) > 0 {
		return fmt.Sprintf("%s of %d rows: %s", r.ID, len(r.before), r.Pred.SQL)
	}
	sleep(ctx, time.Duration(200+f.rng.IntN(1800))*time.Millisecond)
	if err := f.cancelReemit(ctx, st, r); err != nil {
		f.note("cancelling re-emit request %s: %v", r.ID, err)
	}
	return fmt.Sprintf("%s of %d rows: %s, then cancelled", r.ID, len(r.before), r.Pred.SQL)
}

// reemitVerdict is what the re-emit requests published, judged.
type reemitVerdict struct {
	Requests  int `json:"requests"`
	Done      int `json:"done"`
	Cancelled int `json:"cancelled"`
	Failed    int `json:"failed"`
	// NeverMet are requests no checkpoint recorded: their transaction did
	// not commit, or the stream did not get to it.
	NeverMet   int `json:"never_met"`
	NotEnded   int `json:"not_ended"`
	Records    int `json:"records"`
	Duplicates int `json:"duplicates_within_a_request"`
	// Missing are rows a done request selected when it was made, still in
	// the table at the end, that it did not publish.
	Missing int `json:"missing"`
	// NotSelected are records of rows their request does not select, or
	// that are not committed outbox rows.
	NotSelected int `json:"not_selected"`
	// RecordsCountMismatch are requests whose records are not as many as
	// their last checkpoint counts.
	RecordsCountMismatch int      `json:"records_not_as_counted"`
	Unknown              int      `json:"records_of_unknown_requests"`
	Examples             examples `json:"examples,omitempty"`
}

func (v *reemitVerdict) failures() int {
	return v.Duplicates + v.Missing + v.NotSelected + v.RecordsCountMismatch + v.Unknown + v.NotEnded
}

// add adds w, stream name's verdict, to the totals v.
func (v *reemitVerdict) add(w reemitVerdict, name string) {
	v.Requests += w.Requests
	v.Done += w.Done
	v.Cancelled += w.Cancelled
	v.Failed += w.Failed
	v.NeverMet += w.NeverMet
	v.NotEnded += w.NotEnded
	v.Records += w.Records
	v.Duplicates += w.Duplicates
	v.Missing += w.Missing
	v.NotSelected += w.NotSelected
	v.RecordsCountMismatch += w.RecordsCountMismatch
	v.Unknown += w.Unknown
	v.Examples.addFrom(w.Examples, name)
}

// reemitStates returns the last state the checkpoints under key record
// of each request.
func (c *consumer) reemitStates(key string) map[string]checkpoint.Reemit {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]checkpoint.Reemit)
	for _, cp := range c.cps[key] {
		if cp.cp.Notes == nil {
			continue
		}
		for _, r := range cp.cp.Notes.Reemits {
			out[r.ID] = r
		}
	}
	return out
}

// waitReemits waits up to d until every request the checkpoints of every
// stream record has ended.
func (c *consumer) waitReemits(ctx context.Context, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		active := false
		for key := range c.keys {
			for _, r := range c.reemitStates(key) {
				active = active || r.State.Active()
			}
		}
		if !active {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// judgeReemits checks the re-emitted records: each of a committed outbox
// row its request selects, none twice within a request, as many as the
// request's checkpoint counts; a request that ended done published every
// row it selected when it was made that is still in the table (present
// reads them now); one that failed did so because the outbox table was
// dropped under it (the recreation fault).
func judgeReemits(recs []record, reqs []*reemitRequest, states map[string]checkpoint.Reemit, ledger map[string]ledgerRow,
	present func(where string) (map[string]bool, error)) (reemitVerdict, error) {
	v := reemitVerdict{Requests: len(reqs)}
	byReq := make(map[string][]record)
	for _, r := range recs {
		if r.Reemit != "" {
			byReq[r.Reemit] = append(byReq[r.Reemit], r)
			v.Records++
		}
	}
	known := make(map[string]bool)
	for _, q := range reqs {
		known[q.ID] = true
		got := byReq[q.ID]
		st, met := states[q.ID]
		switch {
		case !met:
			v.NeverMet++
			if len(got) > 0 {
				v.Unknown += len(got)
				v.Examples.add("request %s: %d records, but no checkpoint records the request", q.ID, len(got))
			}
			continue
		case st.State.Active():
			v.NotEnded++
			v.Examples.add("request %s is still %s at the end", q.ID, st.State)
		case st.State == checkpoint.ReemitDone:
			v.Done++
		case st.State == checkpoint.ReemitCancelled:
			v.Cancelled++
		case st.State == checkpoint.ReemitFailed:
			v.Failed++
			if !strings.Contains(st.Error, "does not exist") && !strings.Contains(st.Error, "is not in publication") {
				v.NotSelected++ // counted as a failure: nothing but a dropped table may fail a request
			}
			v.Examples.add("request %s failed: %s", q.ID, st.Error)
		}
		seen := make(map[string]bool)
		for _, r := range got {
			if seen[r.ID] {
				v.Duplicates++
				v.Examples.add("request %s published event %s twice (%s/%d@%d)", q.ID, r.ID, r.Topic, r.Partition, r.Offset)
			}
			seen[r.ID] = true
			if _, ok := ledger[r.ID]; !ok || !q.Pred.match(r) {
				v.NotSelected++
				v.Examples.add("request %s (%s) published event %s, which it does not select (in the ledger: %v)", q.ID, q.Pred.SQL, r.ID, ok)
			}
		}
		if int64(len(seen)) != st.Rows {
			v.RecordsCountMismatch++
			v.Examples.add("request %s: %d records, its checkpoint counts %d rows", q.ID, len(seen), st.Rows)
		}
		if st.State != checkpoint.ReemitDone {
			continue
		}
		now, err := present(q.Pred.SQL)
		if err != nil {
			return v, err
		}
		for _, id := range slices.Sorted(maps.Keys(q.before)) {
			if now[id] && !seen[id] {
				v.Missing++
				v.Examples.add("request %s (%s) did not publish event %s, which was in the table before it and is still", q.ID, q.Pred.SQL, id)
			}
		}
	}
	for id, got := range byReq {
		if !known[id] {
			v.Unknown += len(got)
			v.Examples.add("%d records name request %s, which the harness did not make", len(got), id)
		}
	}
	return v, nil
}

// presentRows returns the ids of the outbox rows that satisfy where now.
func presentRows(ctx context.Context, url, where string) (map[string]bool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connecting to read the outbox: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT id::text FROM public.outbox WHERE "+where)
	if err != nil {
		return nil, fmt.Errorf("reading the outbox rows of %s: %w", where, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading the outbox rows of %s: %w", where, err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}
