package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

var (
	flagDuration = flag.Duration("chaos.duration", 60*time.Second, "how long load and faults run; 5m or more is the long variant (more faults per round, rounds until the time is up)")
	flagReport   = flag.String("chaos.report", "", "path of the JSON report (default: chaos-report.json in the run's temp dir)")
	flagStreams  = flag.Int("chaos.streams", 4, "streams: databases, each with its own slot, outbox, topics and load, sharing Postgres, Kafka and the checkpoint topic")
	flagShared   = flag.Int("chaos.shared", 2, "streams the last walstream process carries (a config file's streams: list); every other stream has a process of its own")
	flagWriters  = flag.Int("chaos.writers", 2, "concurrent writers per stream")
	flagRate     = flag.Float64("chaos.rate", 0, "rows per second over all writers of all streams (default: 300 short, 600 long)")
	flagSeed     = flag.Uint64("chaos.seed", 0, "random seed (default: from the clock)")
	flagMinRows  = flag.Int("chaos.min-rows", 0, "fail unless at least this many rows committed, over all streams")
	flagMaxBatch = flag.Int("chaos.max-batch-events", 250, "walstream --max-batch-events; larger writer transactions are split over Kafka transactions")
	flagBinary   = flag.String("chaos.walstream", "", "walstream binary built with -tags walstream_faults (default: build ../cmd/walstream)")
	flagKeep     = flag.Bool("chaos.keep", false, "keep the logs of a passing run (a long run always keeps them)")
	flagSkip     = flag.String("chaos.skip", "", "comma-separated fault kinds to leave out, e.g. broker-restart-sigkill")
	flagOutbox   = flag.String("chaos.outbox", "partitioned", "the outbox table: partitioned (by time, testdata/outbox-partitioned.sql; partitions are attached and dropped as a fault) or plain (testdata/outbox.sql)")
	flagBroker   = flag.String("chaos.broker", brokerKafka, "the broker: kafka (Apache Kafka 4.x, transaction version 2) or devbroker (kfake, cmd/devbroker)")
	flagNodes    = flag.Int("chaos.kafka-nodes", 1, "Kafka brokers: 1 plays the broker restarts and network faults; 3 the cluster's faults "+
		"(coordinator, leaders and controller killed, two brokers down, one cut off), beside two controller-only nodes")
	flagFleet = flag.Int("chaos.fleet", 0, "walstream processes running one config of every stream, which they share through their fleet's Kafka group, "+
		"with a fleet's faults (kills, pauses past and within the session timeout, leaves and joins, rolling restarts); 0: a process per stream "+
		"but the last -chaos.shared, with the faults of one stream's process (a zombie, a pause mid-commit, a recreated outbox)")
)

