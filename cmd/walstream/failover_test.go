package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/internal/testenv"
)

// The failover tests run on Postgres 17, the first major with failover
// slots: a primary, a physical standby built by the harness, the broker,
// and the walstream binary.
const failoverMajor = 17

// slotWatch samples the slot on each server every 50 ms while a test runs:
// its confirmed_flush_lsn must never pass the server's WAL position
// (pg_current_wal_lsn() on a primary; on a standby the greater of
// pg_last_wal_receive_lsn() and pg_last_wal_replay_lsn(), since a
// restarted standby that has not streamed yet reports the start of a
// segment as received). A confirmed position past it makes the slot skip
// transactions the server writes later.
type slotWatch struct {
	t       *testing.T
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples int
	bad     []string
}

func watchSlot(t *testing.T, slot string, servers ...*testenv.Postgres) *slotWatch {
	w := &slotWatch{t: t, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		conns := make([]*pgx.Conn, len(servers))
		defer func() {
			for _, c := range conns {
				if c != nil {
					c.Close(context.Background())
				}
			}
		}()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			for i, pg := range servers {
				w.sample(&conns[i], pg, slot)
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { w.check() })
	return w
}

// sample reads the slot's confirmed position and then the server's WAL
// position in one statement: the second is read after the first, so a
// slot that confirms meanwhile cannot raise a false alarm.
func (w *slotWatch) sample(conn **pgx.Conn, pg *testenv.Postgres, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if *conn == nil {
		c, err := pgx.Connect(ctx, pg.URL("postgres", "postgres"))
		if err != nil {
			return // down, crashed or restarting
		}
		*conn = c
	}
	var confirmed, server *string
	var standby bool
	err := (*conn).QueryRow(ctx, `SELECT s.confirmed_flush_lsn::text, pg_is_in_recovery(),
			(CASE WHEN pg_is_in_recovery() THEN greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
				ELSE pg_current_wal_lsn() END)::text
		FROM pg_replication_slots s WHERE s.slot_name = $1`, slot).Scan(&confirmed, &standby, &server)
	if errors.Is(err, pgx.ErrNoRows) {
		return
	}
	if err != nil {
		(*conn).Close(context.Background())
		*conn = nil
		return
	}
	if confirmed == nil || server == nil {
		return
	}
	c, err1 := pglogrepl.ParseLSN(*confirmed)
	s, err2 := pglogrepl.ParseLSN(*server)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err1 != nil || err2 != nil {
		w.bad = append(w.bad, fmt.Sprintf("port %d: unreadable LSNs %q %q", pg.Port, *confirmed, *server))
		return
	}
	w.samples++
	if c > s {
		w.bad = append(w.bad, fmt.Sprintf("port %d (standby %v): slot %s confirmed_flush_lsn %s is past the server's WAL position %s", pg.Port, standby, slot, c, s))
	}
}

// check stops the sampling and fails the test on any violation, or when
// nothing was sampled.
func (w *slotWatch) check() {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples == 0 {
		w.t.Error("the slot watch took no sample")
	}
	for i, b := range w.bad {
		if i == 10 {
			w.t.Errorf("... and %d more", len(w.bad)-10)
			break
		}
		w.t.Error(b)
	}
}

// load inserts one outbox row per transaction through url until stopped,
// reconnecting after errors, as an application does across a failover.
type load struct {
	stop chan struct{}
	done chan struct{}
	n    int // transactions that reported a commit
}

func startLoad(t *testing.T, url string, pause time.Duration) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for seq := 0; ; seq++ {
			select {
			case <-l.stop:
				return
			case <-time.After(pause):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if conn == nil {
				c, err := pgx.Connect(ctx, url)
				if err != nil {
					cancel()
					continue
				}
				conn = c
			}
			_, err := conn.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
				VALUES ('Order', $1::text, 'created', jsonb_build_object('seq', $2::int, 'agg', $1::text))`, fmt.Sprintf("agg-%d", seq%7), seq)
			cancel()
			if err != nil {
				conn.Close(context.Background())
				conn = nil
				continue
			}
			l.n++
		}
	}()
	t.Cleanup(l.halt)
	return l
}

func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// insertRows inserts n outbox rows on pg, one transaction each, and returns
// their ids.
func insertRows(t *testing.T, pg *testenv.Postgres, n int, agg string) []string {
	t.Helper()
	conn := pg.Connect("postgres")
	defer conn.Close(context.Background())
	ids := make([]string, 0, n)
	for i := range n {
		var id string
		err := conn.QueryRow(context.Background(), `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
			VALUES ('Order', $1::text, 'created', jsonb_build_object('seq', $2::int, 'agg', $1::text)) RETURNING id::text`, agg, i).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// outboxIDs are the event ids of the rows of pg's outbox table that
// satisfy where.
func outboxIDs(t *testing.T, pg *testenv.Postgres, where string) map[string]bool {
	t.Helper()
	conn := pg.Connect("postgres")
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), "SELECT id::text FROM outbox WHERE "+where)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// kafkaIDs reads the Order topic read_committed with kcat and counts each
// event id.
func kafkaIDs(t *testing.T, broker string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := testenv.Kcat(ctx, broker, "outbox.event.Order")
	if err != nil && !strings.Contains(err.Error(), "Unknown topic") {
		t.Fatal(err)
	}
	ids := make(map[string]int)
	for _, r := range recs {
		ids[r.Header("id")]++
	}
	return ids
}

// waitKafka waits until every id of want is in Kafka, failing the test if
// walstream exits first.
func waitKafka(t *testing.T, broker string, want map[string]bool, p *testenv.Process, within time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := kafkaIDs(t, broker)
		missing := 0
		for id := range want {
			if got[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if p != nil && p.Exited() {
			t.Fatalf("walstream exited (%s) with %d of %d rows not in Kafka", p.ExitDesc(), missing, len(want))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows not in Kafka after %s", missing, len(want), within)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// exactly checks that Kafka holds every id of want once and nothing else.
func exactly(t *testing.T, got map[string]int, want map[string]bool) {
	t.Helper()
	for id, n := range got {
		switch {
		case !want[id]:
			t.Errorf("event %s is in Kafka %d time(s) but not expected", id, n)
		case n > 1:
			t.Errorf("event %s is in Kafka %d times", id, n)
		}
	}
	for id := range want {
		if got[id] == 0 {
			t.Errorf("row %s is not in Kafka", id)
		}
	}
}

// waitReplayed waits until standby has replayed primary's current WAL.
func waitReplayed(t *testing.T, standby, primary *testenv.Postgres) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := standby.WaitReplayed(ctx, serverLSN(t, primary)); err != nil {
		t.Fatal(err)
	}
}

// waitSynced waits until the standby holds a synced, persistent copy of
// the slot, which is what survives a promotion.
func waitSynced(t *testing.T, standby *testenv.Postgres, slot string, within time.Duration) {
	t.Helper()
	conn := standby.Connect("postgres")
	defer conn.Close(context.Background())
	deadline := time.Now().Add(within)
	for {
		var ok bool
		err := conn.QueryRow(context.Background(),
			"SELECT coalesce(bool_and(synced AND NOT temporary), false) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&ok)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s was not synced to the standby within %s", slot, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func runArgs(url, broker string, extra ...string) []string {
	return append([]string{"run", "--pg-url", url, "--kafka-brokers", broker, "--http-addr", "",
		"--status-interval", "1s", "--idle-interval", "500ms", "--commit-timeout", "10s", "--slot-poll-interval", "1s", "--log-level", "debug"}, extra...)
}

// TestFailoverSafe: a primary with a physical standby that syncs slots,
// synchronized_standby_slots naming the standby, walstream on a multi-host
// URL creating its own slot. Under load the primary crashes and the
// standby is promoted: every row on the new primary reaches Kafka exactly
// once, and nothing else does.
func TestFailoverSafe(t *testing.T) {
	t.Parallel()
	primary := testenv.StartPostgres(t, testenv.Version(failoverMajor))
	standby := testenv.StartStandby(t, primary, testenv.StandbyConfig{Slot: "standby1", SyncSlots: true})
	primary.Exec("postgres", "ALTER SYSTEM SET synchronized_standby_slots = 'standby1'")
	primary.Exec("postgres", "SELECT pg_reload_conf()")
	primary.Exec("postgres", outboxDDL)
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=primary",
		primary.Port, standby.Port)
	watchSlot(t, "walstream", primary, standby)

	p := testenv.StartWalstream(t, binary, runArgs(url, broker))
	testenv.WaitStreaming(t, p, 60*time.Second)
	var failover bool
	if err := primary.Connect("postgres").QueryRow(context.Background(),
		"SELECT failover FROM pg_replication_slots WHERE slot_name = 'walstream'").Scan(&failover); err != nil || !failover {
		t.Fatalf("walstream's slot: failover = %v (%v), want a failover slot", failover, err)
	}
	if !strings.Contains(p.Log(), fmt.Sprintf("127.0.0.1:%d", primary.Port)) {
		t.Errorf("walstream did not log the host it connected to (127.0.0.1:%d)", primary.Port)
	}
	l := startLoad(t, url, 5*time.Millisecond)
	waitSynced(t, standby, "walstream", 30*time.Second)
	time.Sleep(time.Second)
	if err := primary.StopImmediate(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // load on the new primary
	l.halt()
	if l.n == 0 {
		t.Fatal("the load committed nothing")
	}
	want := outboxIDs(t, standby, "true")
	waitKafka(t, broker, want, p, 40*time.Second)
	time.Sleep(time.Second) // anything else walstream was going to publish
	got := kafkaIDs(t, broker)
	exactly(t, got, want)
	t.Logf("%d transactions reported committed by the load, %d rows on the new primary, %d events in Kafka", l.n, len(want), len(got))
	if !strings.Contains(p.Log(), "failover: the checkpoint is on the new primary's history") {
		t.Error("walstream did not log the safe failover")
	}
	if !strings.Contains(p.Log(), fmt.Sprintf("127.0.0.1:%d", standby.Port)) {
		t.Errorf("walstream did not log the new primary's host (127.0.0.1:%d)", standby.Port)
	}
}

// serverLSN is the server's current WAL insert position.
func serverLSN(t *testing.T, pg *testenv.Postgres) pglogrepl.LSN {
	t.Helper()
	lsn, err := pg.CurrentLSN(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func union(sets ...[]string) map[string]bool {
	m := make(map[string]bool)
	for _, s := range sets {
		for _, id := range s {
			m[id] = true
		}
	}
	return m
}

// waitExit waits for walstream to stop on its own and returns its log.
func waitExit(t *testing.T, p *testenv.Process, within time.Duration) string {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(within):
		t.Fatalf("walstream still runs after %s; log:\n%s", within, p.Log())
	}
	if p.Err() == nil {
		t.Fatalf("walstream exited 0, want a failure; log:\n%s", p.Log())
	}
	return p.Log()
}

func wantIn(t *testing.T, what, text string, parts ...string) {
	t.Helper()
	for _, s := range parts {
		if !strings.Contains(text, s) {
			t.Errorf("%s does not say %q:\n%s", what, s, text)
		}
	}
}

// status runs `walstream status` and returns its output and error.
func status(t *testing.T, url, broker string, extra ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append([]string{"status", "--pg-url", url, "--kafka-brokers", broker}, extra...)...).CombinedOutput()
	return string(out), err
}

// TestFailoverPhantoms: an async standby misses the last transactions
// walstream published, and is promoted. walstream stops and names the
// phantom range and count; with --accept-phantoms every transaction of
// the new timeline arrives, also those committed at LSNs below the old
// checkpoint.
func TestFailoverPhantoms(t *testing.T) {
	t.Parallel()
	primary := testenv.StartPostgres(t, testenv.Version(failoverMajor))
	standby := testenv.StartStandby(t, primary, testenv.StandbyConfig{Slot: "standby1", SyncSlots: true})
	primary.Exec("postgres", outboxDDL)
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	watchSlot(t, "walstream", primary, standby)

	p := testenv.StartWalstream(t, binary, runArgs(primary.URL("postgres", "postgres"), broker))
	testenv.WaitStreaming(t, p, 60*time.Second)
	before := insertRows(t, primary, 30, "before")
	waitKafka(t, broker, union(before), p, 30*time.Second)
	waitSynced(t, standby, "walstream", 30*time.Second)
	waitReplayed(t, standby, primary)
	// The standby stops receiving: what follows is published but lost in
	// the failover.
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}
	const nPhantoms = 40
	phantoms, oldEnd := publishPhantoms(t, p, primary, broker, nPhantoms, before)
	if err := primary.StopImmediate(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	// Committed on the new timeline at LSNs the old checkpoint covers: the
	// rows a checkpoint filter would drop as replays.
	after := insertRows(t, standby, 20, "after")
	if end := serverLSN(t, standby); end >= oldEnd {
		t.Fatalf("the new primary's WAL (%s) passed the old primary's (%s): the test does not reach below the old checkpoint", end, oldEnd)
	}

	url := standby.URL("postgres", "postgres")
	stopsOnPhantoms(t, url, broker, len(before)+len(phantoms),
		fmt.Sprintf("phantom events: %d events were published from WAL between", nPhantoms), "timeline 1 forked", "--accept-phantoms")
	st, err := status(t, url, broker)
	if err == nil {
		t.Errorf("walstream status exited 0 with phantom events")
	}
	wantIn(t, "walstream status", st, "phantom", fmt.Sprint(nPhantoms))

	go_, want := streamLater(t, standby, url, broker, union(before, phantoms, after), 10, "--accept-phantoms", "--http-addr", "127.0.0.1:0")
	exactly(t, kafkaIDs(t, broker), want)
	if v := metric(t, (&proc{go_}).httpAddr(t), "walstream_phantom_events"); v != nPhantoms {
		t.Errorf("walstream_phantom_events = %v, want %d", v, nPhantoms)
	}
	if err := go_.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err = status(t, url, broker)
	if err != nil {
		t.Errorf("walstream status after the accepted phantoms: %v\n%s", err, st)
	}
	wantIn(t, "walstream status", st, "phantoms", fmt.Sprint(nPhantoms))
}

// TestForeignCluster: the URL reaches another cluster whose LSNs are all
// below the checkpoint. walstream refuses it, naming both system
// identifiers; with --accept-system-change it goes on from the slot.
func TestForeignCluster(t *testing.T) {
	t.Parallel()
	a := testenv.StartPostgres(t)
	b := testenv.StartPostgres(t)
	for _, pg := range []*testenv.Postgres{a, b} {
		pg.Exec("postgres", outboxDDL)
	}
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	watchSlot(t, "walstream", a, b)
	p := testenv.StartWalstream(t, binary, runArgs(a.URL("postgres", "postgres"), broker))
	testenv.WaitStreaming(t, p, 60*time.Second)
	fromA := insertRows(t, a, 10, "a")
	for range 4 { // a's WAL moves far past b's
		a.Exec("postgres", "SELECT pg_switch_wal()")
		a.Exec("postgres", "CREATE TABLE IF NOT EXISTS filler (x int); INSERT INTO filler VALUES (1)")
	}
	fromA = append(fromA, insertRows(t, a, 5, "a")...)
	waitKafka(t, broker, union(fromA), p, 30*time.Second)
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The operator prepares b as for a new start, and the application
	// writes to it.
	b.Exec("postgres", "CREATE PUBLICATION walstream_outbox FOR TABLE outbox "+publicationOptions("insert, update"))
	b.Exec("postgres", "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')")
	fromB := insertRows(t, b, 20, "b")
	if bEnd, aEnd := serverLSN(t, b), serverLSN(t, a); bEnd >= aEnd {
		t.Fatalf("b's WAL (%s) is not below a's (%s)", bEnd, aEnd)
	}
	ida, err := a.Identify(context.Background(), "postgres")
	if err != nil {
		t.Fatal(err)
	}
	idb, err := b.Identify(context.Background(), "postgres")
	if err != nil {
		t.Fatal(err)
	}

	url := b.URL("postgres", "postgres")
	out := waitExit(t, testenv.StartWalstream(t, binary, runArgs(url, broker)), 60*time.Second)
	wantIn(t, "the log", out, "another Postgres cluster", ida.SystemID, idb.SystemID, "restored from a backup", "--accept-system-change")
	if got := kafkaIDs(t, broker); len(got) != len(fromA) {
		t.Fatalf("Kafka holds %d events after the refusal, want the %d from a", len(got), len(fromA))
	}
	st, err := status(t, url, broker)
	if err == nil {
		t.Errorf("walstream status exited 0 on another cluster")
	}
	wantIn(t, "walstream status", st, "another Postgres cluster")

	go_ := testenv.StartWalstream(t, binary, runArgs(url, broker, "--accept-system-change"))
	testenv.WaitStreaming(t, go_, 60*time.Second)
	more := insertRows(t, b, 10, "b")
	want := union(fromA, fromB, more)
	waitKafka(t, broker, want, go_, 30*time.Second)
	if err := go_.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The choice is on record in the checkpoint, with both systems.
	st, err = status(t, url, broker, "--json")
	if err != nil {
		t.Errorf("walstream status after the accepted change: %v\n%s", err, st)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(st), &r); err != nil {
		t.Fatalf("status --json: %v\n%s", err, st)
	}
	if c := r.Checkpoint; c.SystemID != idb.SystemID || c.Gap == nil || c.Gap.Kind != "system_changed" || c.Gap.PreviousSystemID != ida.SystemID {
		t.Errorf("status --json checkpoint: system %s, gap %+v; want system %s and the change from %s on record", c.SystemID, c.Gap, idb.SystemID, ida.SystemID)
	}
	// The new checkpoint names b: a plain start streams on.
	again := testenv.StartWalstream(t, binary, runArgs(url, broker))
	testenv.WaitStreaming(t, again, 60*time.Second)
	last := insertRows(t, b, 5, "b")
	want = union(fromA, fromB, more, last)
	waitKafka(t, broker, want, again, 30*time.Second)
	time.Sleep(time.Second)
	exactly(t, kafkaIDs(t, broker), want)
}

// TestMissingSlotWithCheckpoint: a slot that vanished while Kafka holds a
// checkpoint is not recreated, even with --create: the rows committed
// meanwhile cannot be streamed. The error gives the safe procedure, and
// --allow-slot-ahead creates it deliberately.
func TestMissingSlotWithCheckpoint(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	pg.Exec("postgres", outboxDDL)
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	watchSlot(t, "walstream", pg)
	// Two hosts without target_session_attrs: walstream warns.
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable", pg.Port, pg.Port+1)
	p := testenv.StartWalstream(t, binary, runArgs(url, broker))
	testenv.WaitStreaming(t, p, 60*time.Second)
	wantIn(t, "the log", p.Log(), "target_session_attrs=primary")
	first := insertRows(t, pg, 10, "a")
	waitKafka(t, broker, union(first), p, 30*time.Second)
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pg.Exec("postgres", "SELECT pg_drop_replication_slot('walstream')")
	insertRows(t, pg, 5, "lost") // committed while no slot exists: never streamed

	out := waitExit(t, testenv.StartWalstream(t, binary, runArgs(url, broker)), 60*time.Second)
	wantIn(t, "the log", out, `slot "walstream"`, "does not exist", "checkpoint", "--allow-slot-ahead", "The slot is missing")
	if strings.Contains(out, "create it with") {
		t.Errorf("the error still advises creating the slot as if nothing were lost:\n%s", out)
	}
	slotRecreatedOnRequest(t, pg, url, broker, first)
}

// TestRestoredServerBehindCheckpoint: the server is replaced by a copy of
// its data directory taken earlier, on the same timeline, so its WAL ends
// before the checkpoint. walstream stops, saying so; with --accept-phantoms
// it goes on from the slot and every row of the restored server arrives,
// also those committed at LSNs the checkpoint covers.
func TestRestoredServerBehindCheckpoint(t *testing.T) {
	t.Parallel()
	pg, url, broker, first, phantoms, oldEnd := restoredCopy(t)
	after := insertRows(t, pg, 5, "after")
	if end := serverLSN(t, pg); end >= oldEnd {
		t.Fatalf("the restored server's WAL (%s) passed the old one (%s): the test does not reach below the checkpoint", end, oldEnd)
	}

	stopsOnPhantoms(t, url, broker, len(first)+len(phantoms), "phantom events: at least", "on the same timeline", "restored", "--accept-phantoms")
	goesOnFromCopy(t, pg, url, broker, first, union(first, phantoms, after))
}

// TestRestoredServerPastCheckpoint: as above, but the restored server is
// written to past the checkpoint's LSN before walstream comes back, so
// that its WAL end no longer shows the restore, and rows it committed at
// LSNs the checkpoint covers would be skipped as published. The replay
// from the slot does not hold the checkpoint's last transaction: walstream
// stops, saying so, and with --accept-phantoms goes on from the slot.
func TestRestoredServerPastCheckpoint(t *testing.T) {
	t.Parallel()
	pg, url, broker, first, phantoms, oldEnd := restoredCopy(t)
	after := insertRows(t, pg, 5, "after")
	if end := serverLSN(t, pg); end >= oldEnd {
		t.Fatalf("the restored server's WAL (%s) passed the old one (%s) before the filler: the rows are not below the checkpoint", end, oldEnd)
	}
	pg.Exec("postgres", "CREATE TABLE filler (pad text)")
	for serverLSN(t, pg) <= oldEnd {
		pg.Exec("postgres", "INSERT INTO filler SELECT repeat('x', 100) FROM generate_series(1, 100)")
	}

	stopsOnPhantoms(t, url, broker, len(first)+len(phantoms), "phantom events:", "was rewritten", "no transaction at",
		"as the last one published", "--accept-phantoms")
	goesOnFromCopy(t, pg, url, broker, first, union(first, phantoms, after))
}

// restoredCopy starts a server whose five rows walstream publishes, copies
// its data directory (the slot as walstream left it, those rows), has
// walstream publish twenty phantom rows, then puts the copy in place of
// the server. It returns the server, the first rows' and the phantoms'
// ids, and the WAL end the phantoms reached.
func restoredCopy(t *testing.T) (pg *testenv.Postgres, url, broker string, first, phantoms []string, oldEnd pglogrepl.LSN) {
	t.Helper()
	pg = testenv.StartPostgres(t)
	pg.Exec("postgres", outboxDDL)
	broker = testenv.StartBroker(t, testenv.TestBroker()).Addr()
	watchSlot(t, "walstream", pg)
	url = pg.URL("postgres", "postgres")
	p := testenv.StartWalstream(t, binary, runArgs(url, broker))
	testenv.WaitStreaming(t, p, 60*time.Second)
	first = insertRows(t, pg, 5, "first")
	waitKafka(t, broker, union(first), p, 30*time.Second)
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	copyDir := pg.DataDir() + ".copy"
	if out, err := exec.Command("cp", "-a", pg.DataDir(), copyDir).CombinedOutput(); err != nil {
		t.Fatalf("copying the data directory: %v\n%s", err, out)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	p = testenv.StartWalstream(t, binary, runArgs(url, broker))
	testenv.WaitStreaming(t, p, 60*time.Second)
	phantoms, oldEnd = publishPhantoms(t, p, pg, broker, 20, first)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-c", `rm -rf "$1" && mv "$2" "$1"`, "restore", pg.DataDir(), copyDir).CombinedOutput(); err != nil {
		t.Fatalf("restoring the copy: %v\n%s", err, out)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	return pg, url, broker, first, phantoms, oldEnd
}

// goesOnFromCopy starts walstream with --accept-phantoms and checks that
// Kafka then holds every row of want once. Where the copy's WAL parted
// cannot be told on one timeline, so walstream goes on from the slot's
// position in the copy: the rows published before that the copy holds
// (copied) may come again (Postgres 15 does not write a slot's confirmed
// position at shutdown, so here they do). Nothing is lost, and every row
// written after the restore arrives once.
func goesOnFromCopy(t *testing.T, pg *testenv.Postgres, url, broker string, copied []string, want map[string]bool) {
	t.Helper()
	_, want = streamLater(t, pg, url, broker, want, 5, "--accept-phantoms")
	got := kafkaIDs(t, broker)
	for _, id := range copied {
		got[id] = min(got[id], 1)
	}
	exactly(t, got, want)
}

// TestFailoverWithoutSlotCopy: the standby keeps no copy of the slot (no
// slot sync), as with Postgres 14 to 16. After the promotion walstream,
// following the multi-host URL, finds no slot on the new primary while
// Kafka holds a checkpoint: it stops and gives the procedure instead of
// creating a slot past the rows committed meanwhile, although it runs with
// --allow-slot-ahead, left from an earlier start: what a start accepted is
// not accepted again once a checkpoint is in Kafka. Told anew to accept
// the gap, it creates the slot and publishes what follows.
func TestFailoverWithoutSlotCopy(t *testing.T) {
	t.Parallel()
	primary := testenv.StartPostgres(t, testenv.Version(failoverMajor))
	standby := testenv.StartStandby(t, primary, testenv.StandbyConfig{Slot: "standby1"})
	primary.Exec("postgres", outboxDDL)
	broker := testenv.StartBroker(t, testenv.TestBroker()).Addr()
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=primary",
		primary.Port, standby.Port)
	watchSlot(t, "walstream", primary, standby)
	p := testenv.StartWalstream(t, binary, append(runArgs(url, broker), "--allow-slot-ahead"))
	testenv.WaitStreaming(t, p, 60*time.Second)
	before := insertRows(t, primary, 10, "before")
	waitKafka(t, broker, union(before), p, 30*time.Second)
	waitReplayed(t, standby, primary)
	if err := primary.StopImmediate(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	insertRows(t, standby, 5, "meanwhile") // before any slot exists on the new primary: not published
	out := waitExit(t, p, 60*time.Second)
	wantIn(t, "the log", out, `slot "walstream" does not exist`, "checkpoint", "not a failover slot", "--allow-slot-ahead", "The slot is missing")
	slotRecreatedOnRequest(t, standby, url, broker, before)
}

// slotRecreatedOnRequest checks that walstream left the slot missing on pg,
// then that with --allow-slot-ahead it creates it and goes on: the rows
// published before and those written after arrive exactly once.
func slotRecreatedOnRequest(t *testing.T, pg *testenv.Postgres, url, broker string, published []string) {
	t.Helper()
	var n int
	if err := pg.Connect("postgres").QueryRow(context.Background(),
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walstream'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("slots named walstream: %d (%v), want none: it must not be recreated silently", n, err)
	}
	_, want := streamLater(t, pg, url, broker, union(published), 10, "--allow-slot-ahead")
	exactly(t, kafkaIDs(t, broker), want)
}

// publishPhantoms inserts n rows on pg, waits until walstream p published
// them after those published before, stops p, and returns the rows' ids
// and the server's WAL end: what a server that replaces pg does not hold.
func publishPhantoms(t *testing.T, p *testenv.Process, pg *testenv.Postgres, broker string, n int, published []string) ([]string, pglogrepl.LSN) {
	t.Helper()
	phantoms := insertRows(t, pg, n, "phantom")
	waitKafka(t, broker, union(published, phantoms), p, 30*time.Second)
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return phantoms, serverLSN(t, pg)
}

// stopsOnPhantoms starts walstream on url and checks that it stops, its
// log saying says, with Kafka holding the n events published before.
func stopsOnPhantoms(t *testing.T, url, broker string, n int, says ...string) {
	t.Helper()
	out := waitExit(t, testenv.StartWalstream(t, binary, runArgs(url, broker)), 60*time.Second)
	wantIn(t, "the log", out, says...)
	if got := kafkaIDs(t, broker); len(got) != n {
		t.Fatalf("Kafka holds %d events after the stop, want the %d published before", len(got), n)
	}
}

// streamLater starts walstream on url with extra arguments, inserts n
// rows on pg once it streams, and waits until Kafka holds them with those
// published before, and a second more for anything else walstream would
// publish. It returns walstream and the ids Kafka should hold.
func streamLater(t *testing.T, pg *testenv.Postgres, url, broker string, published map[string]bool, n int, extra ...string) (*testenv.Process, map[string]bool) {
	t.Helper()
	p := testenv.StartWalstream(t, binary, runArgs(url, broker, extra...))
	testenv.WaitStreaming(t, p, 60*time.Second)
	want := maps.Clone(published)
	for _, id := range insertRows(t, pg, n, "later") {
		want[id] = true
	}
	waitKafka(t, broker, want, p, 30*time.Second)
	time.Sleep(time.Second)
	return p, want
}
