package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// fleetStreams is how many streams TestFleetAcrossProcesses runs: a
// database each, with its own slot, outbox and topics.
const fleetStreams = 12

// TestFleetAcrossProcesses: twelve streams, one config, three processes
// sharing them by their fleet's Kafka group, under a light load. The
// streams spread 4/4/4. A process killed (SIGKILL) loses its streams to the
// others once the session timeout (10 s) has passed; one stopped
// (SIGTERM) leaves the group and its streams move at once; a new process
// takes its share. Each move is timed from the signal, or the start, to
// every moved stream streaming in another process, and held to the bounds
// of docs/operations.md (A fleet across processes) with a margin for a
// loaded machine. /readyz of a process answers 200 for a stream another
// member runs, naming it; `walstream status` lists the members. At the
// end every row of every stream is in Kafka exactly once, read
// read_committed.
func TestFleetAcrossProcesses(t *testing.T) {
	t.Parallel()
	// A slot and a walsender per stream, and room for a stream's new owner
	// to connect while the old one lets go.
	e := newSharedEnv(t, testenv.Settings("max_replication_slots = 20", "max_wal_senders = 20"))
	var dbs []string
	for i := 1; i <= fleetStreams; i++ {
		db := fmt.Sprintf("s%02d", i)
		e.pg.Exec("postgres", "CREATE DATABASE "+db)
		prepared(e, db, db) // the slot first: the load begins before walstream
		dbs = append(dbs, db)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kafka-brokers: %s\nhttp-addr: 127.0.0.1:0\nstatus-interval: 1s\nidle-interval: 500ms\ncommit-timeout: 10s\n", e.broker)
	fmt.Fprintf(&b, "checkpoint-topic: %s\ndlq-topic: %s\nstreams:\n", e.topic("walstream.checkpoints"), e.topic("walstream.dlq"))
	for _, db := range dbs {
		fmt.Fprintf(&b, "  - stream: %s\n    pg-url: %s\n    slot: %s\n    checkpoint-key: %s\n    transactional-id: %swalstream-%s\n    outbox:\n      route.topic.replacement: %s%s.${routedByValue}\n",
			db, e.pg.URL("postgres", db), db, db, e.ns, db, e.ns, db)
	}
	config := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(config, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	type member struct {
		*proc
		addr string
	}
	start := func() *member {
		p := &proc{testenv.StartWalstream(t, binary, []string{"run", "--config", config})}
		return &member{proc: p, addr: p.httpAddr(t)}
	}

	// A light load: a transaction of three rows every 20 ms, into the
	// streams in turn.
	seqs := make(map[string]*int)
	for _, db := range dbs {
		seqs[db] = new(int)
	}
	stop := make(chan struct{})
	var loading sync.WaitGroup
	loading.Add(1)
	go func() {
		defer loading.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			db := dbs[i%len(dbs)]
			e.insertTxIn(db, "Order", 3, 2, seqs[db], false)
		}
	}()
	stopLoad := sync.OnceFunc(func() { close(stop); loading.Wait() })
	defer stopLoad()

	ms := []*member{start(), start(), start()}
	// balanced waits until each stream streams in exactly one of live,
	// each running as many as the others, give or take one.
	balanced := func(what string, within time.Duration, live ...*member) map[*member][]string {
		var by map[*member][]string
		testenv.Eventually(t, within, what, func() bool {
			by = make(map[*member][]string)
			var all []string
			lo, hi := fleetStreams, 0
			for _, m := range live {
				if m.Exited() {
					t.Fatalf("walstream exited: %v\n%s", m.Err(), m.LastLines(20))
				}
				by[m] = streamingIn(m.addr)
				all = append(all, by[m]...)
				lo, hi = min(lo, len(by[m])), max(hi, len(by[m]))
			}
			slices.Sort(all)
			return slices.Equal(all, dbs) && hi-lo <= 1
		})
		return by
	}
	by := balanced("12 streams on 3 processes, 4 each", 90*time.Second, ms...)
	for _, m := range ms {
		if len(by[m]) != 4 {
			t.Fatalf("a process streams %v, want 4 streams", by[m])
		}
	}

	// What each process says: the members, its streams, where the others
	// stream.
	a, other := ms[0], by[ms[1]][0]
	if code, body := httpGet(a.addr, "/readyz?stream="+other); code != 200 || !strings.HasPrefix(body, "assigned to member walstream-") {
		t.Errorf("/readyz?stream=%s on a process that does not stream it = %d %q, want 200 naming the member", other, code, body)
	}
	if got := metric(t, a.addr, "walstream_fleet_members"); got != 3 {
		t.Errorf("walstream_fleet_members = %v, want 3", got)
	}
	if got := metric(t, a.addr, "walstream_fleet_assigned_streams"); got != 4 {
		t.Errorf("walstream_fleet_assigned_streams = %v, want 4", got)
	}
	out, _, err := runCLI(t, "status", "--config", config, "--stream", other, "--json")
	var st statusReport
	if jerr := json.Unmarshal([]byte(out), &st); jerr != nil || err != nil || st.Fleet == nil || len(st.Fleet.Members) != 3 ||
		st.Fleet.MemberID == "" || !strings.HasPrefix(st.Fleet.Group, "walstream-fleet-") {
		t.Errorf("walstream status --json: %v, %v: fleet %+v", err, jerr, st.Fleet)
	}
	if text, _, _ := runCLI(t, "status", "--config", config, "--stream", other); !regexp.MustCompile(`fleet +group walstream-fleet-\S+: Stable, generation \d+, 3 members`).MatchString(text) ||
		!strings.Contains(text, "run by ") {
		t.Errorf("walstream status lists no fleet:\n%s", text)
	}

	// moved waits until every stream of streams streams in one of live,
	// and returns how long after since that was.
	moved := func(what string, within time.Duration, since time.Time, streams []string, live ...*member) time.Duration {
		testenv.Eventually(t, within, what, func() bool {
			var all []string
			for _, m := range live {
				all = append(all, streamingIn(m.addr)...)
			}
			return !slices.ContainsFunc(streams, func(s string) bool { return !slices.Contains(all, s) })
		})
		took := time.Since(since)
		t.Logf("%s: %s", what, took.Round(10*time.Millisecond))
		return took
	}

	// SIGKILL: the session timeout, 10 s, and the time to start streaming.
	killed := ms[2]
	at := time.Now()
	killed.Kill()
	if took := moved("the 4 streams of a killed process streaming in the others", 60*time.Second, at, by[killed], ms[0], ms[1]); took > 25*time.Second {
		t.Errorf("the streams of a killed process moved in %s, want within 15 s and a margin", took)
	}
	by = balanced("12 streams on 2 processes, 6 each", 30*time.Second, ms[0], ms[1])

	// SIGTERM: the process leaves the group as it releases its streams.
	termed := ms[1]
	at = time.Now()
	termed.Signal(syscall.SIGTERM)
	if took := moved("the 6 streams of a stopped process streaming in the other", 60*time.Second, at, by[termed], ms[0]); took > 10*time.Second {
		t.Errorf("the streams of a stopped process moved in %s, want within 5 s and a margin", took)
	}
	if err := termed.wait(t, 30*time.Second); err != nil {
		t.Errorf("the stopped process exited with %v", err)
	}
	if log := termed.Log(); !strings.Contains(log, "left the fleet's group") {
		t.Error("the stopped process did not leave the group")
	}

	// A new process takes its share.
	at = time.Now()
	n := start()
	testenv.Eventually(t, 60*time.Second, "the new process streaming its share", func() bool { return len(streamingIn(n.addr)) == fleetStreams/2 })
	took := time.Since(at)
	t.Logf("a new process streaming its 6 streams: %s after it started", took.Round(10*time.Millisecond))
	if took > 25*time.Second {
		t.Errorf("a new process took its share in %s, want within 15 s and a margin", took)
	}
	balanced("12 streams on 2 processes again", 30*time.Second, ms[0], n)

	// Every row of every stream once.
	stopLoad()
	for _, db := range dbs {
		e.waitConfirmed(db, e.currentLSN(), 60*time.Second, nil)
	}
	for _, db := range dbs {
		e.checkExactlyOnceIn(db, e.kcat(db+".Order"), db+".")
	}
	rows := 0
	for _, n := range seqs {
		rows += *n
	}
	t.Logf("%d rows in %d streams, each once", rows, fleetStreams)
}

// streamingLine is walstream_streaming of one stream at 1.
var streamingLine = regexp.MustCompile(`(?m)^walstream_streaming\{[^}]*stream="([^"]+)"[^}]*\} 1$`)

// streamingIn lists the streams a process at addr streams now, by its
// metrics; none when it does not answer.
func streamingIn(addr string) []string {
	var out []string
	for _, m := range streamingLine.FindAllStringSubmatch(httpBody(addr, "/metrics"), -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}
