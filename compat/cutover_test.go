package compat

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

var cutoverRuns = flag.Int("cutover.runs", 1, "runs of each cutover case, each stopping Debezium at another random moment")

// How a cutover case stops Debezium, and where walstream reads its offset.
type (
	stopHow  int
	readFrom int
)

const (
	// sigterm stops the worker cleanly: its tasks store their last
	// offsets.
	sigterm stopHow = iota
	// sigkill kills the worker: its last stored offset is the last flush's.
	sigkill
	// sigkillMidFlush kills a standalone worker and leaves its offsets
	// file as a kill in the middle of a flush does, which rewrites the
	// file in place: its stream header alone (the clean-clone run that
	// found it had it so), every offset lost.
	sigkillMidFlush
	// restStop stops the connector through the REST API (KIP-875), the
	// worker going on.
	restStop
	// restDelete deletes the connector, as MSK Connect, which has no way
	// to stop one, does; its offsets stay in the offsets topic.
	restDelete
)

const (
	fromFile  readFrom = iota // the standalone worker's offsets file
	fromREST                  // the REST API
	fromSaved                 // the REST answer, saved to a file
	fromTopic                 // the distributed worker's offsets topic
)

// cutoverCase is Debezium streaming under load, stopped at a random
// moment, and walstream taking over its slot.
type cutoverCase struct {
	name string
	mode testenv.ConnectMode
	stop stopHow
	from readFrom
	// again, after the first kill, starts the worker again, as a
	// supervisor would, and kills it once more: a standalone worker then
	// publishes again what it had published past its stored offset.
	again bool
	// rollback, once walstream has streamed a while, stops it, moves the
	// stopped connector's offset to the slot's position and resumes it, as
	// the runbook's way back.
	rollback bool
	// recreate takes the way back MSK Connect leaves, which cannot move a
	// connector's offset: the connector is created again under another
	// name, which has no stored offset, so that Debezium starts where its
	// slot is.
	recreate bool
	// again2, once Debezium has streamed a while after the rollback,
	// stops it as the first time and starts walstream as at the first
	// cutover: a second cutover, from the offset Debezium stored since.
	again2 bool
	// checkStop checks the stop without Kafka Connect's REST API, as a
	// GitOps pipeline does after committing the KafkaConnector's state:
	// stopped: while Debezium streams, walstream refuses to take over
	// naming the connector's slot, and walstream status reports the slot
	// held and the connector RUNNING in the worker's status topic; once
	// stopped, the slot free and the connector STOPPED.
	checkStop bool
	// ci runs the case in make test.
	ci bool
}

var cutoverCases = []cutoverCase{
	{name: "standalone_killed", mode: testenv.ConnectStandalone, stop: sigkill, from: fromFile, ci: true},
	{name: "standalone_killed_mid_flush", mode: testenv.ConnectStandalone, stop: sigkillMidFlush, from: fromFile, ci: true},
	{name: "distributed_rest_stop", mode: testenv.ConnectDistributed, stop: restStop, from: fromREST, checkStop: true, ci: true},
	{name: "standalone_sigterm", mode: testenv.ConnectStandalone, stop: sigterm, from: fromFile},
	{name: "standalone_rest_stop_saved", mode: testenv.ConnectStandalone, stop: restStop, from: fromSaved},
	{name: "distributed_killed", mode: testenv.ConnectDistributed, stop: sigkill, from: fromTopic},
	{name: "distributed_sigterm", mode: testenv.ConnectDistributed, stop: sigterm, from: fromTopic},
	{name: "standalone_killed_twice", mode: testenv.ConnectStandalone, stop: sigkill, from: fromFile, again: true},
	{name: "distributed_killed_twice", mode: testenv.ConnectDistributed, stop: sigkill, from: fromTopic, again: true},
	{name: "standalone_rollback", mode: testenv.ConnectStandalone, stop: restStop, from: fromREST, rollback: true},
	{name: "distributed_rollback", mode: testenv.ConnectDistributed, stop: restStop, from: fromTopic, rollback: true},
	// Strimzi's way: stopped (spec.state: stopped), the offset listed to
	// a ConfigMap (a saved REST answer), back by altering the offset.
	{name: "distributed_second_cutover_saved", mode: testenv.ConnectDistributed, stop: restStop, from: fromSaved, rollback: true, again2: true},
	// MSK Connect's: deleted, the offsets topic read, back by a connector
	// created again under another name.
	{name: "distributed_second_cutover_deleted", mode: testenv.ConnectDistributed, stop: restDelete, from: fromTopic, rollback: true, recreate: true, again2: true},
}

