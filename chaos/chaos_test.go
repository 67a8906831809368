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
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/internal/testenv"
)

var (
	flagDuration = flag.Duration("chaos.duration", 60*time.Second, "how long load and faults run; 5m or more is the long variant (more faults per round, rounds until the time is up)")
	flagReport   = flag.String("chaos.report", "", "path of the JSON report (default: chaos-report.json in the run's temp dir)")
	flagWriters  = flag.Int("chaos.writers", 6, "concurrent writers")
	flagRate     = flag.Float64("chaos.rate", 0, "rows per second over all writers (default: 300 short, 600 long)")
	flagSeed     = flag.Uint64("chaos.seed", 0, "random seed (default: from the clock)")
	flagMinRows  = flag.Int("chaos.min-rows", 0, "fail unless at least this many rows committed")
	flagMaxBatch = flag.Int("chaos.max-batch-events", 250, "walstream --max-batch-events; larger writer transactions are split over Kafka transactions")
	flagBinary   = flag.String("chaos.walstream", "", "walstream binary built with -tags walstream_faults (default: build ../cmd/walstream)")
	flagKeep     = flag.Bool("chaos.keep", false, "keep the logs of a passing run (a long run always keeps them)")
	flagSkip     = flag.String("chaos.skip", "", "comma-separated fault kinds to leave out, e.g. broker-restart-sigkill")
	flagOutbox   = flag.String("chaos.outbox", "partitioned", "the outbox table: partitioned (by time, testdata/outbox-partitioned.sql; partitions are attached and dropped as a fault) or plain (testdata/outbox.sql)")
	flagBroker   = flag.String("chaos.broker", brokerKafka, "the broker: kafka (Apache Kafka 4.x, transaction version 2) or devbroker (kfake, cmd/devbroker)")
	flagNodes    = flag.Int("chaos.kafka-nodes", 1, "Kafka brokers: 1 plays the broker restarts and network faults; 3 the cluster's faults "+
		"(coordinator, leaders and controller killed, two brokers down, one cut off), beside two controller-only nodes")
)