// catchUpLimit is how long after the faults stop walstream may take to
// confirm everything written.
const catchUpLimit = 30 * time.Second

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestChaos runs several streams, each its own database, slot, outbox,
// topics, load and walstream, on one Postgres, one Kafka and one
// checkpoint topic, under faults, and checks that every committed outbox
// row of every stream reaches Kafka exactly once, in order per aggregate,
// atomically per transaction, with each slot never confirmed past its
// stream's checkpoint in Kafka nor the server's WAL end.
func TestChaos(t *testing.T) {
	wall := time.Now()
	long := *flagDuration >= 5*time.Minute
	rate := *flagRate
	if rate == 0 {
		rate = map[bool]float64{false: 300, true: 600}[long]
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	if *flagStreams < 1 {
		t.Fatalf("-chaos.streams %d: want 1 or more", *flagStreams)
	}
	skip := make(map[string]bool)
	partitioned := *flagOutbox == "partitioned"
	if !partitioned && *flagOutbox != "plain" {
		t.Fatalf("-chaos.outbox %q: want partitioned or plain", *flagOutbox)
	}
	if !partitioned {
		skip[faultPartitions] = true
	}
	cluster := *flagBroker == brokerKafka && *flagNodes > 1
	fleet := *flagFleet > 0
	if fleet && (*flagFleet < 2 || *flagStreams < 2) {
		t.Fatalf("-chaos.fleet %d with -chaos.streams %d: a fleet is two processes or more sharing two streams or more", *flagFleet, *flagStreams)
	}
	every := slices.Concat(deck(true, false, false, 1, nil), deck(true, true, false, 1, nil), deck(true, false, true, 3, nil), deck(true, true, true, 3, nil))
	for _, k := range strings.FieldsFunc(*flagSkip, func(r rune) bool { return r == ',' }) {
		if !slices.ContainsFunc(every, func(f fault) bool { return f.kind == k }) {
			t.Fatalf("-chaos.skip: unknown fault kind %q", k)
		}
		skip[k] = true
	}
	if _, err := exec.LookPath("kcat"); err != nil {
		testenv.Unavailable(t, "kcat is not installed (apt-get install kcat)")
	}
	dir, err := os.MkdirTemp("", "walstream-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	reportPath := *flagReport
	if reportPath == "" {
		reportPath = filepath.Join(dir, "chaos-report.json")
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs kept in %s", dir)
			return
		}
		// A passing short run keeps only its report; a long one its logs too.
		keep := long || *flagKeep
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if p != reportPath && (!keep || e.IsDir()) {
				os.RemoveAll(p)
			}
		}
		if keep {
			t.Logf("logs kept in %s", dir)
		} else if reportPath != filepath.Join(dir, "chaos-report.json") {
			os.Remove(dir)
		}
	})
	logf := func(format string, args ...any) {
		t.Logf("%7.1fs "+format, append([]any{time.Since(wall).Seconds()}, args...)...)
	}
	carried := fmt.Sprintf("the last %d in one process", *flagShared)
	if fleet {
		carried = fmt.Sprintf("a fleet of %d processes sharing them", *flagFleet)
	}
	logf("seed %d, duration %s, %d streams (%s), %d writers each, at %.0f rows/s in all, %s outbox, logs in %s",
		seed, *flagDuration, *flagStreams, carried, *flagWriters, rate, *flagOutbox, dir)

	wsBin := walstreamBinary(t, *flagBinary)

	pg := testenv.StartPostgres(t, testenv.Settings(
		"logical_decoding_work_mem = '64kB'",
		fmt.Sprintf("wal_sender_timeout = '%ds'", int(walSenderTimeout.Seconds())),
		// Writers see a commit only once its WAL is written, so an
		// immediate restart cannot take back a commit the ledger reported.
		"synchronous_commit = on",
		// A slot and a walsender per stream, and room for a fleet's
		// streams to be taken over while their walsenders time out.
		fmt.Sprintf("max_replication_slots = %d", max(10, 2*(*flagStreams))),
		fmt.Sprintf("max_wal_senders = %d", max(10, 3*(*flagStreams))),
	))
	pgURL := pg.URL("postgres", "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), *flagDuration+10*time.Minute)
	defer cancel()

	px, err := startProxies(fmt.Sprintf("127.0.0.1:%d", pg.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.stop)
	streams := newStreams(*flagStreams, fmt.Sprintf("127.0.0.1:%d", pg.Port), px.pg.Listen)
	for _, st := range streams {
		if err := st.create(ctx, pgURL, outboxDDL(partitioned)); err != nil {
			t.Fatal(err)
		}
	}
	br, err := startBroker(t, ctx, *flagBroker, *flagNodes, dir, px, streams)
	if err != nil {
		testenv.Unavailable(t, "the broker cannot start: %v", err)
	}
	t.Cleanup(br.close)
	cons, err := newConsumer(br.direct, br.dialer(), streams)
	if err != nil {
		t.Fatal(err)
	}
	// The outbox topics exist before walstream starts, as in production
	// (and because the local broker persists a topic it auto-creates only
	// with the next topic change, so a SIGKILL soon after would lose the
	// topic and its records, a broker fault the suite is not about). On
	// Kafka they take the cluster's default replication factor: 3 on three
	// brokers.
	rf := int16(-1)
	if br.kafka == nil {
		rf = 1
	}
	if resp, err := cons.adm.CreateTopics(ctx, 3, rf, nil, outboxTopics(streams)...); err != nil || resp.Error() != nil {
		t.Fatalf("creating the outbox topics: %v", errors.Join(err, resp.Error()))
	}
	var bg sync.WaitGroup
	consCtx, stopCons := context.WithCancel(ctx)
	bg.Add(1)
	go func() { defer bg.Done(); cons.run(consCtx) }()
	t.Cleanup(func() { stopCons(); bg.Wait(); cons.close() })

	common := append([]string{
		"--kafka-brokers", px.kafkaAddrs(),
		"--http-addr", "127.0.0.1:0",
		"--status-interval", "1s",
		"--idle-interval", "500ms",
		"--commit-timeout", commitTimeout.String(),
		"--max-batch-events", fmt.Sprint(*flagMaxBatch),
	}, reemitArgs...)
	var ids atomic.Int64
	var sups []*supervisor
	for _, hosted := range processes(streams, *flagShared, *flagFleet) {
		sup := newSupervisor(wsBin, dir, &ids, common, hosted...)
		sup.fleet = fleet
		t.Cleanup(sup.close)
		sups = append(sups, sup)
		first, err := sup.start("")
		if err != nil {
			t.Fatal(err)
		}
		if !first.streaming(60 * time.Second) {
			t.Fatalf("walstream of %s did not start streaming:\n%s", sup, first.Log())
		}
		logf("walstream #%d streaming %s", first.id, sup)
	}
	logf("Postgres %d, %s at %s, proxies %s and %s", pg.Port, br, br.direct, px.pg.Listen, px.kafkaAddrs())

	for _, st := range streams {
		st.atom = newAtomicity(*flagMaxBatch)
	}
	smp := newSampler(pgURL, cons, streams)
	smpCtx, stopSampler := context.WithCancel(ctx)
	var smpDone sync.WaitGroup
	smpDone.Add(1)
	go func() { defer smpDone.Done(); smp.run(smpCtx, 100*time.Millisecond) }()
	defer func() { stopSampler(); smpDone.Wait() }()

	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadDone sync.WaitGroup
	for i, st := range streams {
		st.load = newLoad(st.url, *flagWriters, rate/float64(len(streams)), *flagMaxBatch, seed+uint64(i)<<32)
		loadDone.Add(1)
		go func() { defer loadDone.Done(); st.load.run(loadCtx) }()
	}
	defer func() { stopLoad(); loadDone.Wait() }()

	// Faults, after a short warm-up; the load runs on until the end.
	until := time.Now().Add(*flagDuration)
	fl := newFaults(&rig{pg: pg, pgURL: pgURL, broker: br, px: px, streams: streams, cons: cons, smp: smp, wsBin: wsBin,
		logf: logf, outboxDDL: outboxDDL(partitioned)}, seed, long, cluster, fleet, skip)
	if fleet {
		settleAt := time.Now()
		if !fl.settled(ctx, 90*time.Second) {
			t.Fatalf("the fleet of %d processes did not stream its %d streams, each once and evenly, within 90 s", *flagFleet, len(streams))
		}
		logf("the fleet streams every stream, evenly, %s after its last process started", time.Since(settleAt).Round(10*time.Millisecond))
	}
	time.Sleep(3 * time.Second)
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); fl.run(ctx, until) }()
	var stuck string
	select {
	case <-faultsDone:
	case <-time.After(time.Until(until) + 4*time.Minute):
		// Every step is bounded; if one is not, say which rather than
		// waiting for the test timeout.
		stuck = fl.injecting()
		logf("fault injection stuck in %s", stuck)
	}
	if d := time.Until(until); d > 0 {
		logf("faults done; load runs %s more", d.Round(time.Second))
		time.Sleep(d)
	}
	stopLoad()
	loadDone.Wait()
	faultsStopped := time.Now()
	var st loadStats
	for _, s := range streams {
		st.add(s.load.snapshot())
	}
	logf("load stopped: %d rows in %d transactions committed", st.RowsCommitted, st.TxCommitted)

	// Catch-up: every slot confirms everything written.
	end, err := pg.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	behind, _ := fl.waitConfirmed(ctx, streams, end, catchUpLimit)
	catchUp := time.Since(faultsStopped)
	logf("slots confirmed %s after %s; behind: %q", end, catchUp.Round(10*time.Millisecond), names(behind))
	unsettled := fleet && !fl.settled(ctx, time.Minute)
	// The re-emit requests made run to their end; the checker judges them.
	reemitWait := time.Now()
	cons.waitReemits(ctx, 2*time.Minute)
	logf("re-emit requests ended %s after the catch-up", time.Since(reemitWait).Round(10*time.Millisecond))
	stopSampler()
	smpDone.Wait()

	// Verdict: everything below is collected, reported, then failed on.
	var failures []string
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	if len(behind) > 0 {
		fail("the slots of %s did not confirm the end of the load (%s) within %s of the faults stopping", names(behind), end, catchUpLimit)
	}
	if unsettled {
		fail("the fleet did not stream every stream once, each process about as many as the others, within a minute of the catch-up")
	}
	for _, sup := range sups {
		switch p := sup.current(); {
		case p == nil:
			fail("no walstream of %s running at the end", sup)
		case slices.ContainsFunc(behind, func(st *stream) bool { return slices.Contains(st.sups, sup) }):
			// A goroutine dump shows where it is stuck.
			stopProc(p, syscall.SIGQUIT, 10*time.Second)
			fail("walstream #%d's goroutine dump (SIGQUIT) is in %s", p.id, p.f.Name())
		default:
			if stopProc(p, syscall.SIGTERM, 30*time.Second); p.Err() != nil {
				fail("walstream #%d of %s did not exit 0 after SIGTERM: %s\n%s", p.id, sup, p.ExitDesc(), p.LastLines(10))
			}
		}
	}
	var unexpected []string
	for _, sup := range sups {
		unexpected = append(unexpected, sup.unexpectedExits()...)
		unexpected = append(unexpected, sup.stoppedStreams()...)
		sup.close()
	}

	// The continuous consumer reads everything up to the final stable offsets.
	lso, complete, err := cons.stableOffsets(ctx)
	if err != nil || !complete || !cons.waitCaughtUp(ctx, lso, time.Minute) {
		fail("the checker's consumer did not reach the final stable offsets (%v, complete %v)", err, complete)
	}
	stopCons()
	smp.finish()

	rep := report{
		Variant: map[bool]string{false: "short", true: "long"}[long], Broker: br.String(), Seed: seed, Fleet: *flagFleet,
		Duration: flagDuration.String(), WallSeconds: time.Since(wall).Seconds(), Load: st,
		FaultsLeftOut: slices.Sorted(maps.Keys(skip)), CrashPointsReached: make(map[string]int),
		SessionRestarts: make(map[string]int), KafkaTxnFailures: make(map[string]int),
		Atomicity: &atomicity{}, Sampler: smp, CatchUpSeconds: catchUp.Seconds(), LogDir: dir,
	}
	for _, s := range streams {
		sr := s.verdict(ctx, t, br.direct, cons, fl.gapIDs(s), fail)
		sr.Faults = fl.report().ByStream[s.name]
		rep.Streams = append(rep.Streams, sr)
		rep.Verdict.add(sr.Verdict, s.name)
		rep.Reemits.add(sr.Reemits, s.name)
		rep.Atomicity.add(s.atom)
		rep.Checkpoints.add(s.cp)
		if s.cp.Samples < 100 || s.atom.Snapshots < 100 || s.atom.Settled < 10 {
			fail("%s: only %d checkpoint samples (%d skipped) and %d atomicity snapshots (%d settled)", s.name, s.cp.Samples, s.cp.Skipped, s.atom.Snapshots, s.atom.Settled)
		}
	}
	if rep.Reemits.Done == 0 {
		fail("no re-emit request ran to its end (%d made, %d cancelled, %d failed, %d never met)", rep.Reemits.Requests, rep.Reemits.Cancelled, rep.Reemits.Failed, rep.Reemits.NeverMet)
	}
	// walstream has transactions over logical_decoding_work_mem streamed
	// in progress; Postgres still spills what it decodes before the
	// position a restarted session confirmed.
	if smp.StreamTxns == 0 {
		fail("Postgres streamed no transaction in progress; logical_decoding_work_mem is not exceeded, or streaming is off")
	}
	if st.TxSavepoint == 0 || st.TxWithDeletes == 0 || st.TxRolledBack == 0 || st.TxSplit == 0 {
		fail("the load lacks a kind of transaction: %+v", st)
	}
	for _, u := range unexpected {
		fail("%s", u)
	}
	if stuck != "" {
		fail("fault injection stuck in %s", stuck)
	}
	fr := fl.report()
	rep.Faults = fr
	for _, e := range fr.Errors {
		fail("fault: %s", e)
	}
	for _, ft := range deck(long, cluster, fleet, len(sups), skip) {
		if fr.Counts[ft.kind] == 0 {
			fail("fault %s was never injected", ft.kind)
		}
	}
	held := heldBy(fr.Holds)
	for _, kind := range []string{faultPause, faultForeign} {
		if fr.Counts[kind] > 0 && held[kind] == 0 {
			fail("no %s fault held the checkpoint partition", kind)
		}
	}
	for _, sup := range sups {
		crashes, procs := sup.stats()
		for k, n := range crashes {
			rep.CrashPointsReached[k] += n
		}
		rep.WalstreamProcesses += procs
		logged, scraped := sup.replaysSkipped()
		rep.ReplaysSkippedLogged += logged
		rep.ReplaysSkippedScraped += scraped
		for k, n := range sup.sessionRestarts(nil) {
			rep.SessionRestarts[k] += n
		}
		for k, n := range sup.txnFailures() {
			rep.KafkaTxnFailures[k] += n
		}
	}
	reached := 0
	for _, n := range rep.CrashPointsReached {
		reached += n
	}
	if reached == 0 {
		fail("no walstream reached its crash point")
	}
	// The cluster's faults take longer (a killed broker is back after
	// tens of seconds), and so do a fleet's (a pause past the session
	// timeout, a rollout of every process), so their decks have fewer
	// kills in the same time.
	minKills := map[bool]int{false: 30, true: 10}[cluster]
	if fleet && !cluster {
		minKills = 20
	}
	if long && fr.Counts[faultKill] < minKills {
		fail("only %d kills of walstream, want at least %d in a long run", fr.Counts[faultKill], minKills)
	}
	if rep.ReplaysSkippedLogged == 0 && rep.ReplaysSkippedScraped == 0 {
		fail("no replayed event was skipped by the checkpoint filter, after %d kills and %d immediate restarts", fr.Counts[faultKill], fr.Counts[faultPGImmediate])
	}
	if st.RowsCommitted < *flagMinRows {
		fail("%d rows committed, want at least %d", st.RowsCommitted, *flagMinRows)
	}

	rep.Passed, rep.Failures = len(failures) == 0, failures
	rep.WallSeconds = time.Since(wall).Seconds()
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(reportPath, b, 0o644); err != nil {
		t.Errorf("writing the report: %v", err)
	}
	t.Log(rep.summary(reportPath))
	for _, f := range failures {
		t.Error(f)
	}
}

