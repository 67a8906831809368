package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/pipeline"
)

// binary is walstream built with the race detector and the
// walstream_faults tag, so that tests can crash it at named points.
var binary string

// parallel is how many tests run at once here unless go test's -parallel
// says otherwise. An end-to-end test mostly waits, for walstream, Postgres
// and Kafka: 4 at a time keep two cores busy without starving walstream
// (docs/development.md, The test suite's time).
const parallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var err error
	if binary, err = testenv.BuildBinary(testenv.WalstreamBuild(true, true)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(testenv.Main(m))
}

// outboxDDL is the tests' outbox table. With TEST_OUTBOX=partitioned it is
// a partitioned table, split by its id's hash into three partitions, so
// that the whole suite checks that a partitioned outbox behaves as a plain
// one: `TEST_OUTBOX=partitioned go test ./cmd/walstream`.
var outboxDDL = outboxTableDDL(partitionedOutbox)

// partitionedOutbox is TEST_OUTBOX=partitioned.
var partitionedOutbox = os.Getenv("TEST_OUTBOX") == "partitioned"

// publicationOptions are the WITH options of a publication a test makes
// by hand, publish given: a partitioned outbox's publishes its
// partitions' rows as its own, as walstream's does.
func publicationOptions(publish string) string {
	if partitionedOutbox {
		return fmt.Sprintf("WITH (publish = '%s', publish_via_partition_root = true)", publish)
	}
	return fmt.Sprintf("WITH (publish = '%s')", publish)
}

func outboxTableDDL(partitioned bool) string {
	const columns = `CREATE TABLE public.outbox (
	id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	aggregatetype text NOT NULL,
	aggregateid text NOT NULL,
	type text NOT NULL,
	payload jsonb NOT NULL)`
	if !partitioned {
		return columns
	}
	ddl := columns + " PARTITION BY HASH (id)"
	for i := range 3 {
		ddl += fmt.Sprintf("; CREATE TABLE public.outbox_p%d PARTITION OF public.outbox FOR VALUES WITH (MODULUS 3, REMAINDER %d)", i, i)
	}
	return ddl
}

// env is one Postgres database and one broker for a test.
type env struct {
	t      *testing.T
	pg     *testenv.Postgres
	kafka  testenv.Broker
	broker string
	// reader, when set, makes tests read records with a franz-go consumer
	// with these connection options instead of kcat.
	reader []kgo.Opt
	// ns, on a broker other tests share (newSharedEnv), prefixes every
	// name this test's walstream gives Kafka: its outbox, checkpoint and
	// dead-letter topics and its transactional ids (kafkaNames). The
	// readers take the names walstream has by default and add it
	// (topic), so a test reads "outbox.event.Order" on either broker.
	ns string
}

// secrets are the passwords tests use; no walstream output may hold one.
var secrets struct {
	sync.Mutex
	list []string
}

func registerSecret(s string) {
	secrets.Lock()
	defer secrets.Unlock()
	secrets.list = append(secrets.list, s)
}

// leakedSecret returns a registered password that out contains, if any.
func leakedSecret(out string) string {
	secrets.Lock()
	defer secrets.Unlock()
	for _, s := range secrets.list {
		if strings.Contains(out, s) {
			return s
		}
	}
	return ""
}

// newEnv starts Postgres and the tests' broker (testenv.TestBroker: Apache
// Kafka unless WALSTREAM_TEST_BROKER says otherwise).
func newEnv(t *testing.T, opts ...testenv.Option) *env {
	t.Helper()
	return newEnvOn(t, testenv.TestBroker(), opts...)
}

// newSharedEnv is newEnv on the broker the tests of this binary share
// (testenv.SharedBroker), under names of its own (env.ns), for a test
// that needs nothing of a broker of its own: it does not stop or restart
// it, change its settings or need its default names (a --config file
// naming topics, the checkpoint or dead-letter topic, the transactional
// id as walstream defaults it).
func newSharedEnv(t *testing.T, opts ...testenv.Option) *env {
	t.Helper()
	return newSharedEnvWith(t, outboxDDL, opts...)
}

