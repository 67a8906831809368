package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/walstream/walstream/group"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
)

// fakeRunner runs until ctx ends, or returns err at once when it is set.
type fakeRunner struct {
	err     error
	stopped chan struct{} // closed when Run returns
}

func (f *fakeRunner) Run(ctx context.Context) error {
	defer close(f.stopped)
	if f.err != nil {
		return f.err
	}
	<-ctx.Done()
	return nil
}

// One runner's permanent error stops it alone: its siblings keep running
// until ctx ends, and every error comes back by index.
func TestSuperviseAllKeepsSiblings(t *testing.T) {
	bad := errors.New("bad input")
	rs := []*fakeRunner{{stopped: make(chan struct{})}, {err: bad, stopped: make(chan struct{})}, {stopped: make(chan struct{})}}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var told []int
	done := make(chan []error)
	go func() {
		done <- superviseAll(ctx, []runner{rs[0], rs[1], rs[2]}, func(i int, err error) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, i)
		})
	}()
	<-rs[1].stopped
	select {
	case <-rs[0].stopped:
		t.Fatal("runner 0 stopped when runner 1 failed")
	case <-rs[2].stopped:
		t.Fatal("runner 2 stopped when runner 1 failed")
	case <-done:
		t.Fatal("superviseAll returned while two runners run")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	errs := <-done
	if errs[0] != nil || errs[1] != bad || errs[2] != nil {
		t.Fatalf("errors %v, want [nil bad input nil]", errs)
	}
	if len(told) != 1 || told[0] != 1 {
		t.Fatalf("stopped called for %v, want [1]", told)
	}
}

// assignedStream is a stream's Run in a shared fleet: it counts its runs,
// runs until ctx ends, then takes release to let go, or stops at once
// with err.
type assignedStream struct {
	release time.Duration
	err     error

	mu            sync.Mutex
	runs, running int
}

func (s *assignedStream) Run(ctx context.Context) error {
	s.mu.Lock()
	s.runs++
	s.running++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}()
	if s.err != nil {
		return s.err
	}
	<-ctx.Done()
	time.Sleep(s.release)
	return nil
}

func (s *assignedStream) counts() (runs, running int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs, s.running
}