// processes says which streams each walstream process carries: the last
// shared streams one process (a config file's streams: list), every other
// stream a process of its own; in a fleet of n processes, each carries
// every stream. The checks stay per stream.
func processes(streams []*stream, shared, fleet int) [][]*stream {
	if fleet > 0 {
		ps := make([][]*stream, fleet)
		for i := range ps {
			ps[i] = streams
		}
		return ps
	}
	shared = min(max(shared, 1), len(streams))
	var ps [][]*stream
	for _, st := range streams[:len(streams)-shared] {
		ps = append(ps, []*stream{st})
	}
	return append(ps, streams[len(streams)-shared:])
}

// verdict reads st's ledger and its topics (with kcat, and the continuous
// consumer's records) and judges them; fail records what fails.
func (st *stream) verdict(ctx context.Context, t *testing.T, brokers string, cons *consumer, gap map[string]bool, fail func(string, ...any)) streamReport {
	sr := streamReport{Name: st.name, Database: st.db, Slot: st.slot, TransactionalID: st.txnID, Topics: st.prefix + "*",
		Process: st.process(), Load: st.load.snapshot(), Atomicity: st.atom, Checkpoints: st.cp, SessionRestarts: st.sessionRestarts()}
	ledger, err := readLedger(ctx, st.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range st.load.crossCheck(ledger) {
		fail("%s: ground truth: %s", st.name, e)
	}
	var recs []record
	kcatFailed := false
	for _, topic := range st.topics() {
		rs, err := kcatRead(ctx, brokers, topic)
		if err != nil {
			// A transaction left open for good (a hanging transaction)
			// keeps kcat from finishing: judge what the continuous
			// consumer read, and say so.
			fail("%s: the final read with kcat: %v; judging the continuous consumer's records instead", st.name, err)
			kcatFailed = true
			break
		}
		recs = append(recs, rs...)
	}
	if kcatFailed {
		recs = cons.all(st)
	}
	st.load.mu.Lock()
	sr.Verdict = judge(recs, ledger, st.load.rolledBack, gap, st.prefix)
	st.load.mu.Unlock()
	v := sr.Verdict
	if n := v.failures(); n > 0 {
		fail("%s: kcat read %d records: %d duplicates, %d lost, %d not in the ledger (%d known rolled back), %d order violations, %d aggregates in several partitions, %d disagreeing with the ledger:\n  %s",
			st.name, v.Records, v.Duplicates, v.Lost, v.NotInLedger, v.RolledBackSeen, v.OrderViolations, v.PartitionViolations, v.Mismatches, strings.Join(v.Examples, "\n  "))
	}
	rv, err := judgeReemits(recs, st.reemits.all(), cons.reemitStates(st.name), ledger, func(where string) (map[string]bool, error) {
		return presentRows(ctx, st.url, where)
	})
	if err != nil {
		t.Fatal(err)
	}
	sr.Reemits = rv
	if n := rv.failures(); n > 0 {
		fail("%s: re-emit requests: %d of %d done, %d cancelled, %d failed, %d never met, %d not ended; %d records: %d duplicates within a request, "+
			"%d rows missed, %d records not selected (or failed requests), %d requests not as counted, %d records of unknown requests:\n  %s",
			st.name, rv.Done, rv.Requests, rv.Cancelled, rv.Failed, rv.NeverMet, rv.NotEnded, rv.Records, rv.Duplicates, rv.Missing, rv.NotSelected,
			rv.RecordsCountMismatch, rv.Unknown, strings.Join(rv.Examples, "\n  "))
	}
	if diff := sameRecords(recs, cons.all(st)); diff != "" && !kcatFailed {
		fail("%s: the continuous consumer and kcat disagree: %s", st.name, diff)
	}
	if st.atom.Violations > 0 {
		fail("%s: %d transactions visible in part:\n  %s", st.name, st.atom.Violations, strings.Join(st.atom.Examples, "\n  "))
	}
	if st.cp.Violations > 0 {
		fail("%s: %d samples with the slot confirmed past the checkpoint in Kafka or the server's WAL end:\n  %s", st.name, st.cp.Violations, strings.Join(st.cp.Examples, "\n  "))
	}
	if st.cp.Unresolved > 0 {
		fail("%s: %d samples judged at the end with checkpoint records before them that Kafka never resolved", st.name, st.cp.Unresolved)
	}
	return sr
}

// report is the JSON report of a run: totals over the streams, and each
// stream's.
type report struct {
	Variant               string         `json:"variant"`
	Broker                string         `json:"broker"`
	Fleet                 int            `json:"fleet_processes,omitempty"`
	Seed                  uint64         `json:"seed"`
	Duration              string         `json:"duration"`
	WallSeconds           float64        `json:"wall_seconds"`
	Passed                bool           `json:"passed"`
	Failures              []string       `json:"failures"`
	Load                  loadStats      `json:"load"`
	Faults                faultReport    `json:"faults"`
	FaultsLeftOut         []string       `json:"faults_left_out,omitempty"`
	CrashPointsReached    map[string]int `json:"crash_points_reached"`
	WalstreamProcesses    int            `json:"walstream_processes"`
	SessionRestarts       map[string]int `json:"walstream_session_restarts_by_peer"`
	KafkaTxnFailures      map[string]int `json:"walstream_kafka_transaction_failures_by_cause"`
	ReplaysSkippedLogged  int64          `json:"replays_skipped_logged"`
	ReplaysSkippedScraped int64          `json:"replays_skipped_metrics"`
	Verdict               verdict        `json:"verdict"`
	Reemits               reemitVerdict  `json:"reemits"`
	Atomicity             *atomicity     `json:"atomicity"`
	Checkpoints           cpCheck        `json:"checkpoint_vs_slot"`
	Sampler               *sampler       `json:"sampler"`
	CatchUpSeconds        float64        `json:"catch_up_seconds"`
	Streams               []streamReport `json:"streams"`
	LogDir                string         `json:"log_dir"`
}

// streamReport is one stream's part of the report.
type streamReport struct {
	Name            string         `json:"name"`
	Database        string         `json:"database"`
	Slot            string         `json:"slot"`
	TransactionalID string         `json:"transactional_id"`
	Topics          string         `json:"topics"`
	Process         string         `json:"process_streams"` // the streams its walstream process carries
	Load            loadStats      `json:"load"`
	Faults          map[string]int `json:"faults"`
	SessionRestarts map[string]int `json:"walstream_session_restarts_by_peer"`
	Verdict         verdict        `json:"verdict"`
	Reemits         reemitVerdict  `json:"reemits"`
	Atomicity       *atomicity     `json:"atomicity"`
	Checkpoints     *cpCheck       `json:"checkpoint_vs_slot"`
}

func (r *report) summary(path string) string {
	verdict := map[bool]string{true: "PASS", false: "FAIL"}[r.Passed]
	var kinds []string
	total := 0
	for _, k := range slices.Sorted(maps.Keys(r.Faults.Counts)) {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, r.Faults.Counts[k]))
		total += r.Faults.Counts[k]
	}
	crashes := 0
	for _, n := range r.CrashPointsReached {
		crashes += n
	}
	holds, restarts, heldFor := 0, 0, 0.0
	for _, h := range r.Faults.Holds {
		holds++
		heldFor = max(heldFor, h.Seconds)
		for _, n := range h.SessionRestarts {
			restarts += n
		}
	}
	var per []string
	for _, s := range r.Streams {
		per = append(per, fmt.Sprintf("%s %d rows, %d faults, duplicates %d, lost %d, order %d, atomicity %d, checkpoint %d",
			s.Name, s.Load.RowsCommitted, sum(s.Faults), s.Verdict.Duplicates, s.Verdict.Lost, s.Verdict.OrderViolations,
			s.Atomicity.Violations, s.Checkpoints.Violations))
	}
	procs := make(map[string]bool)
	for _, s := range r.Streams {
		procs[s.Process] = true
	}
	layout := fmt.Sprintf("%d streams in %d walstream processes", len(r.Streams), len(procs))
	if r.Fleet > 0 {
		layout = fmt.Sprintf("%d streams shared by a fleet of %d walstream processes", len(r.Streams), r.Fleet)
	}
	fleet := ""
	if len(r.Faults.Moves) > 0 {
		slowest := make(map[string]float64)
		for _, m := range r.Faults.Moves {
			slowest[m.Kind] = max(slowest[m.Kind], m.Seconds)
		}
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(slowest)) {
			kinds = append(kinds, fmt.Sprintf("%s %.1fs", k, slowest[k]))
		}
		fleet = fmt.Sprintf("the fleet's streams moved %d times, the slowest after %s; pauses: %v; ", len(r.Faults.Moves), strings.Join(kinds, ", "), r.Faults.FleetPauses)
	}
	return fmt.Sprintf("chaos %s %s on %s: %s, one checkpoint topic; %d rows committed, %d rolled back; %d faults (%s); %d crash points reached; "+
		"replays skipped %d (logged) / %d (metrics); duplicates %d, lost %d (and %d of %d in named recreation gaps), not in ledger %d, order violations %d, "+
		"atomicity violations %d in %d snapshots (%d settled), checkpoint violations %d in %d samples (%d past the WAL end, %d judged after a hold); "+
		"holds of the checkpoint topic %d (longest %.0fs), other streams' session restarts during them %d; "+
		"re-emit requests %d (%d done, %d cancelled, %d failed), %d records re-emitted, %d duplicates within a request, %d rows missed; "+
		"%sPostgres streamed %d transactions in progress and spilled %d; caught up in %.1fs; by stream: %s; report %s",
		verdict, r.Duration, r.Broker, layout, r.Load.RowsCommitted, r.Load.RowsRolledBack, total, strings.Join(kinds, " "), crashes,
		r.ReplaysSkippedLogged, r.ReplaysSkippedScraped, r.Verdict.Duplicates, r.Verdict.Lost, r.Verdict.LostInGap, r.Faults.GapRows, r.Verdict.NotInLedger,
		r.Verdict.OrderViolations, r.Atomicity.Violations, r.Atomicity.Snapshots, r.Atomicity.Settled, r.Checkpoints.Violations, r.Checkpoints.Samples,
		r.Checkpoints.PastWALEnd, r.Checkpoints.JudgedLate, holds, heldFor, restarts,
		r.Reemits.Requests, r.Reemits.Done, r.Reemits.Cancelled, r.Reemits.Failed, r.Reemits.Records, r.Reemits.Duplicates, r.Reemits.Missing,
		fleet, r.Sampler.StreamTxns, r.Sampler.SpillTxns, r.CatchUpSeconds, strings.Join(per, "; "), path)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// sameRecords compares two reads of the outbox topics by position and id.
func sameRecords(a, b []record) string {
	key := func(r record) string { return fmt.Sprintf("%s/%d@%d %s", r.Topic, r.Partition, r.Offset, r.ID) }
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i, r := range a {
		ka[i] = key(r)
	}
	for i, r := range b {
		kb[i] = key(r)
	}
	sort.Strings(ka)
	sort.Strings(kb)
	if slices.Equal(ka, kb) {
		return ""
	}
	return fmt.Sprintf("%d records against %d", len(a), len(b))
}