// newSharedEnvWith is newSharedEnv with an outbox table of its own.
func newSharedEnvWith(t *testing.T, ddl string, opts ...testenv.Option) *env {
	t.Helper()
	e := startEnv(t, testenv.SharedBrokerAsync(t, testenv.TestBroker()), ddl, opts...)
	e.ns = testenv.TopicPrefix(t)
	return e
}

// newEnvOn is newEnv on a broker of the given kind.
func newEnvOn(t *testing.T, kind testenv.BrokerKind, opts ...testenv.Option) *env {
	t.Helper()
	return startEnv(t, testenv.StartBrokerAsync(t, kind), outboxDDL, opts...)
}

// startEnv starts Postgres with the outbox table ddl creates, and waits for
// the broker that broker returns, started while Postgres starts.
func startEnv(t *testing.T, broker func() testenv.Broker, ddl string, opts ...testenv.Option) *env {
	t.Helper()
	e := &env{t: t, pg: testenv.StartPostgres(t, opts...)}
	e.kafka = broker()
	e.broker = e.kafka.Addr()
	e.pg.Exec("postgres", ddl)
	return e
}

// proc is a running walstream.
type proc struct{ *testenv.Process }

// start runs walstream against the env with test-friendly intervals; args
// and environment entries come after the defaults and override them.
func (e *env) start(args []string, environ ...string) *proc {
	e.t.Helper()
	p := &proc{testenv.StartWalstream(e.t, binary, append([]string{"run",
		"--pg-url", e.pg.URL("postgres", "postgres"),
		"--kafka-brokers", e.broker,
		"--http-addr", "",
		"--status-interval", "1s",
		"--idle-interval", "500ms",
		"--commit-timeout", "10s",
		"--log-level", "debug",
	}, slices.Concat(e.kafkaNames(args), args)...), environ...)}
	e.t.Cleanup(func() {
		_ = p.stop()
		if s := leakedSecret(p.Log()); s != "" {
			e.t.Errorf("walstream's log holds the password %q", s)
		}
	})
	return p
}

// kafkaNames are the flags that give walstream the test's own names on a
// shared broker (ownNames), except those args set.
func (e *env) kafkaNames(args []string) []string {
	if e.ns == "" {
		return nil
	}
	slot := pipeline.DefaultSlot
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--slot="); ok {
			slot = v
		} else if a == "--slot" && i+1 < len(args) {
			slot = args[i+1]
		}
	}
	var out []string
	for _, f := range e.ownNames(slot) {
		if !slices.ContainsFunc(args, func(a string) bool { return a == f[0] || strings.HasPrefix(a, f[0]+"=") }) {
			out = append(out, f[:]...)
		}
	}
	return out
}

// ownNames are the flags and values of every name walstream gives Kafka
// by default, prefixed with env.ns; the transactional id is the one of
// the stream of slot. walstream status takes all but the last.
func (e *env) ownNames(slot string) [][2]string {
	return [][2]string{
		{"--checkpoint-topic", e.topic(pipeline.DefaultCheckpointTopic)},
		{"--dlq-topic", e.topic(pipeline.DefaultDeadLetterTopic)},
		{"--transactional-id", e.ns + "walstream-" + slot},
		{"--topic-template", e.topic(decode.DefaultTopicReplacement)},
	}
}

// kafkaArgs are the flags of walstream status that reach Kafka where the
// test's walstream writes.
func (e *env) kafkaArgs() []string {
	args := []string{"--kafka-brokers", e.broker}
	if e.ns != "" {
		for _, f := range e.ownNames(pipeline.DefaultSlot)[:3] {
			args = append(args, f[:]...)
		}
	}
	return args
}

// topic is the topic a test's walstream writes for the one it would
// write by default (see env.ns).
func (e *env) topic(name string) string { return e.ns + name }

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() error { return p.Stop(syscall.SIGTERM, 30*time.Second) }

// waitLog waits until the log contains s.
func (p *proc) waitLog(t *testing.T, s string, within time.Duration) {
	t.Helper()
	if err := p.WaitLog(context.Background(), s, within); err != nil {
		t.Fatal(err)
	}
}

// streaming waits until walstream holds the slot and streams.
func (p *proc) streaming(t *testing.T) *proc {
	t.Helper()
	testenv.WaitStreaming(t, p.Process, 60*time.Second)
	return p
}