// A shared fleet runs the streams its group's assignment gives the
// process: it starts those given, releases those taken away (owning each
// until its Run returned), keeps a stream stopped on an error where it is
// while it is given there, stops everything when the membership is lost,
// and runs a stream again when it is given back. Its health endpoints
// name the member a stream is given to.
func TestSharedFleet(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	var ps []*Pipeline
	for _, name := range []string{"a", "b", "c"} {
		ps = append(ps, New(fleetConfig(t, name, "postgres://db/"+name, name), discard, reg))
	}
	f := NewSharedFleet(ps...)
	bad := errors.New("bad input")
	streams := map[string]*assignedStream{"a": {release: 300 * time.Millisecond}, "b": {}, "c": {err: bad}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var stopped []string
	for name, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.runAssigned(ctx, name, s, discard, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				stopped = append(stopped, name)
			})
		}()
	}
	get := func(h http.HandlerFunc, url string) (int, string) {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodGet, url, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(f.Readyz, "/readyz?stream=a"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not assigned: this process has not joined the fleet's group yet") {
		t.Errorf("before any assignment, /readyz?stream=a = %d %q", code, body)
	}
	// A stream's metrics are exported while the process holds it, and
	// only then.
	exported := func(want ...string) {
		t.Helper()
		got := map[string]bool{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "stream" {
						got[l.GetValue()] = true
					}
				}
			}
		}
		if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, want) {
			t.Errorf("metrics of streams %v exported, want %v", names, want)
		}
	}
	exported()
	assign := func(gen int32, members ...group.Member) group.Assignment {
		a := group.Assignment{Generation: gen, Leader: "m1", Members: members, Self: "m1"}
		f.Assign(a)
		return a
	}
	running := func(name string) bool { _, n := streams[name].counts(); return n > 0 }

	assign(1, group.Member{ID: "m1", Name: "host-1", Streams: []string{"a", "b", "c"}})
	testenv.Eventually(t, 5*time.Second, "a and b running, c stopped", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running("a") && running("b") && len(stopped) == 1
	})
	if got, releasing := f.Owned(); !slices.Equal(got, []string{"a", "b", "c"}) || len(releasing) != 0 {
		t.Errorf("owned %v, releasing %v, want a, b and c, stopped on its error, none released", got, releasing)
	}
	exported("a", "b", "c")

	// a and c go to another member: a is owned until its Run returned.
	assign(2, group.Member{ID: "m1", Name: "host-1", Streams: []string{"b"}}, group.Member{ID: "m2", Name: "host-2", Streams: []string{"a", "c"}})
	if got, releasing := f.Owned(); !slices.Contains(got, "a") || !slices.Contains(releasing, "a") || slices.Contains(releasing, "b") {
		t.Errorf("owned %v, releasing %v at once after a was taken away, want a owned and released until it is released, b not released", got, releasing)
	}
	testenv.Eventually(t, 5*time.Second, "a released", func() bool {
		got, releasing := f.Owned()
		return slices.Equal(got, []string{"b"}) && len(releasing) == 0
	})
	if running("a") {
		t.Error("a released while its Run goes on")
	}
	exported("b")
	if code, body := get(f.Readyz, "/readyz?stream=a"); code != http.StatusOK || body != "assigned to member m2 on host-2 (generation 2)\n" {
		t.Errorf("/readyz?stream=a = %d %q, want 200 naming m2", code, body)
	}
	if code, body := get(f.Healthz, "/healthz"); code != http.StatusOK || !strings.Contains(body, "c: assigned to member m2 on host-2") {
		t.Errorf("/healthz = %d %q", code, body)
	}

	// The membership is lost: nothing runs, and nothing is said to run.
	f.Assign(group.Assignment{Lost: "the coordinator has not answered for 7.5s"})
	testenv.Eventually(t, 5*time.Second, "b released", func() bool { got, _ := f.Owned(); return len(got) == 0 && !running("b") })
	exported()
	if code, body := get(f.Readyz, "/readyz"); code != http.StatusServiceUnavailable ||
		strings.Count(body, "not assigned: this process is not a member of the fleet's group now: the coordinator has not answered for 7.5s") != 3 {
		t.Errorf("/readyz with no assignment = %d %q, want 503 for each stream, saying why", code, body)
	}

	// c is given back: it runs again.
	assign(3, group.Member{ID: "m1", Name: "host-1", Streams: []string{"c"}}, group.Member{ID: "m2", Name: "host-2", Streams: []string{"a", "b"}})
	testenv.Eventually(t, 5*time.Second, "c run again", func() bool { runs, _ := streams["c"].counts(); return runs == 2 })
	exported("c")
	cancel()
	wg.Wait()
	if runs, _ := streams["a"].counts(); runs != 1 {
		t.Errorf("a ran %d times, want once", runs)
	}
}

func fleetConfig(t *testing.T, stream, url, slot string) Config {
	t.Helper()
	pg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Stream: stream, Postgres: pg, CheckpointTopic: DefaultCheckpointTopic, CheckpointKey: stream, TransactionalID: "walstream-" + stream,
		Kafka: kafka.Settings{Brokers: []string{"kafka:9092"}}}
	c.Names.Slot = slot
	return c
}

