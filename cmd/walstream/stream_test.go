package main

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// smallWorkMem makes Postgres stream, or with streaming off spill, any
// transaction over 64kB: logical_decoding_work_mem's least.
var smallWorkMem = testenv.Settings("logical_decoding_work_mem = '64kB'")

// openTx is a transaction left open on a connection of its own.
type openTx struct {
	e    *env
	conn *pgx.Conn
}

func (e *env) begin() *openTx {
	e.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.pg.URL("postgres", "postgres"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		e.t.Fatal(err)
	}
	return &openTx{e, conn}
}

// insert inserts n rows of type typ in the open transaction, seq going on
// from *seq, unless rolled back later.
func (o *openTx) insert(typ string, n, aggs int, seq *int) {
	o.e.t.Helper()
	_, err := o.conn.Exec(context.Background(), `INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
		SELECT $1, $1 || '-' || (i % $4), 'Created', jsonb_build_object('seq', i, 'agg', $1 || '-' || (i % $4), 'pad', repeat('p', 200))
		FROM generate_series($2::int, $3::int) AS i`, typ, *seq+1, *seq+n, aggs)
	if err != nil {
		o.e.t.Fatal(err)
	}
	*seq += n
}

func (o *openTx) exec(sql string) {
	o.e.t.Helper()
	if _, err := o.conn.Exec(context.Background(), sql); err != nil {
		o.e.t.Fatalf("%s: %v", sql, err)
	}
}

// published counts the records of outbox topic outbox.event.<typ>, 0
// when the topic was never created.
func (e *env) published(typ string) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs, err := testenv.Kcat(ctx, e.broker, e.topic("outbox.event."+typ))
	if err != nil && strings.Contains(err.Error(), "Unknown topic") {
		return 0
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return len(recs)
}

// slotDecoding reads the slot's pg_stat_replication_slots counters.
func (e *env) slotDecoding() (spillBytes, streamTxns, streamBytes int64) {
	e.t.Helper()
	err := e.pg.Connect("postgres").QueryRow(context.Background(),
		"SELECT spill_bytes, stream_txns, stream_bytes FROM pg_stat_replication_slots WHERE slot_name = 'walstream'").Scan(&spillBytes, &streamTxns, &streamBytes)
	if err != nil {
		e.t.Fatal(err)
	}
	return
}