// TestCutover runs Debezium under load, stops it at a random moment,
// cleanly or by killing its worker, and starts walstream on its slot from
// its stored offset: every committed row must be in Kafka, and walstream
// must publish nothing Debezium had published. Debezium's own duplicates
// (it publishes at least once) are counted apart and logged.
func TestCutover(t *testing.T) {
	t.Cleanup(func() { t.Logf("cutover runs:\n%s", &cutoverResults) })
	for _, c := range cutoverCases {
		t.Run(c.name, func(t *testing.T) {
			if !c.ci && !*all {
				t.Skip("make compat and make cutover run it (-compat.all)")
			}
			e := sharedEnv(t)
			for run := 1; run <= *cutoverRuns; run++ {
				e.cutover(t, c, run)
			}
		})
	}
}

// cutoverTopics are the aggregate types the load writes, one topic each.
var cutoverTopics = []string{"a", "b", "c"}

// cutover runs one case once.
func (e *env) cutover(t *testing.T, c cutoverCase, run int) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	id := fmt.Sprintf("cut_%s_%d", c.name, run)
	n := names{id: id, schema: "c_" + id, table: "c_" + id + ".outbox"}
	t.Logf("%s: seed %d", id, seed)

	props := map[string]string{}
	switch c.mode {
	case testenv.ConnectStandalone:
		// Offsets flushed every 5 s, not the harness's 1 s: a killed
		// worker's stored offset then trails what it published by seconds
		// of events, which walstream must find in Kafka.
		props["offset.flush.interval.ms"] = "5000"
	case testenv.ConnectDistributed:
		// A group and topics of the run's own: a worker of another run
		// must not take its tasks.
		props["group.id"] = id
		for topic, name := range map[string]string{"config": "configs", "offset": "offsets", "status": "status"} {
			props[topic+".storage.topic"] = id + "-" + name
		}
	}
	w := testenv.StartConnect(t, testenv.ConnectConfig{Mode: c.mode, Kafka: e.kafka.Addr(), Props: props})
	defer w.Close()
	conn, err := pgx.Connect(ctx, e.pg.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{"CREATE SCHEMA " + n.schema,
		fmt.Sprintf(`CREATE TABLE %s (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregatetype text NOT NULL,
			aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL)`, n.table)} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var topics []string
	for _, a := range cutoverTopics {
		topics = append(topics, "outbox.event."+id+"_"+a)
	}
	if err := createTopics(ctx, e.kafka.Addr(), 3, topics...); err != nil {
		t.Fatal(err)
	}
	slot := "dbz_" + id
	cfg := w.DebeziumConnector(e.pg, "postgres", id, slot, slot, n.table)
	for k, v := range stringConverters {
		cfg[k] = v
	}
	if c.mode == testenv.ConnectDistributed {
		// A killed task's open transaction is aborted after this, not the
		// producer's default minute, so that the case does not wait for it.
		cfg["producer.override.transaction.timeout.ms"] = "10000"
	}
	defer dropSlots(t, conn, []string{slot})
	if err := w.CreateConnector(ctx, id, cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitStreaming(ctx, id, 0, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	// The load: one writer, so that commit order is the order of seq,
	// transactions of 1 to 20 rows across three topics and 16 keys.
	l := &load{table: n.table, id: id, rng: rand.New(rand.NewPCG(uint64(seed), 1))}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		loadErr = l.run(loadCtx, e.pg.URL("postgres", "postgres"))
	}()
	defer func() { stopLoad(); wg.Wait() }()

	after := 2*time.Second + time.Duration(rng.Int64N(int64(6*time.Second)))
	time.Sleep(after)
	// streamed counts Debezium's starts, by its topic.prefix, which a
	// deleted connector's name no longer tells.
	streamed := w.Streamed(id)
	path := writeConnector(t, JSON, id, cfg)
	args := func(source string) []string {
		return []string{"run", "--config", path, "--kafka-brokers", e.kafka.Addr(), "--from-debezium-offset", source,
			"--http-addr", "", "--status-interval", "1s", "--idle-interval", "500ms", "--log-level", "debug"}
	}
	if c.checkStop {
		e.refusedWhileStreaming(ctx, t, args, path, id, slot)
	}
	e.stopDebezium(ctx, t, w, c, id, slot)
	if c.checkStop {
		e.checkStopped(ctx, t, path, id)
	}
	// name is the connector Debezium runs as, which a rollback that
	// creates it again changes.
	name := id
	if c.again {
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.WaitStreaming(ctx, id, 0, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second + time.Duration(rng.Int64N(int64(3*time.Second))))
		e.stopDebezium(ctx, t, w, c, id, slot)
	}
	t.Logf("%s: Debezium (%s) stopped %s after it streamed, at row %d", id, c.mode, after.Round(time.Millisecond), l.rows.Load())
	mark, err := endOffsets(ctx, e.kafka.Addr(), topics)
	if err != nil {
		t.Fatal(err)
	}
	source := e.offsetSource(ctx, t, w, c, id, id)
	time.Sleep(500 * time.Millisecond) // rows committed while nothing streams

	p := testenv.StartWalstream(t, e.bin, args(source))
	refused := ""
	if err := waitStreamingOrExit(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Exited() {
		// A killed worker may have confirmed to its slot past its last
		// stored offset: walstream refuses, naming both. The runbook's way
		// on: start the connector again and stop it cleanly.
		// A worker killed before its first offset flush stored none.
		refused = lastLines(p.Log(), 1)
		if c.stop != sigkill && c.stop != sigkillMidFlush || !slotAhead.MatchString(refused) && !strings.Contains(refused, "no source offset stored for the connector") {
			t.Fatalf("walstream stopped:\n%s", p.LastLines(20))
		}
		if c.stop == sigkillMidFlush && !strings.Contains(refused, "connect.offsets is cut short (4 bytes)") {
			t.Fatalf("walstream refused, not naming the offsets file cut short:\n%s", p.LastLines(20))
		}
		t.Logf("%s: walstream refused, as the runbook says: %s", id, refused)
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.WaitStreaming(ctx, id, 0, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		c.stop = sigterm
		if c.from == fromREST {
			c.stop = restStop
		}
		e.stopDebezium(ctx, t, w, c, id, slot)
		if mark, err = endOffsets(ctx, e.kafka.Addr(), topics); err != nil {
			t.Fatal(err)
		}
		p = testenv.StartWalstream(t, e.bin, args(e.offsetSource(ctx, t, w, c, id, id)))
		if err := waitStreamingOrExit(ctx, p); err != nil {
			t.Fatal(err)
		}
		if p.Exited() {
			t.Fatalf("walstream stopped after the connector stopped cleanly:\n%s", p.LastLines(20))
		}
	}
	if c.stop == sigkillMidFlush && refused == "" {
		t.Fatal("walstream took over from an offsets file holding no offset")
	}
	time.Sleep(2 * time.Second) // rows committed while walstream streams
	marks := []map[string]map[int32]int64{mark}
	if c.rollback {
		// The way back: walstream stopped cleanly (it confirms what Kafka
		// committed), the connector started again from the slot.
		if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		back, err := endOffsets(ctx, e.kafka.Addr(), topics)
		if err != nil {
			t.Fatal(err)
		}
		marks = append(marks, back)
		if !c.recreate {
			streamed = w.Streamed(id)
		}
		if c.recreate {
			// No offset under the new name: Debezium starts where its slot
			// is, which walstream confirmed.
			name = id + "_back"
			err = w.CreateConnector(ctx, name, cfg)
		} else {
			// Debezium refuses to start from an offset behind its slot's
			// position ("no longer available on the server"): the way back
			// moves the offset to where walstream stopped.
			confirmed, cerr := e.pg.SlotConfirmed(ctx, slot)
			if cerr != nil {
				t.Fatal(cerr)
			}
			lsn := json.Number(strconv.FormatUint(uint64(confirmed), 10))
			err = w.AlterOffsets(ctx, id, []testenv.ConnectOffset{{Partition: map[string]any{"server": id},
				Offset: map[string]any{"lsn": lsn, "lsn_proc": lsn, "lsn_commit": lsn, "ts_usec": time.Now().UnixMicro()}}})
			if err == nil {
				err = w.ResumeConnector(ctx, id)
			}
		}
		if err == nil {
			err = w.WaitStreaming(ctx, name, streamed, 2*time.Minute)
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
	}
	if c.again2 {
		// The second cutover: Debezium stopped again, and walstream started
		// as at the first, from where Debezium's offset is now.
		e.stopDebezium(ctx, t, w, c, name, slot)
		again, err := endOffsets(ctx, e.kafka.Addr(), topics)
		if err != nil {
			t.Fatal(err)
		}
		marks = append(marks, again)
		p = testenv.StartWalstream(t, e.bin, append(args(e.offsetSource(ctx, t, w, c, id, name)), "--debezium-connector", name))
		if err := waitStreamingOrExit(ctx, p); err != nil {
			t.Fatal(err)
		}
		if p.Exited() || !strings.Contains(p.Log(), "Debezium's offset is past this stream's checkpoint") {
			t.Fatalf("walstream did not take over again:\n%s", p.LastLines(30))
		}
		time.Sleep(2 * time.Second) // rows committed while walstream streams again
	}
	stopLoad()
	wg.Wait()
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	end, err := e.pg.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.rollback && !c.again2 {
		if err := waitPublished(ctx, conn, n.table, e.kafka.Addr(), topics); err != nil {
			t.Fatalf("%v\n%s", err, w.LastLines(30))
		}
	} else {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if lsn, err := e.pg.SlotConfirmed(ctx, slot); err == nil && lsn >= end {
				break
			}
			if p.Exited() {
				t.Fatalf("walstream exited:\n%s", p.LastLines(30))
			}
			if time.Now().After(deadline) {
				t.Fatalf("walstream did not confirm %s within 2 minutes:\n%s", end, p.LastLines(30))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	w.Close() // before its slot is dropped
	r, err := e.checkCutover(ctx, conn, n.table, topics, marks)
	if err != nil {
		t.Fatal(err)
	}
	r.skipped = skippedByWalstream(p.Log())
	t.Logf("%s: %s", id, r)
	if r.missing > 0 || r.walstreamDups() > 0 || r.outOfOrder > 0 {
		t.Errorf("%s: %d rows missing, %d duplicates by walstream, %d keys out of order; examples: %s", id, r.missing, r.walstreamDups(), r.outOfOrder, strings.Join(r.examples, "; "))
	}
	if r.skipped == 0 && r.records[0] > 0 {
		t.Logf("%s: walstream found no event Debezium had published past its offset", id)
	}
	why := "no"
	switch {
	case slotAhead.MatchString(refused):
		why = "yes, the slot was ahead of the offset"
	case refused != "":
		why = "yes, no offset stored"
	}
	cutoverResults.add(fmt.Sprintf("%s run %d (Debezium stopped %s in): %s; walstream refused first: %s", c.name, run, after.Round(time.Millisecond), r, why))
}

// cutoverResults are every run's results, logged together at the end of
// TestCutover.
var cutoverResults results

type results struct {
	mu    sync.Mutex
	lines []string
}

func (rs *results) add(line string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.lines = append(rs.lines, line)
}

func (rs *results) String() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return strings.Join(rs.lines, "\n")
}

// slotAhead is walstream's refusal of a slot ahead of Debezium's offset.
var slotAhead = regexp.MustCompile(`slot is ahead of the checkpoint.*slot confirmed_flush_lsn [0-9A-F]+/[0-9A-F]+, Debezium's offset lsn_commit [0-9A-F]+/[0-9A-F]+`)

// waitStreamingOrExit waits until walstream streams or exits.
func waitStreamingOrExit(ctx context.Context, p *testenv.Process) error {
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(p.Log(), testenv.StreamingLine) {
		if p.Exited() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("walstream did not stream within 2 minutes:\n%s", p.LastLines(30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// stopStatus is what walstream status --json says of Debezium's
// connector, and its exit.
type stopStatus struct {
	Debezium struct {
		TakesOver  bool `json:"takes_over"`
		SlotHolder *struct {
			PID         int32  `json:"pid"`
			Application string `json:"application_name"`
		} `json:"slot_holder"`
		State   string            `json:"state"`
		Tasks   map[string]string `json:"tasks"`
		Stopped bool              `json:"stopped"`
	} `json:"debezium"`
	Problems []string `json:"problems"`
	exit     error
	out      string
}

// connectorStop runs walstream status as a pipeline step checking that
// the connector of case id stopped: the stream's connector config, the
// offsets topic it takes over from, and the worker's status topic.
func (e *env) connectorStop(ctx context.Context, t *testing.T, path, id string) stopStatus {
	t.Helper()
	var r stopStatus
	out, errOut, exit := e.status(ctx, path, id, "--json")
	r.exit, r.out = exit, out+errOut
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("walstream status --json: %v\n%s", err, r.out)
	}
	return r
}

// status runs walstream status on the stream of case id, checking that
// its connector stopped.
func (e *env) status(ctx context.Context, path, id string, more ...string) (stdout, stderr string, exit error) {
	cmd := exec.CommandContext(ctx, e.bin, append([]string{"status", "--config", path, "--kafka-brokers", e.kafka.Addr(),
		"--from-debezium-offset", "kafka:" + id + "-offsets", "--connect-status-topic", id + "-status"}, more...)...)
	cmd.Env = testenv.WalstreamEnv()
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	exit = cmd.Run()
	return out.String(), errOut.String(), exit
}

// refusedWhileStreaming checks, while Debezium streams, that walstream
// refuses to take over from the offsets topic, naming the connector's
// slot and its holder, and that walstream status says the connector has
// not stopped.
func (e *env) refusedWhileStreaming(ctx context.Context, t *testing.T, args func(string) []string, path, id, slot string) {
	t.Helper()
	r := e.connectorStop(ctx, t, path, id)
	d := r.Debezium
	if r.exit == nil || d.Stopped || !d.TakesOver || d.State != "RUNNING" || d.Tasks["0"] != "RUNNING" ||
		d.SlotHolder == nil || d.SlotHolder.Application != "Debezium Streaming" {
		t.Fatalf("walstream status while Debezium streams (exit %v):\n%s\nwant it to fail, naming the slot held by Debezium Streaming and the connector RUNNING", r.exit, r.out)
	}
	text, _, _ := e.status(ctx, path, id)
	if !regexp.MustCompile(`(?m)^  stopped +no$`).MatchString(text) || !strings.Contains(text, "application Debezium Streaming") {
		t.Fatalf("walstream status while Debezium streams:\n%s\nwant it to say the connector has not stopped, naming its slot's holder", text)
	}
	p := testenv.StartWalstream(t, e.bin, args("kafka:"+id+"-offsets"))
	if _, ok := p.Wait(2 * time.Minute); !ok {
		t.Fatalf("walstream took no decision within 2 minutes while Debezium streams:\n%s", p.LastLines(20))
	}
	refused := lastLines(p.Log(), 1)
	for _, want := range []string{"the connector still streams from the slot", fmt.Sprintf(`slot %q is held by pid %d`, slot, d.SlotHolder.PID),
		"application Debezium Streaming", "spec.state: stopped", "walstream status"} {
		if !strings.Contains(refused, want) {
			t.Fatalf("walstream, while Debezium streams, said:\n%s\nwant %q", p.LastLines(20), want)
		}
	}
	t.Logf("%s: while Debezium streams, walstream refused: %s; walstream status:\n%s", id, refused, text)
}

// checkStopped waits until walstream status says the connector stopped:
// its slot free, and STOPPED with no task in the status topic.
func (e *env) checkStopped(ctx context.Context, t *testing.T, path, id string) {
	t.Helper()
	var r stopStatus
	deadline := time.Now().Add(time.Minute)
	for r = e.connectorStop(ctx, t, path, id); r.exit != nil || !r.Debezium.Stopped; r = e.connectorStop(ctx, t, path, id) {
		if time.Now().After(deadline) {
			t.Fatalf("walstream status a minute after the connector stopped (exit %v):\n%s", r.exit, r.out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if d := r.Debezium; d.State != "STOPPED" || len(d.Tasks) > 0 || d.SlotHolder != nil || !d.TakesOver {
		t.Fatalf("walstream status once the connector stopped:\n%s\nwant the connector STOPPED with no task, the slot free, and a takeover to come", r.out)
	}
	t.Logf("%s: once the connector stopped, walstream status: state %s, no task, no other process holding the slot", id, r.Debezium.State)
}

// stopDebezium stops the connector as the case says; slot is its slot.
func (e *env) stopDebezium(ctx context.Context, t *testing.T, w *testenv.Connect, c cutoverCase, name, slot string) {
	t.Helper()
	switch c.stop {
	case sigterm:
		w.Stop(syscall.SIGTERM)
	case sigkill:
		w.Stop(syscall.SIGKILL)
	case sigkillMidFlush:
		w.Stop(syscall.SIGKILL)
		// Java serialization's magic and version, which a flush writes
		// first, at any flush, the first included.
		if err := os.WriteFile(filepath.Join(w.Dir, "connect.offsets"), []byte{0xac, 0xed, 0x00, 0x05}, 0o600); err != nil {
			t.Fatal(err)
		}
	case restStop:
		if err := w.StopConnector(ctx, name, time.Minute); err != nil {
			t.Fatal(err)
		}
	case restDelete:
		if err := w.DeleteConnector(ctx, name); err != nil {
			t.Fatal(err)
		}
		// The delete is answered before the task has stopped, which a
		// takeover refuses to meet ("the connector still streams from the
		// slot"): as the runbook says, wait until the slot is free.
		conn, _ := e.pgConn(ctx, t)
		testenv.Eventually(t, time.Minute, "slot "+slot+" free after the connector was deleted", func() bool {
			var active bool
			if err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil {
				t.Fatal(err)
			}
			return !active
		})
	}
}

// offsetSource is --from-debezium-offset as the case reads the offset of
// connector name, on the worker of case id.
func (e *env) offsetSource(ctx context.Context, t *testing.T, w *testenv.Connect, c cutoverCase, id, name string) string {
	t.Helper()
	switch c.from {
	case fromFile:
		return filepath.Join(w.Dir, "connect.offsets")
	case fromREST:
		return w.URL() + "/connectors/" + name
	case fromSaved:
		offsets, err := w.Offsets(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(map[string]any{"offsets": offsets})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "offsets.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return "kafka:" + id + "-offsets"
}

// load writes outbox rows in transactions of 1 to 20 rows, at about 400
// rows a second, until its context ends.
type load struct {
	table, id string
	rng       *rand.Rand
	rows      atomic.Int64
}

func (l *load) run(ctx context.Context, url string) error {
	err := l.write(ctx, url)
	if ctx.Err() != nil {
		// Stopped: a commit cut short may or may not have happened; the
		// table says which rows there are.
		return nil
	}
	return err
}

func (l *load) write(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	sizes := []int{1, 1, 1, 1, 2, 3, 5, 20}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var seq int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		size := sizes[l.rng.IntN(len(sizes))]
		batch := &pgx.Batch{}
		for range size {
			seq++
			batch.Queue(fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'Seq', jsonb_build_object('seq', $3::bigint))`, l.table),
				l.id+"_"+cutoverTopics[l.rng.IntN(len(cutoverTopics))], fmt.Sprintf("k%d", l.rng.IntN(16)), seq)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			_ = tx.Rollback(context.Background())
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		l.rows.Add(int64(size))
	}
}

// createTopics creates topics with partitions partitions.
func createTopics(ctx context.Context, broker string, partitions int32, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, 1, nil, topics...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("creating topics %v: %w", topics, err)
	}
	return nil
}

// endOffsets are the topics' high watermarks: records below them were
// written before walstream started.
func endOffsets(ctx context.Context, broker string, topics []string) (map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	out := make(map[string]map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if out[o.Topic] == nil {
			out[o.Topic] = make(map[int32]int64)
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out, nil
}

// cutoverResult is what a cutover left in Kafka: Debezium's records, then
// walstream's, then, after a rollback, Debezium's again, and after a
// second cutover walstream's again: even parts are Debezium's, odd ones
// walstream's.
type cutoverResult struct {
	rows int
	// records and dups count each part's records and those of an event
	// already in Kafka (from an earlier part, or earlier in the same).
	records, dups []int
	missing       int // committed rows in no record
	outOfOrder    int // keys whose events are not in commit order
	skipped       int // events walstream found already published
	examples      []string
}

func (r cutoverResult) String() string {
	s := fmt.Sprintf("%d rows; Debezium wrote %d records (%d duplicates of its own), walstream %d (%d duplicates)",
		r.rows, r.records[0], r.dups[0], r.records[1], r.dups[1])
	if len(r.records) > 2 {
		s += fmt.Sprintf("; after the rollback Debezium wrote %d (%d duplicates)", r.records[2], r.dups[2])
	}
	if len(r.records) > 3 {
		s += fmt.Sprintf("; after the second cutover walstream wrote %d (%d duplicates)", r.records[3], r.dups[3])
	}
	return s + fmt.Sprintf("; walstream's last start skipped %d events Debezium had published; %d missing, %d keys out of order", r.skipped, r.missing, r.outOfOrder)
}

// walstreamDups are the records walstream wrote of events already in
// Kafka.
func (r cutoverResult) walstreamDups() int {
	n := 0
	for part := 1; part < len(r.dups); part += 2 {
		n += r.dups[part]
	}
	return n
}

// checkCutover reads the topics read_committed and checks them against
// the table. marks split each partition into parts: records below the
// first mark are Debezium's, then walstream's, then Debezium's again.
func (e *env) checkCutover(ctx context.Context, conn *pgx.Conn, table string, topics []string, marks []map[string]map[int32]int64) (cutoverResult, error) {
	r := cutoverResult{records: make([]int, len(marks)+1), dups: make([]int, len(marks)+1)}
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT id::text FROM %s", table))
	if err != nil {
		return r, err
	}
	committed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return r, err
	}
	r.rows = len(committed)
	seen := make(map[string]int)
	for _, topic := range topics {
		recs, err := testenv.ReadRecords(ctx, e.kafka.Addr(), topic)
		if err != nil {
			return r, err
		}
		// Per key, the seq of each event's first record must grow: one
		// writer commits them in seq order.
		last := make(map[string]int64)
		for _, rec := range recs {
			part := 0
			for part < len(marks) && rec.Offset >= marks[part][topic][rec.Partition] {
				part++
			}
			id := rec.Header("id")
			r.records[part]++
			seen[id]++
			if seen[id] > 1 {
				r.dups[part]++
				if part%2 == 1 {
					r.examples = append(r.examples, fmt.Sprintf("event %s again at %s/%d offset %d (by walstream)", id, topic, rec.Partition, rec.Offset))
				}
				continue
			}
			var v struct{ Seq int64 }
			if err := json.Unmarshal([]byte(rec.Value), &v); err != nil {
				return r, fmt.Errorf("record value %q: %w", rec.Value, err)
			}
			if v.Seq <= last[rec.Key] {
				r.outOfOrder++
				r.examples = append(r.examples, fmt.Sprintf("key %s: seq %d after %d at %s/%d offset %d", rec.Key, v.Seq, last[rec.Key], topic, rec.Partition, rec.Offset))
			}
			last[rec.Key] = v.Seq
		}
	}
	for _, id := range committed {
		if seen[id] == 0 {
			r.missing++
			if r.missing <= 5 {
				r.examples = append(r.examples, "row "+id+" in no record")
			}
		}
	}
	if len(seen) != len(committed) {
		r.examples = append(r.examples, fmt.Sprintf("%d events in Kafka, %d rows", len(seen), len(committed)))
	}
	return r, nil
}

// waitPublished waits up to two minutes until every row of table is in
// one of topics.
func waitPublished(ctx context.Context, conn *pgx.Conn, table, broker string, topics []string) error {
	var rows int
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s", table)).Scan(&rows); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// A reader gives up on a topic with a transaction open for 30 s:
		// Debezium's, while it catches up; the deadline decides.
		ids := make(map[string]bool)
		var err error
		for _, topic := range topics {
			var recs []testenv.Record
			if recs, err = testenv.ReadRecords(ctx, broker, topic); err != nil {
				break
			}
			for _, r := range recs {
				ids[r.Header("id")] = true
			}
		}
		if err == nil && len(ids) >= rows {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d rows published after two minutes (%v)", len(ids), rows, err)
		}
		time.Sleep(time.Second)
	}
}

// skippedPattern is walstream's line at the end of a takeover.
var skippedPattern = regexp.MustCompile(`past the takeover from Debezium.*events_debezium_had_published=(\d+)`)

func skippedByWalstream(log string) int {
	m := skippedPattern.FindStringSubmatch(log)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