// catchUpLimit is how long after the faults stop walstream may take to
// confirm everything written.
const catchUpLimit = 30 * time.Second

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestChaos runs walstream under load and faults and checks that every
// committed outbox row reaches Kafka exactly once, in order per aggregate,
// atomically per transaction, with the slot never confirmed past Kafka.
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
	skip := make(map[string]bool)
	partitioned := *flagOutbox == "partitioned"
	if !partitioned && *flagOutbox != "plain" {
		t.Fatalf("-chaos.outbox %q: want partitioned or plain", *flagOutbox)
	}
	if !partitioned {
		skip[faultPartitions] = true
	}
	cluster := *flagBroker == brokerKafka && *flagNodes > 1
	for _, k := range strings.FieldsFunc(*flagSkip, func(r rune) bool { return r == ',' }) {
		if !slices.ContainsFunc(append(deck(true, false, nil), deck(true, true, nil)...), func(f fault) bool { return f.kind == k }) {
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
	logf("seed %d, duration %s, %d writers at %.0f rows/s, %s outbox, logs in %s", seed, *flagDuration, *flagWriters, rate, *flagOutbox, dir)

	wsBin := walstreamBinary(t, *flagBinary)

	pg := testenv.StartPostgres(t, testenv.Settings(
		"logical_decoding_work_mem = '64kB'",
		fmt.Sprintf("wal_sender_timeout = '%ds'", int(walSenderTimeout.Seconds())),
		// Writers see a commit only once its WAL is written, so an
		// immediate restart cannot take back a commit the ledger reported.
		"synchronous_commit = on",
	))
	pgURL := pg.URL("postgres", "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), *flagDuration+10*time.Minute)
	defer cancel()
	if err := createSchema(ctx, pgURL, outboxDDL(partitioned)); err != nil {
		t.Fatal(err)
	}

	px, err := startProxies(fmt.Sprintf("127.0.0.1:%d", pg.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.stop)
	br, err := startBroker(t, ctx, *flagBroker, *flagNodes, dir, px)
	if err != nil {
		testenv.Unavailable(t, "the broker cannot start: %v", err)
	}
	t.Cleanup(br.close)
	cons, err := newConsumer(br.direct, br.dialer())
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
	if resp, err := cons.adm.CreateTopics(ctx, 3, rf, nil, outboxTopics()...); err != nil || resp.Error() != nil {
		t.Fatalf("creating the outbox topics: %v", errors.Join(err, resp.Error()))
	}
	var bg sync.WaitGroup
	consCtx, stopCons := context.WithCancel(ctx)
	bg.Add(1)
	go func() { defer bg.Done(); cons.run(consCtx) }()
	t.Cleanup(func() { stopCons(); bg.Wait(); cons.close() })

	wsPG := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", px.pg.Listen) // through the proxy
	sup := newSupervisor(wsBin, dir, append([]string{
		"--pg-url", wsPG,
		"--kafka-brokers", px.kafkaAddrs(),
		"--http-addr", "127.0.0.1:0",
		"--status-interval", "1s",
		"--idle-interval", "500ms",
		"--commit-timeout", commitTimeout.String(),
		"--max-batch-events", fmt.Sprint(*flagMaxBatch),
	}, reemitArgs...))
	t.Cleanup(sup.close)
	first, err := sup.start("")
	if err != nil {
		t.Fatal(err)
	}
	if !first.streaming(60 * time.Second) {
		t.Fatalf("walstream did not start streaming:\n%s", first.Log())
	}
	logf("walstream #%d streaming; Postgres %d, %s at %s, proxies %s and %s", first.id, pg.Port, br, br.direct, px.pg.Listen, px.kafkaAddrs())

	atom := newAtomicity(*flagMaxBatch)
	smp := &sampler{pgURL: pgURL, cons: cons, atom: atom}
	smpCtx, stopSampler := context.WithCancel(ctx)
	var smpDone sync.WaitGroup
	smpDone.Add(1)
	go func() { defer smpDone.Done(); smp.run(smpCtx, 100*time.Millisecond) }()
	defer func() { stopSampler(); smpDone.Wait() }()

	ld := newLoad(pgURL, *flagWriters, rate, *flagMaxBatch, seed)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadDone sync.WaitGroup
	loadDone.Add(1)
	go func() { defer loadDone.Done(); ld.run(loadCtx) }()
	defer func() { stopLoad(); loadDone.Wait() }()

	// Faults, after a short warm-up; the load runs on until the end.
	until := time.Now().Add(*flagDuration)
	fl := newFaults(&rig{pg: pg, pgURL: pgURL, broker: br, px: px, sup: sup, cons: cons, wsBin: wsBin,
		statusArgs: []string{"status", "--pg-url", wsPG, "--kafka-brokers", px.kafkaAddrs()}, logf: logf, outboxDDL: outboxDDL(partitioned)}, seed, long, cluster, skip)
	time.Sleep(3 * time.Second)
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); fl.run(ctx, until) }()
	var stuck string
	select {
	case <-faultsDone:
	case <-time.After(time.Until(until) + 3*time.Minute):
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
	st := ld.snapshot()
	logf("load stopped: %d rows in %d transactions committed", st.RowsCommitted, st.TxCommitted)

	// Catch-up: the slot confirms everything written.
	end, err := pg.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	caughtUp := waitConfirmed(ctx, pg, end, catchUpLimit)
	catchUp := time.Since(faultsStopped)
	logf("slot confirmed %s: %v after %s", end, caughtUp, catchUp.Round(10*time.Millisecond))
	// The re-emit requests made run to their end; the checker judges them.
	reemitWait := time.Now()
	cons.waitReemits(ctx, 2*time.Minute)
	logf("re-emit requests ended %s after the catch-up", time.Since(reemitWait).Round(10*time.Millisecond))
	stopSampler()
	smpDone.Wait()

	// Verdict: everything below is collected, reported, then failed on.
	var failures []string
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	if !caughtUp {
		fail("the slot did not confirm the end of the load (%s) within %s of the faults stopping", end, catchUpLimit)
	}
	switch p := sup.current(); {
	case p == nil:
		fail("no walstream running at the end")
	case !caughtUp:
		// A goroutine dump shows where it is stuck.
		stopProc(p, syscall.SIGQUIT, 10*time.Second)
		fail("walstream #%d's goroutine dump (SIGQUIT) is in %s", p.id, p.f.Name())
	default:
		if stopProc(p, syscall.SIGTERM, 30*time.Second); p.Err() != nil {
			fail("walstream #%d did not exit 0 after SIGTERM: %s\n%s", p.id, p.ExitDesc(), p.LastLines(10))
		}
	}
	unexpected := sup.unexpectedExits()
	sup.close()

	// The continuous consumer reads everything up to the final stable offsets.
	lso, complete, err := cons.stableOffsets(ctx)
	if err != nil || !complete || !cons.waitCaughtUp(ctx, lso, time.Minute) {
		fail("the checker's consumer did not reach the final stable offsets (%v, complete %v)", err, complete)
	}
	stopCons()
	smp.finish()

	ledger, err := readLedger(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ld.crossCheck(ledger) {
		fail("ground truth: %s", e)
	}
	var recs []record
	kcatFailed := false
	for _, topic := range outboxTopics() {
		rs, err := kcatRead(ctx, br.direct, topic)
		if err != nil {
			// A transaction left open for good (a hanging transaction)
			// keeps kcat from finishing: judge what the continuous
			// consumer read, and say so.
			fail("the final read with kcat: %v; judging the continuous consumer's records instead", err)
			kcatFailed = true
			break
		}
		recs = append(recs, rs...)
	}
	if kcatFailed {
		recs = cons.all()
	}
	ld.mu.Lock()
	v := judge(recs, ledger, ld.rolledBack, fl.gapIDs())
	ld.mu.Unlock()
	if n := v.failures(); n > 0 {
		fail("kcat read %d records: %d duplicates, %d lost, %d not in the ledger (%d known rolled back), %d order violations, %d aggregates in several partitions, %d disagreeing with the ledger:\n  %s",
			v.Records, v.Duplicates, v.Lost, v.NotInLedger, v.RolledBackSeen, v.OrderViolations, v.PartitionViolations, v.Mismatches, strings.Join(v.Examples, "\n  "))
	}
	rv, err := judgeReemits(recs, fl.reemits.all(), cons.reemitStates(), ledger, func(where string) (map[string]bool, error) {
		return presentRows(ctx, pgURL, where)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := rv.failures(); n > 0 {
		fail("re-emit requests: %d of %d done, %d cancelled, %d failed, %d never met, %d not ended; %d records: %d duplicates within a request, "+
			"%d rows missed, %d records not selected (or failed requests), %d requests not as counted, %d records of unknown requests:\n  %s",
			rv.Done, rv.Requests, rv.Cancelled, rv.Failed, rv.NeverMet, rv.NotEnded, rv.Records, rv.Duplicates, rv.Missing, rv.NotSelected,
			rv.RecordsCountMismatch, rv.Unknown, strings.Join(rv.Examples, "\n  "))
	}
	if rv.Done == 0 {
		fail("no re-emit request ran to its end (%d made, %d cancelled, %d failed, %d never met)", rv.Requests, rv.Cancelled, rv.Failed, rv.NeverMet)
	}
	if diff := sameRecords(recs, cons.all()); diff != "" && !kcatFailed {
		fail("the continuous consumer and kcat disagree: %s", diff)
	}
	if atom.Violations > 0 {
		fail("%d transactions visible in part:\n  %s", atom.Violations, strings.Join(atom.Examples, "\n  "))
	}
	if smp.Violations > 0 {
		fail("%d samples with the slot confirmed past the checkpoint in Kafka or the server's WAL end:\n  %s", smp.Violations, strings.Join(smp.Examples, "\n  "))
	}
	if smp.Samples < 100 || atom.Snapshots < 100 || atom.Settled < 10 {
		fail("only %d checkpoint samples (%d skipped) and %d atomicity snapshots (%d settled)", smp.Samples, smp.Skipped, atom.Snapshots, atom.Settled)
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
	for _, e := range fr.Errors {
		fail("fault: %s", e)
	}
	for _, ft := range deck(long, cluster, skip) {
		if fr.Counts[ft.kind] == 0 {
			fail("fault %s was never injected", ft.kind)
		}
	}
	crashes, procs := sup.stats()
	reached := 0
	for _, n := range crashes {
		reached += n
	}
	if reached == 0 {
		fail("no walstream reached its crash point")
	}
	// The cluster's faults take longer (a killed broker is back after
	// tens of seconds), so its deck has fewer kills in the same time.
	if minKills := map[bool]int{false: 30, true: 10}[cluster]; long && fr.Counts[faultKill] < minKills {
		fail("only %d kills of walstream, want at least %d in a long run", fr.Counts[faultKill], minKills)
	}
	skippedLogged, skippedScraped := sup.replaysSkipped()
	if skippedLogged == 0 && skippedScraped == 0 {
		fail("no replayed event was skipped by the checkpoint filter, after %d kills and %d immediate restarts", fr.Counts[faultKill], fr.Counts[faultPGImmediate])
	}
	if st.RowsCommitted < *flagMinRows {
		fail("%d rows committed, want at least %d", st.RowsCommitted, *flagMinRows)
	}

	rep := report{
		Variant: map[bool]string{false: "short", true: "long"}[long], Broker: br.String(), Seed: seed,
		Duration: flagDuration.String(), WallSeconds: time.Since(wall).Seconds(),
		Passed: len(failures) == 0, Failures: failures,
		Load: st, Faults: fr, FaultsLeftOut: slices.Sorted(maps.Keys(skip)), CrashPointsReached: crashes,
		WalstreamProcesses: procs, SessionRestarts: sup.sessionRestarts(), KafkaTxnFailures: sup.txnFailures(),
		ReplaysSkippedLogged: skippedLogged, ReplaysSkippedScraped: skippedScraped,
		Verdict: v, Reemits: rv, Atomicity: atom, Checkpoints: smp,
		CatchUpSeconds: catchUp.Seconds(), LogDir: dir,
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(reportPath, b, 0o644); err != nil {
		t.Errorf("writing the report: %v", err)
	}
	t.Log(rep.summary(reportPath))
	for _, f := range failures {
		t.Error(f)
	}
}

// report is the JSON report of a run.
type report struct {
	Variant               string         `json:"variant"`
	Broker                string         `json:"broker"`
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
	Checkpoints           *sampler       `json:"checkpoint_vs_slot"`
	CatchUpSeconds        float64        `json:"catch_up_seconds"`
	LogDir                string         `json:"log_dir"`
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
	return fmt.Sprintf("chaos %s %s on %s: %d rows committed, %d rolled back; %d faults (%s); %d crash points reached; "+
		"replays skipped %d (logged) / %d (metrics); duplicates %d, lost %d (and %d of %d in named recreation gaps), not in ledger %d, order violations %d, "+
		"atomicity violations %d in %d snapshots (%d settled), checkpoint violations %d in %d samples (%d past the WAL end); "+
		"re-emit requests %d (%d done, %d cancelled, %d failed), %d records re-emitted, %d duplicates within a request, %d rows missed; "+
		"Postgres streamed %d transactions in progress and spilled %d; caught up in %.1fs; report %s",
		verdict, r.Duration, r.Broker, r.Load.RowsCommitted, r.Load.RowsRolledBack, total, strings.Join(kinds, " "), crashes,
		r.ReplaysSkippedLogged, r.ReplaysSkippedScraped, r.Verdict.Duplicates, r.Verdict.Lost, r.Verdict.LostInGap, r.Faults.GapRows, r.Verdict.NotInLedger,
		r.Verdict.OrderViolations, r.Atomicity.Violations, r.Atomicity.Snapshots, r.Atomicity.Settled, r.Checkpoints.Violations, r.Checkpoints.Samples,
		r.Checkpoints.PastWALEnd, r.Reemits.Requests, r.Reemits.Done, r.Reemits.Cancelled, r.Reemits.Failed, r.Reemits.Records, r.Reemits.Duplicates,
		r.Reemits.Missing, r.Checkpoints.StreamTxns, r.Checkpoints.SpillTxns, r.CatchUpSeconds, path)
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

// waitConfirmed waits up to d for the slot to confirm lsn.
func waitConfirmed(ctx context.Context, pg *testenv.Postgres, lsn pglogrepl.LSN, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		got, err := pg.SlotConfirmed(cctx, slotName)
		cancel()
		if err == nil && got >= lsn {
			return true
		}
	}
	return false
}