func TestCheckFleet(t *testing.T) {
	orders := fleetConfig(t, "orders", "postgres://db/orders", "orders")
	billing := fleetConfig(t, "billing", "postgres://db/billing", "billing")
	inventory := fleetConfig(t, "inventory", "postgres://other-db/inventory", "orders")
	if err := CheckFleet([]Config{orders, billing, inventory}); err != nil {
		t.Fatalf("a slot each on db, one on other-db: %v", err)
	}
	// Slots are the server's: two databases of one server cannot have one.
	sameSlot := fleetConfig(t, "orders-2", "postgres://db/billing", "orders")
	sameKey := fleetConfig(t, "billing-2", "postgres://db/billing", "other")
	sameKey.CheckpointKey, sameKey.TransactionalID = "billing", "walstream-billing"
	// The same key in another Kafka cluster is another key.
	elsewhere := fleetConfig(t, "billing-3", "postgres://db/billing", "third")
	elsewhere.CheckpointKey, elsewhere.TransactionalID = "billing", "walstream-billing"
	elsewhere.Kafka.Brokers = []string{"other-kafka:9092"}
	err := CheckFleet([]Config{orders, billing, sameSlot, sameKey, orders, elsewhere})
	for _, want := range []string{
		`streams orders and orders-2 have the same slot "orders" on db:5432`,
		`streams billing and billing-2 have the same checkpoint key "billing" in topic walstream.checkpoints of Kafka kafka:9092`,
		`streams billing and billing-2 have the same transactional id "walstream-billing" in Kafka kafka:9092`,
		`streams orders and orders have the same name orders`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckFleet = %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "billing-3") {
		t.Errorf("CheckFleet = %v: billing-3 writes to another Kafka cluster", err)
	}
	// One cluster's brokers listed in two orders are one cluster: one
	// fleet's group, and one transactional id.
	a := fleetConfig(t, "a", "postgres://db/a", "a")
	b := fleetConfig(t, "b", "postgres://db/b", "b")
	a.Kafka.Brokers, b.Kafka.Brokers = []string{"k1:9092", "k2:9092"}, []string{"k2:9092", "k1:9092"}
	a.Fleet.Group, b.Fleet.Group = "g", "g"
	if err := CheckFleet([]Config{a, b}); err != nil {
		t.Errorf("brokers in two orders: %v", err)
	}
	b.TransactionalID = a.TransactionalID
	if err := CheckFleet([]Config{a, b}); err == nil || !strings.Contains(err.Error(), `streams a and b have the same transactional id "walstream-a" in Kafka k1:9092,k2:9092`) {
		t.Errorf("one transactional id, brokers in two orders: %v", err)
	}
	// One cluster spelled two ways, or reached through two of its
	// brokers, is one: its keys and ids are one, and so is a slot of a
	// host named in two cases.
	b = fleetConfig(t, "b", "postgres://DB/b", "a")
	b.Kafka.Brokers, b.CheckpointKey, b.TransactionalID = []string{"K2", "k3:9092"}, a.CheckpointKey, a.TransactionalID
	b.Fleet.Group = "g"
	err = CheckFleet([]Config{a, b})
	for _, want := range []string{
		`streams a and b have the same slot "a" on db:5432`,
		`streams a and b have the same checkpoint key "a" in topic walstream.checkpoints of Kafka k1:9092,k2:9092`,
		`streams a and b have the same transactional id "walstream-a" in Kafka k1:9092,k2:9092`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("one cluster spelled two ways: CheckFleet = %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "different Kafka clusters") {
		t.Errorf("one cluster spelled two ways taken for two: %v", err)
	}
	// Brokers k1, k2, and both: one cluster, through the third.
	c := fleetConfig(t, "c", "postgres://db/c", "c")
	a.Kafka.Brokers, b.Kafka.Brokers, c.Kafka.Brokers = []string{"k1:9092"}, []string{"k2:9092"}, []string{"k1:9092", "k2:9092"}
	b = fleetConfig(t, "b", "postgres://db/b", "b")
	b.Kafka.Brokers, b.TransactionalID, b.Fleet.Group, c.Fleet.Group = []string{"k2:9092"}, a.TransactionalID, "g", "g"
	if err := CheckFleet([]Config{a, b, c}); err == nil || !strings.Contains(err.Error(), `streams a and b have the same transactional id "walstream-a" in Kafka k1:9092`) ||
		strings.Contains(err.Error(), "different Kafka clusters") {
		t.Errorf("brokers k1, k2 and both: CheckFleet = %v, want a and b on one cluster", err)
	}
}

// A fleet's /healthz and /readyz answer for every stream, one line each:
// a stopped stream fails readiness, not health, and ?stream= asks for one.
func TestFleetHealth(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	var ps []*Pipeline
	for _, name := range []string{"orders", "billing"} {
		c := fleetConfig(t, name, "postgres://db/"+name, "walstream")
		c.StatusInterval, c.CommitTimeout, c.ReadyConfirmAge = time.Second, time.Second, time.Minute
		ps = append(ps, New(c, discard, reg))
	}
	f := NewFleet(ps...)
	msg := "stream stopped: bad input at LSN 0/1"
	ps[1].state.stopped.Store(&msg)
	get := func(h http.HandlerFunc, url string) (int, string) {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodGet, url, nil))
		return rec.Code, rec.Body.String()
	}
	code, body := get(f.Healthz, "/healthz")
	if want := "orders: ok\nbilling: stopped: " + msg + "\n"; code != http.StatusOK || body != want {
		t.Errorf("/healthz = %d %q, want 200 %q", code, body, want)
	}
	code, body = get(f.Readyz, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "orders: not streaming") || !strings.Contains(body, "billing: stopped: "+msg) {
		t.Errorf("/readyz = %d %q, want 503 with a line per stream", code, body)
	}
	code, body = get(f.Readyz, "/readyz?stream=billing")
	if want := "stopped: " + msg + "\n"; code != http.StatusServiceUnavailable || body != want {
		t.Errorf("/readyz?stream=billing = %d %q, want 503 %q", code, body, want)
	}
	if code, _ = get(f.Readyz, "/readyz?stream=nope"); code != http.StatusNotFound {
		t.Errorf("/readyz?stream=nope = %d, want 404", code)
	}
	if got := streamGauge(t, reg, "walstream_stopped", "billing"); got != 1 {
		t.Errorf("walstream_stopped{stream=billing} = %v, want 1", got)
	}
	if got := streamGauge(t, reg, "walstream_stopped", "orders"); got != 0 {
		t.Errorf("walstream_stopped{stream=orders} = %v, want 0", got)
	}
}

