package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/pipeline"
)

// reemitAll crashes a re-emit request at every crash point in TestReemit;
// by default at two of them (make chaos runs them all).
var reemitAll = flag.Bool("reemit.all", false, "crash a re-emit request at every crash point in TestReemit")

// reemitEnv is a stream with a live load, against which re-emit requests
// are made and their records counted.
type reemitEnv struct {
	*env
	p     *proc
	args  []string // the stream's settings, which the CLI is given too
	types []string // the aggregate types, which name the topics

	load     sync.WaitGroup
	stopLoad context.CancelFunc
}

// signalDDL is Debezium's signal table.
const signalDDL = `CREATE TABLE public.debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))`

// newReemitEnv starts Postgres, Kafka and walstream with Debezium's signal
// table in the publication, and a backlog of orders and customers.
func newReemitEnv(t *testing.T, streamArgs []string, opts ...testenv.Option) *reemitEnv {
	e := &reemitEnv{env: newEnv(t, opts...), types: []string{"Order", "Customer", "Live"}}
	e.pg.Exec("postgres", signalDDL)
	e.pg.Exec("postgres", "CREATE PUBLICATION walstream_outbox FOR TABLE public.outbox, public.debezium_signal "+publicationOptions("insert, update"))
	e.args = []string{"--pg-url", e.pg.URL("postgres", "postgres"), "--kafka-brokers", e.broker}
	e.p = e.start(append([]string{"--http-addr", "127.0.0.1:0"}, streamArgs...)).streaming(t)
	seq := 0
	for range 3 {
		e.insertTx("Order", 500, 17, &seq, false)
		e.insertTx("Customer", 500, 13, &seq, false)
	}
	e.waitConfirmed("walstream", e.currentLSN(), time.Minute, e.p)
	return e
}