// wait waits for the process to exit on its own.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	err, ok := p.Wait(d)
	if !ok {
		t.Fatalf("walstream still running after %s", d)
	}
	return err
}

// currentLSN is pg_current_wal_insert_lsn(): with synchronous_commit off
// the write position can trail the last commit.
func (e *env) currentLSN() pglogrepl.LSN {
	e.t.Helper()
	lsn, err := e.pg.CurrentLSN(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

// confirmedLSN is the slot's confirmed_flush_lsn, 0 when there is no slot
// or the server cannot tell (callers poll, also across restarts).
func (e *env) confirmedLSN(slot string) pglogrepl.LSN {
	lsn, _ := e.pg.SlotConfirmed(context.Background(), slot)
	return lsn
}

// waitConfirmed waits until the slot confirms lsn, which walstream does only
// after Kafka committed everything before it.
func (e *env) waitConfirmed(slot string, lsn pglogrepl.LSN, within time.Duration, p *proc) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for e.confirmedLSN(slot) < lsn {
		if time.Now().After(deadline) {
			e.t.Fatalf("slot %s confirmed_flush_lsn %s did not reach %s within %s", slot, e.confirmedLSN(slot), lsn, within)
		}
		if p != nil && p.Exited() {
			e.t.Fatalf("walstream exited (%v) before the slot reached %s", p.Err(), lsn)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// record is one record as kcat, a librdkafka client, read it.
type record = testenv.Record

// kcat reads a topic from the beginning to its end, read_committed: the
// topic walstream writes for the one named (env.topic), its records
// under the name given.
func (e *env) kcat(topic string) []record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recs []record
	var err error
	if e.reader != nil {
		recs, err = testenv.ReadRecords(ctx, e.broker, e.topic(topic), e.reader...)
	} else {
		if _, lerr := exec.LookPath("kcat"); lerr != nil {
			if os.Getenv("CI") != "" {
				e.t.Fatal("CI is set and kcat is not installed (apt-get install kcat)")
			}
			e.t.Skip("kcat is not installed")
		}
		recs, err = testenv.Kcat(ctx, e.broker, e.topic(topic))
	}
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range recs {
		recs[i].Topic = topic
	}
	return recs
}

// outboxRow is what the test writers put in payload.
type outboxRow struct {
	Seq int    `json:"seq"`
	Agg string `json:"agg"`
}

// checkExactlyOnce checks records against the ids committed in the outbox:
// each exactly once, with the right topic, key, id header and value, and
// per aggregate in commit order (seq increasing along the partition).
func (e *env) checkExactlyOnce(recs []record, topicPrefix string) {
	e.t.Helper()
	e.checkExactlyOnceIn("postgres", recs, topicPrefix)
}

// checkExactlyOnceIn is checkExactlyOnce for the outbox of database db.
func (e *env) checkExactlyOnceIn(db string, recs []record, topicPrefix string) {
	e.t.Helper()
	rows, err := e.pg.Connect(db).Query(context.Background(),
		"SELECT id::text, aggregatetype, aggregateid, payload::text FROM outbox")
	if err != nil {
		e.t.Fatal(err)
	}
	type want struct{ topic, key, value string }
	wants := make(map[string]want)
	for rows.Next() {
		var id, typ, agg, payload string
		if err := rows.Scan(&id, &typ, &agg, &payload); err != nil {
			e.t.Fatal(err)
		}
		wants[id] = want{topicPrefix + typ, agg, payload}
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	seen := make(map[string]int)
	lastSeq := make(map[string]int) // by key
	partOf := make(map[string]int32)
	for _, r := range recs {
		id, ok := strings.CutPrefix(r.Headers, "id=")
		if !ok {
			e.t.Fatalf("record %s/%d@%d headers %q, want id=<event id>", r.Topic, r.Partition, r.Offset, r.Headers)
		}
		seen[id]++
		w, ok := wants[id]
		if !ok {
			e.t.Errorf("record with id %s (value %s) is not a committed outbox row", id, r.Value)
			continue
		}
		if r.Topic != w.topic || r.Key != w.key || r.Value != w.value {
			e.t.Errorf("id %s: got topic %q key %q value %q, want %q %q %q", id, r.Topic, r.Key, r.Value, w.topic, w.key, w.value)
		}
		var row outboxRow
		if err := json.Unmarshal([]byte(r.Value), &row); err != nil {
			e.t.Fatalf("id %s value %q: %v", id, r.Value, err)
		}
		if p, ok := partOf[r.Key]; ok && p != r.Partition {
			e.t.Errorf("key %s in partitions %d and %d", r.Key, p, r.Partition)
		}
		partOf[r.Key] = r.Partition
		if row.Seq <= lastSeq[r.Key] {
			e.t.Errorf("key %s: seq %d after %d, out of commit order", r.Key, row.Seq, lastSeq[r.Key])
		}
		lastSeq[r.Key] = row.Seq
	}
	for id, n := range seen {
		if n > 1 {
			e.t.Errorf("id %s delivered %d times", id, n)
		}
	}
	missing := 0
	for id := range wants {
		if seen[id] == 0 {
			missing++
		}
	}
	if missing > 0 {
		e.t.Errorf("%d of %d committed rows are missing in Kafka", missing, len(wants))
	}
	if e.t.Failed() {
		e.t.FailNow()
	}
}

// readAll reads every outbox topic the tests use.
func (e *env) readAll(types ...string) []record {
	var recs []record
	for _, typ := range types {
		recs = append(recs, e.kcat("outbox.event."+typ)...)
	}
	return recs
}

// delivered inserts n rows in one committed transaction, as insertTx
// does, and waits until walstream p confirmed them to the slot: Kafka
// holds them.
func (e *env) delivered(p *proc, typ string, n, aggs int, seq *int) {
	e.t.Helper()
	e.insertTx(typ, n, aggs, seq, false)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
}

// deliveredStopped starts walstream, delivers as delivered does, and
// stops it: what a test of a stopped walstream starts from.
func (e *env) deliveredStopped(typ string, n, aggs int, seq *int) {
	e.t.Helper()
	p := e.start(nil).streaming(e.t)
	e.delivered(p, typ, n, aggs, seq)
	if err := p.stop(); err != nil {
		e.t.Fatal(err)
	}
}

// insertTx inserts n rows in one transaction, seq continuing from *seq,
// spread over aggs aggregates of type typ; rollback discards them.
func (e *env) insertTx(typ string, n, aggs int, seq *int, rollback bool) {
	e.t.Helper()
	e.insertTxIn("postgres", typ, n, aggs, seq, rollback)
}

// insertTxIn is insertTx into the outbox of database db. It returns a
// position inside the transaction, before its commit: a slot confirmed
// past it has confirmed the transaction, whatever other databases of the
// cluster wrote since, where the cluster's current position may be out of
// reach of a slot that writes no idle checkpoints.
func (e *env) insertTxIn(db, typ string, n, aggs int, seq *int, rollback bool) pglogrepl.LSN {
	e.t.Helper()
	ctx := context.Background()
	conn := e.pg.Connect(db)
	tx, err := conn.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
		SELECT $1, $1 || '-' || (i % $4), 'Created', jsonb_build_object('seq', i, 'agg', $1 || '-' || (i % $4))
		FROM generate_series($2::int, $3::int) AS i`, typ, *seq+1, *seq+n, aggs)
	if err != nil {
		e.t.Fatal(err)
	}
	var inside string
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&inside); err != nil {
		e.t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(inside)
	if err != nil {
		e.t.Fatal(err)
	}
	if !rollback {
		*seq += n
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	conn.Close(ctx)
	return lsn
}

// TestStreamsExactlyOnce: 10k rows in transactions from 1 to 2,500 rows,
// one of them larger than a Kafka transaction, and a rolled-back one, read
// back with kcat: every row once, nothing rolled back, order per aggregate.
// It runs on every supported Postgres major; the other tests run on
// testenv.DefaultMajor.
func TestStreamsExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, major := range testenv.Majors() {
		t.Run(fmt.Sprintf("pg%d", major), func(t *testing.T) {
			t.Parallel()
			streamsExactlyOnce(t, major)
		})
	}
}

func streamsExactlyOnce(t *testing.T, major int) {
	e := newSharedEnv(t, testenv.Version(major))
	p := e.start([]string{"--max-batch-events", "1000"}).streaming(t)
	seq := 0
	sizes := []int{1, 2, 7, 50, 100, 340, 1000, 2500, 1, 999, 3000, 1000, 1000}
	for i, n := range sizes {
		typ := []string{"Order", "Customer"}[i%2]
		e.insertTx(typ, n, 37, &seq, false)
		if i == 3 {
			rolledBack := seq
			e.insertTx("Order", 100, 37, &rolledBack, true)
		}
	}
	if seq != 10000 {
		t.Fatalf("inserted %d rows, want 10000", seq)
	}
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, p)
	e.checkExactlyOnce(e.readAll("Order", "Customer"), "outbox.event.")
	if err := p.stop(); err != nil {
		t.Fatalf("walstream exit after SIGTERM: %v", err)
	}
}

// TestCrashBetweenKafkaCommitAndAck kills walstream with SIGKILL right
// after a Kafka commit, before Postgres hears of it, once in a run of whole
// transactions and once inside a transaction split over Kafka
// transactions. The restart replays from the slot, the checkpoint filter
// drops what Kafka has, and nothing is lost or duplicated. It runs on every
// transaction protocol walstream meets: Kafka 4.x with transaction version
// 2, 1 and 0, and Kafka 3.9 (see crashKinds).
func TestCrashBetweenKafkaCommitAndAck(t *testing.T) {
	t.Parallel()
	for _, kind := range crashKinds() {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			crashBetweenKafkaCommitAndAck(t, kind)
		})
	}
}

// crashKinds are the brokers the crash test runs on: the tests' broker
// and, when that is Apache Kafka 4.x, the classic transaction protocol on
// 4.x (transaction versions 1 and 0) and on Kafka 3.9. Only this test runs
// on them: it is the one that sees a commit, a crash and a replay meet.
func crashKinds() []testenv.BrokerKind {
	if kind := testenv.TestBroker(); kind != testenv.BrokerKafka {
		return []testenv.BrokerKind{kind}
	}
	return testenv.KafkaKinds()
}

func crashBetweenKafkaCommitAndAck(t *testing.T, kind testenv.BrokerKind) {
	e := newEnvOn(t, kind)
	if want, ok := map[testenv.BrokerKind]int16{testenv.BrokerKafka: 2, testenv.BrokerKafkaTV1: 1, testenv.BrokerKafkaTV0: 0, testenv.BrokerKafka39: 0}[kind]; ok {
		if got := transactionVersion(t, e.broker); got != want {
			t.Fatalf("%s runs transaction.version %d, want %d", e.kafka, got, want)
		}
	}
	seq := 0
	// Backlog first, so the crash lands in the middle of it.
	e.start(nil).streaming(t).stop()
	for _, n := range []int{300, 1, 450, 5000, 20, 800} {
		e.insertTx("Order", n, 23, &seq, false)
	}
	end := e.currentLSN()
	for _, crash := range []string{"after-commit:2", "after-commit:5"} {
		p := e.start([]string{"--max-batch-events", "500", "--linger", "0s"}, "WALSTREAM_CRASH_AT="+crash)
		err := p.wait(t, 60*time.Second)
		if !p.KilledBy(syscall.SIGKILL) {
			t.Fatalf("walstream with WALSTREAM_CRASH_AT=%s exited with %v, want killed by SIGKILL\n%s", crash, err, p.Log())
		}
		if !strings.Contains(p.Log(), "crash point after-commit reached") {
			t.Fatalf("crash point not reached:\n%s", p.Log())
		}
	}
	p := e.start(nil)
	e.waitConfirmed("walstream", end, 60*time.Second, p)
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart:\n%s", grepLines(p.Log(), "resuming|session ended"))
	if !regexpFind(`replayed_events_skipped=[1-9]`, p.Log()) {
		t.Errorf("the restart skipped no replayed events; the crash should have left committed events unconfirmed:\n%s", p.Log())
	}
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
}

// transactionVersion is the cluster's finalized transaction.version, from
// ApiVersions: 0 where the feature is not finalized (Kafka 3.9).
func transactionVersion(t *testing.T, broker string) int16 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(broker, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatalf("asking %s for its API versions: %v", broker, err)
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel
		}
	}
	return 0
}

// TestIdleOutboxDoesNotPinWAL: while the outbox is quiet and another table
// writes 50 MB of WAL, the slot's confirmed_flush_lsn moves past it.
func TestIdleOutboxDoesNotPinWAL(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	p := e.start(nil).streaming(t)
	seq := 0
	e.insertTx("Order", 10, 3, &seq, false)
	e.pg.Exec("postgres", "CREATE TABLE filler (x text)")
	before := e.currentLSN()
	e.pg.Exec("postgres", "INSERT INTO filler SELECT repeat(md5(i::text), 32) FROM generate_series(1, 50000) AS i")
	after := e.currentLSN()
	if after-before < 50<<20 {
		t.Fatalf("filler wrote %d bytes of WAL, want at least 50 MB", after-before)
	}
	e.waitConfirmed("walstream", after, 30*time.Second, p)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
}

// TestSecondInstanceWaits: a second walstream on the same slot waits while
// the first streams, takes over when the first dies, and no row is
// duplicated or lost across the handover.
func TestSecondInstanceWaits(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	first := e.start(nil).streaming(t)
	second := e.start([]string{"--progress-interval", "1s"})
	second.waitLog(t, "is active for PID", 30*time.Second)
	// The standby names the process holding the slot, again and again.
	second.waitLog(t, `standby: slot \"walstream\" is held by pid`, 30*time.Second)
	testenv.Eventually(t, 30*time.Second, "the standby says whom it waits for at every progress interval", func() bool {
		return strings.Count(second.Log(), `msg="standby: slot \"walstream\" is held by pid`) >= 2
	})
	wantAll(t, grepLines(second.Log(), "standby: slot"), "(walsender, application walstream, client 127.0.0.1:", "holder_pid=")
	seq := 0
	e.insertTx("Order", 500, 11, &seq, false)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, first)
	if strings.Contains(second.Log(), "msg=streaming") {
		t.Fatalf("second instance streamed while the first held the slot:\n%s", second.Log())
	}
	first.Kill()
	e.insertTx("Order", 500, 11, &seq, false)
	second.streaming(t)
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, second)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
}

func regexpFind(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

func grepLines(s, pattern string) string {
	re := regexp.MustCompile(pattern)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// exitMessage waits for walstream to fail and returns its last line.
func exitMessage(t *testing.T, p *proc) string {
	t.Helper()
	err := p.wait(t, 60*time.Second)
	if err == nil {
		t.Fatalf("walstream exited 0, want a failure\n%s", p.Log())
	}
	lines := strings.Split(strings.TrimSpace(p.Log()), "\n")
	return lines[len(lines)-1]
}

func wantAll(t *testing.T, msg string, parts ...string) {
	t.Helper()
	for _, part := range parts {
		if !strings.Contains(msg, part) {
			t.Errorf("message %q does not mention %q", msg, part)
		}
	}
}

// TestSlotAheadOfCheckpoint: a slot dropped and recreated after streaming
// starts beyond what Kafka holds; walstream refuses it until told that the
// gap is accepted.
func TestSlotAheadOfCheckpoint(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	seq := 0
	e.deliveredStopped("Order", 5, 2, &seq)
	e.pg.Exec("postgres", "SELECT pg_drop_replication_slot('walstream')")
	e.insertTx("Order", 5, 2, &seq, false) // lost with the slot
	e.pg.Exec("postgres", "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')")

	msg := exitMessage(t, e.start(nil))
	wantAll(t, msg, "slot is ahead of the checkpoint", `slot "walstream"`, "events in between may be missing", "--allow-slot-ahead")

	p := e.start([]string{"--allow-slot-ahead"}).streaming(t)
	e.delivered(p, "Order", 5, 2, &seq)
	if got := len(e.readAll("Order")); got != 10 {
		t.Fatalf("%d records after the accepted gap, want the 5 before it and the 5 after", got)
	}
}

// TestSharedTransactionalID: two instances on different slots sharing a
// transactional id fence each other. Neither holds the other's slot, so
// each first takes a fencing for a bumped epoch and restarts; the run of
// fencings then stops them with a message naming the setting.
func TestSharedTransactionalID(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	id := e.ns + "shared"
	first := e.start([]string{"--transactional-id", id}).streaming(t)
	second := e.start([]string{"--transactional-id", id, "--slot", "other", "--checkpoint-key", "other"}).streaming(t)
	seq := 0
	for i := 0; i < 40; i++ {
		e.insertTx("Order", 5, 2, &seq, false)
		select {
		case <-first.Done():
		case <-second.Done():
		case <-time.After(500 * time.Millisecond):
			continue
		}
		break
	}
	var p *proc
	select {
	case <-first.Done():
		p = first
	case <-second.Done():
		p = second
	case <-time.After(60 * time.Second):
		t.Fatal("neither instance stopped")
	}
	wantAll(t, exitMessage(t, p), "fenced", "transactional id "+id+" was fenced 3 times", "check --transactional-id")
}

// TestBadRowStops: an outbox row with a NULL aggregate type stops
// walstream before anything past it is confirmed, naming the LSN, the
// table, the event id and the column. The Kafka transaction open at the
// stop, which holds the row before it, is aborted: read_committed readers
// of its partition do not wait for Kafka's transaction timeout.
func TestBadRowStops(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "ALTER TABLE outbox ALTER COLUMN aggregatetype DROP NOT NULL")
	// A long linger keeps the good row's Kafka transaction open when the
	// bad row arrives.
	p := e.start([]string{"--linger", "3s"}).streaming(t)
	seq := 0
	e.delivered(p, "Order", 3, 2, &seq)
	e.insertTx("Order", 1, 1, &seq, false)
	e.pg.Exec("postgres", `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES ('00000000-0000-0000-0000-0000000000aa', NULL, 'a-1', 'Created', '{"seq": 99}')`)
	after := e.currentLSN()
	msg := exitMessage(t, p)
	wantAll(t, msg, "at LSN 0/", `table public.outbox`, "event id 00000000-0000-0000-0000-0000000000aa",
		"column aggregatetype", "aggregate type is NULL")
	if got := e.confirmedLSN("walstream"); got >= after {
		t.Fatalf("confirmed_flush_lsn %s reached %s, past a row that was not delivered", got, after)
	}
	// Kafka's timeout would end the open transaction 20 s after it began
	// at the earliest (twice the tests' --commit-timeout of 10 s);
	// walstream's abort ends it at its stop. 10 s tells one from the
	// other and leaves a loaded machine time to read the offsets.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := testenv.WaitStable(ctx, e.broker, e.topic("outbox.event.Order")); err != nil {
		t.Fatalf("outbox.event.Order still has a transaction open after walstream stopped: %v", err)
	}
}

// TestSlotDroppedWhileStreaming: the walsender is terminated and the slot
// dropped; walstream stops instead of recreating it, which would hide a
// gap: it finds no slot when it reconnects (with or without a checkpoint
// in Kafka yet), or its slot monitor, whose first poll may come after the
// drop on a busy machine, finds it gone.
func TestSlotDroppedWhileStreaming(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	p := e.start(nil).streaming(t)
	conn := e.pg.Connect("postgres")
	ctx := context.Background()
	// The slot cannot be dropped while active; terminate until it is free.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _ = conn.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walstream' AND active")
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot('walstream')"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("dropping the slot: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	msg := exitMessage(t, p)
	wantAll(t, msg, `slot "walstream"`)
	if !strings.Contains(msg, "does not exist") && !strings.Contains(msg, "was dropped while streaming") {
		t.Errorf("message %q does not say the slot does not exist or was dropped", msg)
	}
	if e.confirmedLSN("walstream") != 0 {
		t.Fatal("walstream recreated the dropped slot")
	}
}

// TestSurvivesRestartsAndCuts: Postgres restarts (fast and immediate), a
// terminated walsender and broker restarts (clean and killed), each while
// rows keep coming. walstream reconnects by itself and every row arrives
// once.
func TestSurvivesRestartsAndCuts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	restartBroker := func(sig syscall.Signal) func() {
		return func() {
			if err := e.kafka.Restart(sig); err != nil {
				t.Fatal(err)
			}
		}
	}
	survives(t, e, []fault{
		{"postgres fast restart", func() {
			if err := e.pg.Restart("fast"); err != nil {
				t.Fatal(err)
			}
		}},
		{"postgres immediate restart", func() {
			if err := e.pg.Restart("immediate"); err != nil {
				t.Fatal(err)
			}
		}},
		{"walsender terminated", func() {
			e.pg.Exec("postgres", "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walstream'")
		}},
		{"broker restart", restartBroker(syscall.SIGTERM)},
		{"broker killed", restartBroker(syscall.SIGKILL)},
	}, "postgres", "kafka")
}

// TestKafkaCommitRefused: the broker answers a Kafka commit (EndTxn) with
// an error. Those franz-go retries by itself (CONCURRENT_TRANSACTIONS after
// a restart, COORDINATOR_LOAD_IN_PROGRESS after a coordinator moved) cost a
// moment and nothing else. The others (INVALID_TXN_STATE, and
// TRANSACTION_ABORTABLE, which KIP-890 brokers return for a transaction
// that must be aborted) fail the commit: walstream logs the cause, counts
// it, restarts its session from the checkpoint, and every row arrives once.
// It runs on kfake: only kfake can answer one request of walstream's with
// an error.
func TestKafkaCommitRefused(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testenv.BrokerKfake)
	var answered atomic.Int32
	refuse := func(code int16) func() {
		return func() {
			e.kafka.(*testenv.Kfake).Cluster().ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				r := req.(*kmsg.EndTxnRequest)
				if !r.Commit {
					return nil, nil, false
				}
				answered.Add(1)
				resp := r.ResponseKind().(*kmsg.EndTxnResponse)
				resp.ErrorCode = code
				return resp, nil, true
			})
		}
	}
	p := survives(t, e, []fault{
		{"CONCURRENT_TRANSACTIONS", refuse(kerr.ConcurrentTransactions.Code)},
		{"COORDINATOR_LOAD_IN_PROGRESS", refuse(kerr.CoordinatorLoadInProgress.Code)},
		{"INVALID_TXN_STATE", refuse(kerr.InvalidTxnState.Code)},
		{"TRANSACTION_ABORTABLE", refuse(kerr.TransactionAbortable.Code)},
	}, "kafka")
	if got := answered.Load(); got != 4 {
		t.Errorf("%d injected EndTxn errors answered, want 4", got)
	}
	failed := grepLines(p.Log(), "Kafka transaction failed")
	for _, want := range []string{
		`Kafka transaction failed: the transaction coordinator refused the transaction's state change" stream=postgres/walstream slot=walstream cause=invalid_txn_state`,
		`Kafka transaction failed: the broker asked for the transaction to be aborted" stream=postgres/walstream slot=walstream cause=transaction_abortable`,
	} {
		if !strings.Contains(failed, want) {
			t.Errorf("no %q logged:\n%s", want, failed)
		}
	}
	if n := strings.Count(failed, "\n") + 1; failed == "" || n != 2 {
		t.Errorf("%d Kafka transaction failures logged, want 2 (franz-go retries the other two):\n%s", n, failed)
	}
}

// fault is a named fault a test injects.
type fault struct {
	name   string
	inject func()
}

// survives runs walstream under load through each fault in turn, waits
// until the slot confirms everything after each, checks that every row
// arrived once, and that a session ended and restarted for each peer named.
func survives(t *testing.T, e *env, faults []fault, peers ...string) *proc {
	t.Helper()
	p := e.start([]string{"--max-batch-events", "200"}).streaming(t)
	seq := 0
	batch := func() {
		for i := 0; i < 4; i++ {
			e.insertTx("Order", 1+i*150, 17, &seq, false)
		}
	}
	for _, f := range faults {
		batch()
		f.inject()
		batch()
		e.waitConfirmed("walstream", e.currentLSN(), 90*time.Second, p)
		t.Logf("%s: %d rows so far", f.name, seq)
	}
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	log := p.Log()
	for _, peer := range peers {
		if !regexpFind(`msg="session ended, restarting from the checkpoint" stream=postgres/walstream slot=walstream peer=`+peer, log) {
			t.Errorf("no session restart attributed to %s:\n%s", peer, grepLines(log, "session ended"))
		}
	}
	return p
}