// streamGauge reads a gauge of stream from reg.
func streamGauge(t *testing.T, reg *prometheus.Registry, name, stream string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" && l.GetValue() == stream {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{stream=%q}", name, stream)
	return 0
}

// outboxDDL is the pipeline tests' outbox table.
const outboxDDL = `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload jsonb)`

// TestStandbyAndFleet runs standbys and fleets of streams on one Postgres
// and one kfake, each case on slots of its own; the last restarts
// Postgres.
func TestStandbyAndFleet(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.Settings("log_connections = on"))
	broker := testenv.StartKfake(t, kfake.GroupMinSessionTimeout(time.Second))
	pg.Exec("postgres", outboxDDL)
	t.Run("one stops, the others go on", func(t *testing.T) { fleetOneStops(t, pg, broker.Addr()) })
	t.Run("standby stream by stream", func(t *testing.T) { fleetStandbyStreamByStream(t, pg, broker.Addr()) })
	t.Run("moved by the fleet's group", func(t *testing.T) { fleetMovedByGroup(t, pg, broker.Addr()) })
	t.Run("paused after taking the slot", func(t *testing.T) { pausedAfterTakingTheSlot(t, pg, broker.Addr()) })
	t.Run("inspected while committing", func(t *testing.T) { inspectWhileCommitting(t, pg, broker.Addr()) })
	t.Run("standby keeps one connection", func(t *testing.T) { standbyKeepsOneConnection(t, pg, broker.Addr()) })
}