// liveLoad inserts small transactions of live rows until stopped: type
// Live, and some orders, which a request for orders may or may not meet.
func (e *reemitEnv) liveLoad(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e.stopLoad = cancel
	e.load.Add(1)
	go func() {
		defer e.load.Done()
		conn := e.pg.Connect("postgres")
		defer conn.Close(context.Background())
		for i := 0; ctx.Err() == nil; i++ {
			typ := "Live"
			if i%5 == 0 {
				typ = "Order"
			}
			_, err := conn.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
				SELECT $1, $1 || '-live-' || (g % 7), 'Created', jsonb_build_object('seq', $2::int * 10 + g, 'agg', $1 || '-live-' || (g % 7))
				FROM generate_series(1, 3) g`, typ, i+1_000_000)
			if err != nil && ctx.Err() == nil {
				t.Errorf("live load: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(e.stop)
}

func (e *reemitEnv) stop() {
	if e.stopLoad != nil {
		e.stopLoad()
		e.load.Wait()
	}
}

// reemit runs walstream reemit with the stream's settings and returns its
// output.
func (e *reemitEnv) reemit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, errOut, err := runCLI(t, append(append([]string{"reemit"}, e.args...), args...)...)
	return out + errOut, err
}

// request makes a re-emit request and returns its id.
func (e *reemitEnv) request(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.reemit(t, args...)
	if err != nil {
		t.Fatalf("walstream reemit %v: %v\n%s", args, err, out)
	}
	id := between(out, "re-emit request ", " of ")
	if !strings.HasPrefix(id, "r-") {
		t.Fatalf("walstream reemit %v printed no id:\n%s", args, out)
	}
	return id
}

// list returns the requests the checkpoint records.
func (e *reemitEnv) list(t *testing.T) []pipeline.ReemitReport {
	t.Helper()
	out, err := e.reemit(t, "--list", "--json")
	if err != nil {
		t.Fatalf("walstream reemit --list: %v\n%s", err, out)
	}
	var rs []pipeline.ReemitReport
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("walstream reemit --list --json: %v\n%s", err, out)
	}
	return rs
}

// wait waits until the request with the id (or, with a Debezium signal,
// whose origin names the signal) is in state, and returns it.
func (e *reemitEnv) wait(t *testing.T, match func(pipeline.ReemitReport) bool, state string, within time.Duration) pipeline.ReemitReport {
	t.Helper()
	var last []pipeline.ReemitReport
	deadline := time.Now().Add(within)
	for {
		last = e.list(t)
		for _, r := range last {
			if match(r) && r.State == state {
				return r
			}
		}
		if time.Now().After(deadline) || e.p.Exited() {
			t.Fatalf("no request %s within %s (walstream exited: %v); requests: %+v", state, within, e.p.Exited(), last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func byID(id string) func(pipeline.ReemitReport) bool {
	return func(r pipeline.ReemitReport) bool { return r.ID == id }
}

// records reads every outbox topic once the stream confirmed what was
// written, and splits them: live records by event id, re-emitted ones by
// request.
func (e *reemitEnv) records(t *testing.T) (live []record, reemitted map[string][]record) {
	t.Helper()
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, e.p)
	reemitted = make(map[string][]record)
	for _, r := range e.readAll(e.types...) {
		if id := r.Header("walstream.reemit"); id != "" {
			reemitted[id] = append(reemitted[id], r)
		} else {
			live = append(live, r)
		}
	}
	return live, reemitted
}

// checkRequest checks a request's records: no event twice, every one of
// want, none outside may (want's rows and those a request may or may not
// meet, inserted while it ran), each byte for byte its live record but
// for the header naming the request, which comes last.
func checkRequest(t *testing.T, id string, recs []record, want, may map[string]bool, live map[string]record) {
	t.Helper()
	seen := make(map[string]int)
	for _, r := range recs {
		ev := r.Header("id")
		seen[ev]++
		if !want[ev] && !may[ev] {
			t.Errorf("request %s published event %s, which it does not select", id, ev)
		}
		l, ok := live[ev]
		switch {
		case !ok:
			t.Errorf("request %s published event %s, which was not published live", id, ev)
		case r.Topic != l.Topic || r.Key != l.Key || r.Value != l.Value || r.Headers != l.Headers+",walstream.reemit="+id:
			t.Errorf("request %s: event %s is %s %q %q [%s], published live as %s %q %q [%s]", id, ev, r.Topic, r.Key, r.Value, r.Headers, l.Topic, l.Key, l.Value, l.Headers)
		}
	}
	for ev, n := range seen {
		if n > 1 {
			t.Errorf("request %s published event %s %d times", id, ev, n)
		}
	}
	missing := 0
	for ev := range want {
		if seen[ev] == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("request %s: %d of the %d rows it selects are not published", id, missing, len(want))
	}
}

// checkLive checks that every outbox row was published live exactly once,
// and returns the live records by event id.
func (e *reemitEnv) checkLive(t *testing.T, live []record) map[string]record {
	t.Helper()
	byEvent := make(map[string]record)
	for _, r := range live {
		ev := r.Header("id")
		if _, dup := byEvent[ev]; dup {
			t.Errorf("event %s published live twice", ev)
		}
		byEvent[ev] = r
	}
	all := outboxIDs(t, e.pg, "true")
	for ev := range all {
		if _, ok := byEvent[ev]; !ok {
			t.Errorf("outbox row %s was not published live", ev)
		}
	}
	if len(byEvent) != len(all) {
		t.Errorf("%d events published live, the outbox has %d rows", len(byEvent), len(all))
	}
	return byEvent
}

// TestReemit: re-emits by predicate, by event ids, by a key range and by
// Debezium's signal, while live rows stream: each selected row once per
// request, byte for byte as published live with the request's header,
// every live row once; a request cancelled midway, by walstream reemit and
// by Debezium's stop-snapshot, publishes what it published before the
// cancel once and nothing after; /readyz and status show a running
// request; requests the stream cannot carry out are refused with the
// reason. Then walstream is killed at crash points while a request runs,
// and started again: the request goes on after the last chunk Kafka
// committed and publishes each row once (reemitCrashes).
func TestReemit(t *testing.T) {
	t.Parallel()
	args := []string{"--signal-table", "public.debezium_signal", "--reemit-chunk-rows", "100", "--reemit-rate", "2000"}
	// Transactions over 64 kB are streamed in progress, for the mid-stream
	// crash point.
	e := newReemitEnv(t, args, testenv.Settings("logical_decoding_work_mem = '64kB'"))
	e.liveLoad(t)
	type made struct {
		id        string
		want, may map[string]bool
	}
	var requests []made

	orders := outboxIDs(t, e.pg, "aggregatetype = 'Order'")
	id := e.request(t, "--where", "aggregatetype = 'Order'")
	requests = append(requests, made{id, orders, nil})
	done := e.wait(t, byID(id), "done", time.Minute)
	requests[0].may = outboxIDs(t, e.pg, "aggregatetype = 'Order'") // orders the live load added meanwhile
	if done.Rows < int64(len(orders)) || done.Origin != "walstream reemit" || done.Where != "aggregatetype = 'Order'" {
		t.Errorf("request by predicate: %+v, want at least %d rows", done, len(orders))
	}

	customers := slices.Sorted(maps.Keys(outboxIDs(t, e.pg, "aggregatetype = 'Customer'")))
	ids := []string{customers[3], customers[500], customers[1200]}
	id = e.request(t, "--ids", strings.Join(ids, ","))
	requests = append(requests, made{id, map[string]bool{ids[0]: true, ids[1]: true, ids[2]: true}, nil})
	e.wait(t, byID(id), "done", time.Minute)

	from, to := customers[100], customers[400]
	id = e.request(t, "--from-key", from, "--to-key", to, "--where", "aggregatetype = 'Customer'")
	requests = append(requests, made{id, outboxIDs(t, e.pg, fmt.Sprintf("aggregatetype = 'Customer' AND id BETWEEN '%s' AND '%s'", from, to)), nil})
	e.wait(t, byID(id), "done", time.Minute)

	// Debezium's signal, with its additional conditions.
	e.pg.Exec("postgres", `INSERT INTO debezium_signal VALUES ('sig-1', 'execute-snapshot',
		'{"data-collections": ["public.outbox"], "type": "incremental", "additional-conditions": [{"data-collection": "public.outbox", "filter": "aggregatetype = ''Customer''"}]}')`)
	fromSignal := func(sig string) func(pipeline.ReemitReport) bool {
		return func(r pipeline.ReemitReport) bool { return r.Origin == "debezium signal "+sig }
	}
	sig := e.wait(t, fromSignal("sig-1"), "done", time.Minute)
	if !strings.HasPrefix(sig.ID, "sig-1@") {
		t.Errorf("the signal's request is named %s", sig.ID)
	}
	requests = append(requests, made{sig.ID, outboxIDs(t, e.pg, "aggregatetype = 'Customer'"), nil})

	// A cancel midway: the request ends where the stream meets the
	// cancel; /readyz and status show it while it runs.
	addr := e.p.httpAddr(t)
	id = e.request(t)
	running := e.wait(t, func(r pipeline.ReemitReport) bool { return r.ID == id && r.RowsPerSecond > 0 }, "running", time.Minute)
	if code, body := httpGet(addr, "/readyz"); code != 200 || !strings.Contains(body, "re-emit "+id+" of public.outbox running: ") {
		t.Errorf("/readyz while %s runs = %d %q", id, code, body)
	} else {
		t.Logf("/readyz while %s runs: %s", id, body)
	}
	if out, err := e.reemit(t, "--cancel", id); err != nil || !strings.Contains(out, "cancel of re-emit request "+id) {
		t.Fatalf("walstream reemit --cancel %s: %v\n%s", id, err, out)
	}
	if running.Remaining <= 0 || running.RowsPerSecond <= 0 {
		t.Errorf("running request: %+v, want rows remaining and a rate", running)
	}
	cancelled := e.wait(t, byID(id), "cancelled", time.Minute)
	if out, err := e.reemit(t, "--list"); err == nil {
		t.Logf("walstream reemit --list:\n%s", out)
	}
	out, _, err := runCLI(t, append([]string{"status"}, e.args...)...)
	if !strings.Contains(out, "re-emit "+id) || !strings.Contains(out, "cancelled of public.outbox") || !strings.Contains(out, "published") {
		t.Errorf("status once %s was cancelled (%v):\n%s", id, err, out)
	}
	if out, err := e.reemit(t, "--cancel", id); err == nil || !strings.Contains(err.Error(), "already ended: cancelled") {
		t.Errorf("a second cancel: %v\n%s", err, out)
	}

	// Debezium's stop-snapshot cancels too.
	e.pg.Exec("postgres", `INSERT INTO debezium_signal VALUES ('sig-2', 'execute-snapshot', '{"data-collections": ["public.outbox"]}')`)
	e.wait(t, func(r pipeline.ReemitReport) bool { return r.Origin == "debezium signal sig-2" && r.Rows > 0 }, "running", time.Minute)
	e.pg.Exec("postgres", `INSERT INTO debezium_signal VALUES ('sig-3', 'stop-snapshot', '{"data-collections": ["public.outbox"], "type": "incremental"}')`)
	stopped := e.wait(t, fromSignal("sig-2"), "cancelled", time.Minute)

	// Refused at request time, with the reason.
	e.pg.Exec("postgres", "CREATE TABLE public.elsewhere (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload jsonb)")
	for _, c := range []struct {
		args []string
		why  string
	}{
		{[]string{"--where", "no_such_column = 1"}, `column "no_such_column" does not exist`},
		{[]string{"--where", "true) OR (true"}, "closes a parenthesis it did not open"},
		{[]string{"--where", "aggregatetype"}, "argument of WHERE must be type boolean"},
		{[]string{"--table", "public.elsewhere"}, `not in publication "walstream_outbox"`},
		{[]string{"--from-key", "a,b"}, "the key range gives 2 values; the primary key of public.outbox has 1 columns"},
	} {
		out, err := e.reemit(t, c.args...)
		if err == nil || !strings.Contains(err.Error()+out, c.why) || !strings.Contains(err.Error(), "re-emit request refused") {
			t.Errorf("walstream reemit %v = %v\n%s\nwant refused: %s", c.args, err, out, c.why)
		}
	}
	if out, err := e.reemit(t, "--dry-run", "--where", "aggregatetype = 'Order'"); err != nil || !strings.Contains(out, "nothing was requested") {
		t.Errorf("--dry-run: %v\n%s", err, out)
	}

	crashed := e.reemitCrashes(t, args)

	e.stop()
	live, reemitted := e.records(t)
	byEvent := e.checkLive(t, live)
	everything := outboxIDs(t, e.pg, "true")
	for _, r := range requests {
		checkRequest(t, r.id, reemitted[r.id], r.want, r.may, byEvent)
		delete(reemitted, r.id)
	}
	for id, before := range crashed {
		// Rows inserted while a request runs may be met by it or not; those
		// there before it are all.
		checkRequest(t, id, reemitted[id], before, everything, byEvent)
		delete(reemitted, id)
	}
	// A cancelled request moves no more; the checkpoints keep the last
	// five ended requests only, so its figures are those read when it
	// ended.
	for _, c := range []pipeline.ReemitReport{cancelled, stopped} {
		checkRequest(t, c.ID, reemitted[c.ID], nil, everything, byEvent)
		if got := int64(len(reemitted[c.ID])); got != c.Rows || got == 0 || got >= int64(len(everything)) {
			t.Errorf("cancelled request %s published %d records; its checkpoint counts %d, of %d rows", c.ID, got, c.Rows, len(everything))
		}
		delete(reemitted, c.ID)
	}
	if len(reemitted) > 0 {
		t.Errorf("records of requests nobody made: %v", slices.Collect(maps.Keys(reemitted)))
	}
	if err := e.p.stop(); err != nil {
		t.Errorf("walstream exit after SIGTERM: %v", err)
	}
}

// reemitCrashes kills walstream at crash points while a request of every
// row runs under the live load, and starts it again with args, until the
// request is done; it returns each request's rows when it was made.
func (e *reemitEnv) reemitCrashes(t *testing.T, args []string) map[string]map[string]bool {
	points := []string{"mid-chunk:3", "after-commit:4"}
	if *reemitAll {
		points = append(points, "after-produce:4", "before-commit:4", "mid-transaction:100", "mid-stream:50")
	}
	seq := 10_000_000
	out := make(map[string]map[string]bool)
	for _, point := range points {
		// Made while walstream is down, the request runs from the start
		// of the next one, which crashes while it runs.
		if err := e.p.stop(); err != nil {
			t.Fatal(err)
		}
		before := outboxIDs(t, e.pg, "true")
		id := e.request(t)
		out[id] = before
		e.p = e.start(args, "WALSTREAM_CRASH_AT="+point)
		if strings.HasPrefix(point, "mid-stream") {
			// A transaction larger than logical_decoding_work_mem, which
			// Postgres streams while it is in progress.
			e.insertTx("Live", 2000, 11, &seq, false)
		}
		if err := e.p.wait(t, time.Minute); !e.p.KilledBy(syscall.SIGKILL) || !strings.Contains(e.p.Log(), "crash point") {
			t.Fatalf("walstream with WALSTREAM_CRASH_AT=%s exited with %v, want killed at it:\n%s", point, err, e.p.Log())
		}
		if strings.Contains(e.p.Log(), "re-emit request done") {
			t.Errorf("WALSTREAM_CRASH_AT=%s crashed after request %s was done, not while it ran", point, id)
		}
		e.p = e.start(args).streaming(t)
		e.wait(t, byID(id), "done", time.Minute)
	}
	return out
}