// TestStreamedTransactions: with streaming of in-progress transactions,
// outbox transactions larger than logical_decoding_work_mem arrive as they
// go, interleaved, and walstream keeps them until they commit. One rolls
// back to a savepoint after rows streamed, one aborts after hundreds of
// rows streamed, one of 20,000 rows is split over Kafka transactions;
// walstream is killed while a transaction is open, in the middle of a
// stream, and while it replays a committed one, and its walsender is
// terminated mid-stream. Every committed row arrives exactly
// once, nothing rolled back arrives, and nothing arrives before its
// transaction commits.
func TestStreamedTransactions(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t, smallWorkMem)
	args := []string{"--max-batch-events", "500"}
	p := e.start(args).streaming(t)
	var seqA, seqB, seqPlain, seqHuge int
	a, b := e.begin(), e.begin()
	a.insert("Streamed", 400, 9, &seqA)
	b.insert("Aborted", 400, 9, &seqB)
	e.insertTx("Plain", 5, 3, &seqPlain, false)
	a.exec("SAVEPOINT s")
	discarded := seqA
	a.insert("Streamed", 600, 9, &discarded) // rolled back below, once streamed
	b.insert("Aborted", 400, 9, &seqB)
	a.exec("ROLLBACK TO SAVEPOINT s")
	a.insert("Streamed", 300, 9, &seqA)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	if n := e.published("Streamed") + e.published("Aborted"); n != 0 {
		t.Fatalf("%d rows of open transactions published before their commit", n)
	}
	if _, streamed, _ := e.slotDecoding(); streamed == 0 {
		t.Fatal("Postgres streamed no transaction: the test does not test streaming")
	}
	b.exec("ROLLBACK")
	a.exec("COMMIT")
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	if got := e.published("Streamed"); got != seqA {
		t.Fatalf("%d rows of the streamed transaction published after its commit, want the %d not rolled back", got, seqA)
	}

	// Killed with a transaction streamed and open: the next session gets
	// it again from its start. Then its walsender is terminated in the
	// middle of a stream.
	a = e.begin()
	a.insert("Streamed", 400, 9, &seqA)
	p.Kill()
	p = e.start(args).streaming(t)
	a.insert("Streamed", 300, 9, &seqA)
	e.pg.Exec("postgres", "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walstream'")
	a.insert("Streamed", 200, 9, &seqA)
	a.exec("COMMIT")
	e.insertTx("Plain", 5, 3, &seqPlain, false)
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, p)

	// A huge transaction, killed while its spool is replayed into Kafka
	// transactions, and killed in the middle of its stream.
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	huge := e.begin()
	huge.insert("Huge", 10000, 50, &seqHuge)
	p = e.start(args, "WALSTREAM_CRASH_AT=mid-stream:50").streaming(t)
	huge.insert("Huge", 10000, 50, &seqHuge)
	if err := p.wait(t, 60*time.Second); !p.KilledBy(syscall.SIGKILL) || !strings.Contains(p.Log(), "crash point mid-stream reached") {
		t.Fatalf("walstream armed to crash mid-stream: %v\n%s", err, p.LastLines(10))
	}
	p = e.start(args, "WALSTREAM_CRASH_AT=mid-transaction:7000")
	huge.exec("COMMIT")
	if err := p.wait(t, 60*time.Second); !p.KilledBy(syscall.SIGKILL) || !strings.Contains(p.Log(), "crash point mid-transaction reached") {
		t.Fatalf("walstream armed to crash replaying the huge transaction: %v\n%s", err, p.LastLines(10))
	}
	p = e.start(args)
	e.waitConfirmed("walstream", e.currentLSN(), 120*time.Second, p)

	if n := e.published("Aborted"); n != 0 {
		t.Fatalf("%d rows of the aborted streamed transaction published", n)
	}
	recs := e.readAll("Streamed", "Plain", "Huge")
	e.checkExactlyOnce(recs, "outbox.event.")
	if got, want := len(recs), seqA+seqPlain+seqHuge; got != want {
		t.Fatalf("%d records, want %d", got, want)
	}
	out, err := walstreamCmd(t, slices.Concat([]string{"status", "--json", "--pg-url", e.pg.URL("postgres", "postgres")}, e.kafkaArgs())...)
	var r statusReport
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil || r.Slot.Decoding == nil || r.Slot.Decoding.StreamedTransactions == 0 {
		t.Errorf("status --json (%v, %v) shows no streamed transaction:\n%s", err, jerr, out)
	}
	if !regexpFind(`msg=streaming .*stream_in_progress=true`, p.Log()) {
		t.Errorf("walstream did not say it streams transactions in progress:\n%s", grepLines(p.Log(), "msg=streaming"))
	}
}

// TestStreamedMessageRolledBack: a logical decoding message emitted in a
// subtransaction that rolls back after it was streamed. pgoutput sends a
// streamed message with the top-level transaction's xid, so the stream
// cannot tell it from a message of the top level: walstream publishes the
// transaction neither with it nor from the stream. The next session has
// Postgres send it whole at its commit, without what rolled back, and
// every committed row and message arrives once.
func TestStreamedMessageRolledBack(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t, smallWorkMem)
	p := e.start(nil).streaming(t)
	note := func(id string) string {
		return `SELECT pg_logical_emit_message(true, 'walstream', '{"id": "` + id + `", "aggregatetype": "Note", "aggregateid": "n", "type": "Noted", "payload": {"n": 1}}')`
	}
	var seq int
	a := e.begin()
	a.insert("Streamed", 400, 9, &seq)
	a.exec("SAVEPOINT s")
	a.exec(note("m-rolled-back"))
	discarded := seq
	a.insert("Streamed", 400, 9, &discarded) // streams the message
	a.exec("ROLLBACK TO SAVEPOINT s")
	a.exec(note("m-committed"))
	a.insert("Streamed", 100, 9, &seq)
	a.exec("COMMIT")
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, p)
	if _, streamed, _ := e.slotDecoding(); streamed == 0 {
		t.Fatal("Postgres streamed no transaction: the test does not test streaming")
	}
	e.checkExactlyOnce(e.readAll("Streamed"), "outbox.event.")
	if notes := e.kcat("outbox.event.Note"); len(notes) != 1 || notes[0].Headers != "id=m-committed" {
		t.Fatalf("messages published: %+v, want m-committed alone", notes)
	}
	for _, want := range []string{"must be received whole, not streamed", "has Postgres send each transaction whole at its commit"} {
		if !strings.Contains(p.Log(), want) {
			t.Errorf("walstream's log does not say %q", want)
		}
	}
}