// Two processes of one fleet, each a shared fleet of the same two streams
// in a group on kfake: the first runs both; the second joins and takes
// one, which the first releases; the second leaves and the first runs the
// stream again, its Pipeline run a second time on the metrics it
// registered once, and publishes what was written meanwhile.
func fleetMovedByGroup(t *testing.T, pg *testenv.Postgres, broker string) {
	names := []string{"red", "blue"}
	var cfgs []Config
	for _, name := range names {
		c := testConfig(t, pg, broker)
		c.Stream, c.CheckpointKey, c.TransactionalID = name, name, "walstream-"+name
		c.Names.Slot, c.Names.Publication = name, name
		c.Fleet = group.Settings{Group: "walstream-fleet-test", SessionTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: 5 * time.Second}
		cfgs = append(cfgs, c)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	type process struct {
		ps   []*Pipeline
		reg  *prometheus.Registry
		stop func() error
	}
	start := func(name string) *process {
		p := &process{reg: prometheus.NewRegistry()}
		for _, c := range cfgs {
			p.ps = append(p.ps, New(c, log.With("process", name, "stream", c.Stream), p.reg))
		}
		m, err := group.NewMembership(cfgs[0].Kafka, group.Config{Settings: cfgs[0].Fleet, Name: name, Streams: names}, log.With("process", name), group.NewMetrics(p.reg))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- NewSharedFleet(p.ps...).RunShared(ctx, m, nil) }()
		var once sync.Once
		var err2 error
		p.stop = func() error { once.Do(func() { cancel(); err2 = <-done }); return err2 }
		t.Cleanup(func() { _ = p.stop() })
		return p
	}
	streaming := func(p *Pipeline) bool { _, ok := p.state.streaming(time.Now()); return ok }

	first := start("first")
	testenv.Eventually(t, 30*time.Second, "the first process streaming both streams", func() bool { return streaming(first.ps[0]) && streaming(first.ps[1]) })
	second := start("second")
	moved := -1
	testenv.Eventually(t, 30*time.Second, "one stream moved to the second process", func() bool {
		for i := range names {
			if streaming(second.ps[i]) && !streaming(first.ps[i]) && streaming(first.ps[1-i]) && !streaming(second.ps[1-i]) {
				moved = i
				return true
			}
		}
		return false
	})
	t.Logf("%s moved to the second process", names[moved])

	if err := second.stop(); err != nil {
		t.Fatalf("the second process's RunShared = %v", err)
	}
	testenv.Eventually(t, 30*time.Second, names[moved]+" back on the first process", func() bool { return streaming(first.ps[moved]) })
	before := published(t, first.reg, "outbox.event.Moved")
	pg.Exec("postgres", `INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000a1', 'Moved', 'm-1', 'Created', '{}')`)
	testenv.Eventually(t, 30*time.Second, "the row published by both streams of the first process", func() bool {
		return published(t, first.reg, "outbox.event.Moved") == before+2
	})
}

// Two streams of one process, in two databases, on one registry: bad input
// stops one, and the other goes on streaming; each stream's metrics,
// franz-go's included, are series of their own.
func fleetOneStops(t *testing.T, pg *testenv.Postgres, broker string) {
	var cfgs []Config
	for _, db := range []string{"orders", "billing"} {
		pg.Exec("postgres", "CREATE DATABASE "+db)
		pg.Exec(db, outboxDDL)
		c := testConfig(t, pg, broker)
		var err error
		if c.Postgres, err = pgx.ParseConfig(pg.URL("postgres", db)); err != nil {
			t.Fatal(err)
		}
		c.Stream, c.CheckpointKey, c.TransactionalID = db, db, "walstream-"+db
		c.Names.Slot, c.Names.Publication = db, db
		cfgs = append(cfgs, c)
	}
	if err := CheckFleet(cfgs); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	orders, billing := New(cfgs[0], log.With("stream", "orders"), reg), New(cfgs[1], log.With("stream", "billing"), reg)
	f := NewFleet(orders, billing)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan string, 2)
	errc := make(chan error, 1)
	go func() { errc <- f.Run(ctx, func(p *Pipeline, err error) { stopped <- p.cfg.Stream }) }()
	for _, p := range []*Pipeline{orders, billing} {
		testenv.Eventually(t, 30*time.Second, p.cfg.Stream+" streaming", func() bool { _, ok := p.state.streaming(time.Now()); return ok })
	}
	pg.Exec("orders", `INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000b1', NULL, 'o-1', 'Created', '{}')`)
	select {
	case name := <-stopped:
		if name != "orders" {
			t.Fatalf("stream %s stopped, want orders", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("orders did not stop on its bad row")
	}
	for i := range 3 {
		pg.Exec("billing", fmt.Sprintf(`INSERT INTO outbox VALUES ('00000000-0000-0000-0000-00000000000%d', 'Invoice', 'i-1', 'Created', '{}')`, i+1))
	}
	testenv.Eventually(t, 30*time.Second, "billing's rows published", func() bool { return published(t, reg, "outbox.event.Invoice") == 3 })
	if _, ok := billing.state.streaming(time.Now()); !ok {
		t.Fatal("billing stopped streaming when orders stopped")
	}
	if got := streamGauge(t, reg, "walstream_stopped", "orders"); got != 1 {
		t.Errorf("walstream_stopped{stream=orders} = %v, want 1", got)
	}
	// franz-go's client metrics (kprom) of both producers, one series each.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering two streams' metrics: %v", err)
	}
	streams := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() == "walstream_kafka_write_bytes_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "stream" {
						streams[l.GetValue()] = true
					}
				}
			}
		}
	}
	if !streams["billing"] {
		t.Errorf("walstream_kafka_write_bytes_total has series of %v, want billing's", streams)
	}
	cancel()
	select {
	case err := <-errc:
		var se *StreamError
		if !errors.As(err, &se) || se.Stream != "orders" || !strings.Contains(err.Error(), "stream orders: ") {
			t.Fatalf("Fleet.Run = %v, want orders' error alone", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Fleet.Run did not return")
	}
}

// Two processes of the same two streams: the second stands by for each
// stream's slot on its own, and takes over the one stream whose instance
// stops while it stands by for the other.
func fleetStandbyStreamByStream(t *testing.T, pg *testenv.Postgres, broker string) {
	var cfgs []Config
	for _, name := range []string{"inventory", "shipping"} {
		c := testConfig(t, pg, broker)
		c.Stream, c.CheckpointKey, c.TransactionalID = name, name, "walstream-"+name
		c.Names.Slot, c.Names.Publication = name, name
		cfgs = append(cfgs, c)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	streaming := func(p *Pipeline) bool { _, ok := p.state.streaming(time.Now()); return ok }
	standing := func(p *Pipeline) bool { return p.state.standbyAt.Load() != 0 && !streaming(p) }
	// The first process's streams run apart, so that one can stop alone.
	var first []*Pipeline
	var stops []context.CancelFunc
	for _, c := range cfgs {
		p := New(c, log.With("process", "first", "stream", c.Stream), prometheus.NewRegistry())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		stops = append(stops, func() { cancel(); <-done })
		t.Cleanup(stops[len(stops)-1])
		first = append(first, p)
		testenv.Eventually(t, 30*time.Second, "the first process streaming "+c.Stream, func() bool { return streaming(p) })
	}
	reg := prometheus.NewRegistry()
	second := []*Pipeline{New(cfgs[0], log.With("process", "second", "stream", "inventory"), reg), New(cfgs[1], log.With("process", "second", "stream", "shipping"), reg)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewFleet(second...).Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 30*time.Second, "the second process standing by for both streams", func() bool { return standing(second[0]) && standing(second[1]) })

	stops[0]() // the first process's inventory stops
	testenv.Eventually(t, 30*time.Second, "the second process taking inventory over", func() bool { return streaming(second[0]) })
	if !standing(second[1]) || !streaming(first[1]) {
		t.Fatalf("shipping: second process standing by %v, first streaming %v; want shipping left where it was", standing(second[1]), streaming(first[1]))
	}
}