// bigForeignTx is a transaction on a table outside the publication, over
// logical_decoding_work_mem many times, that takes a few seconds.
const bigForeignTx = `DO $$ BEGIN
	FOR i IN 1..20 LOOP
		INSERT INTO big SELECT g, repeat('x', 50) FROM generate_series(1, 15000) g;
		PERFORM pg_sleep(0.15);
	END LOOP;
END $$`

// visibleAfter returns how long after start the first record of topic
// became visible to a read_committed consumer.
func (e *env) visibleAfter(topic string, start time.Time, within time.Duration) time.Duration {
	e.t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := 0
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := testenv.ReadCommitted(ctx, e.broker, e.topic(topic), func(*kgo.Record) { n++ })
		cancel()
		if err == nil && n > 0 {
			return time.Since(start)
		}
	}
	e.t.Fatalf("nothing in %s within %s", topic, within)
	return 0
}

// TestForeignBigTransaction: an outbox row committed right after a large
// transaction on another table. With streaming of in-progress
// transactions off, Postgres spills the large one to disk and decodes it
// again at its commit, and walstream status, asked while it runs, says the
// slot is behind because of it. With it on (the default), Postgres streams
// it as it goes, filtering its rows out, spills nothing, and status says
// that nothing waits for it.
func TestForeignBigTransaction(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t, smallWorkMem)
	e.pg.Exec("postgres", "CREATE TABLE big (n int, pad text)")
	// Streaming first: a session that starts again decodes the WAL since
	// the slot's restart_lsn again, without streaming up to where it had
	// confirmed, so the second session may spill the first one's large
	// transaction once more.
	for _, on := range []bool{true, false} {
		p := e.start([]string{"--stream-in-progress=" + strconv.FormatBool(on)}).streaming(t)
		spill0, _, stream0 := e.slotDecoding()
		topic := map[bool]string{false: "AfterSpilled", true: "AfterStreamed"}[on]
		committed := make(chan time.Time, 1)
		go func() {
			conn, err := pgx.Connect(context.Background(), e.pg.URL("postgres", "postgres"))
			if err != nil {
				committed <- time.Time{}
				return
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(context.Background(), bigForeignTx); err != nil {
				committed <- time.Time{}
				return
			}
			_, err = conn.Exec(context.Background(), `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ($1, 'x', 'Created', '{"seq": 1}')`, topic)
			if err != nil {
				committed <- time.Time{}
				return
			}
			committed <- time.Now()
		}()
		// Status is asked until it names the large transaction, which runs
		// for seconds; it must do so before the transaction ends.
		want := map[bool]string{false: "and spilling it to disk", true: "streams a large transaction in progress"}[on]
		var r statusReport
		var at time.Time
		named, ended := false, false
		for !named && !ended {
			out, err := walstreamCmd(t, slices.Concat([]string{"status", "--json", "--pg-url", e.pg.URL("postgres", "postgres")}, e.kafkaArgs())...)
			r = statusReport{}
			if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
				t.Fatalf("status --json: %v, %v\n%s", err, jerr, out)
			}
			named = strings.Contains(r.Slot.BehindBecause, want)
			select {
			case at = <-committed:
				ended = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !named {
			t.Errorf("streaming %v: status during the large transaction: behind because %q, want %q (caught up %v, decoding %+v)",
				on, r.Slot.BehindBecause, want, r.Slot.CaughtUp, r.Slot.Decoding)
		}
		if !ended {
			at = <-committed
		}
		if at.IsZero() {
			t.Fatal("the large transaction or the outbox row failed")
		}
		lat := e.visibleAfter("outbox.event."+topic, at, 60*time.Second)
		var spill1, stream1 int64
		testenv.Eventually(t, 10*time.Second, "the slot's statistics count the transaction", func() bool {
			spill1, _, stream1 = e.slotDecoding()
			return spill1 > spill0 || stream1 > stream0
		})
		t.Logf("streaming %v: the outbox row visible %s after its commit; Postgres spilled %d bytes and streamed %d for the large transaction",
			on, lat.Round(time.Millisecond), spill1-spill0, stream1-stream0)
		if on && (spill1 != spill0 || stream1 == stream0) {
			t.Errorf("streaming on: spilled %d bytes and streamed %d, want nothing spilled", spill1-spill0, stream1-stream0)
		}
		if !on && spill1 == spill0 {
			t.Errorf("streaming off: nothing spilled; the transaction is too small to test anything")
		}
		// The spill counters above tell streaming from spilling; the
		// latency bound only catches a stall, and leaves a loaded machine
		// (a commit to Kafka, the reads that poll for it) its time.
		if on && lat > 20*time.Second {
			t.Errorf("streaming on: the outbox row visible %s after its commit", lat)
		}
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
	}
}
