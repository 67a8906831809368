package main

import (
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// Behaviours of Apache Kafka that kfake does not have, each tested on the
// broker users run.

// abortCleanup is how often the test brokers look for transactions past
// their timeout (transaction.abort.timed.out.transaction.cleanup.interval.ms,
// 10 s by default), so that a test waits for the abort seconds, not tens.
const abortCleanup = "500"

// TestKafkaAbortsTimedOutTransaction: walstream stops (SIGSTOP) with a
// Kafka transaction open, for longer than its transaction timeout. Kafka's
// transaction coordinator aborts the transaction and bumps the producer
// epoch, which fences the producer. On SIGCONT walstream must tell this
// from another instance taking over: it says the coordinator aborted the
// transaction, counts it by cause, restarts its session from the
// checkpoint, and every row arrives once.
func TestKafkaAbortsTimedOutTransaction(t *testing.T) {
	t.Parallel()
	kafka := testenv.StartKafkaAsync(t, testenv.KafkaConfig{Props: map[string]string{
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": abortCleanup}})
	e := startEnv(t, func() testenv.Broker { return kafka() }, outboxDDL)
	// A commit timeout of 5 s asks for a transaction timeout of 10 s. The
	// first commit is the first checkpoint; the second carries rows.
	p := e.start([]string{"--commit-timeout", "5s", "--http-addr", "127.0.0.1:0"}, "WALSTREAM_CRASH_AT=before-commit:2:stop").streaming(t)
	addr := p.httpAddr(t)
	seq := 0
	e.insertTx("Order", 20, 5, &seq, false)
	p.waitLog(t, "stop point before-commit reached", 30*time.Second)
	time.Sleep(12 * time.Second)
	p.Signal(syscall.SIGCONT)
	p.waitLog(t, "Kafka transaction failed: Kafka's transaction coordinator aborted the open transaction", 30*time.Second)
	e.insertTx("Order", 20, 5, &seq, false)
	e.waitConfirmed("walstream", e.currentLSN(), 60*time.Second, p)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	log := p.Log()
	if strings.Contains(log, "another producer") || strings.Contains(log, "took over") {
		t.Errorf("a transaction Kafka aborted on timeout was reported as another producer:\n%s", grepLines(log, "fenced|another|aborted"))
	}
	wantAll(t, grepLines(log, "session ended, restarting"), "aborted the open transaction of transactional id walstream-postgres/walstream",
		"past the transaction timeout of 10s", "no other producer took the transactional id")
	if got := metric(t, addr, `walstream_kafka_transaction_failures_total{cause="aborted_by_coordinator"}`); got != 1 {
		t.Errorf("walstream_kafka_transaction_failures_total{cause=aborted_by_coordinator} = %v, want 1", got)
	}
	if got := metric(t, addr, `walstream_errors_total{kind="transaction_aborted"}`); got != 1 {
		t.Errorf("walstream_errors_total{kind=transaction_aborted} = %v, want 1", got)
	}
}

// hideCheckpoints makes kfake answer every fetch of the checkpoint topic
// with nothing from where it starts until hold is cleared; held is set once
// it has.
func hideCheckpoints(e *env) (hold, held *atomic.Bool) {
	hold, held = e.kafka.(*testenv.Kfake).HideFetches("walstream.checkpoints")
	hold.Store(true)
	return hold, held
}

// TestCommitNotVisible: Kafka acknowledges a commit, but no marker
// follows its checkpoint record, as when Kafka leaves a transaction
// undecided. walstream must not confirm that position to Postgres: it fails
// the commit after the commit timeout, saying why, and goes on once the
// partition shows the commit; every row arrives once. It runs on kfake:
// only kfake can answer walstream's fetches as it is told. The commit
// timeout bounds every commit, the first ones too: 4 s, not 2, lets those
// through on a loaded machine, where a session they ended would be
// restarted before the one the test is about.
func TestCommitNotVisible(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testenv.BrokerKfake)
	p := e.start([]string{"--commit-timeout", "4s"}).streaming(t)
	seq := 0
	e.delivered(p, "Order", 5, 2, &seq)
	before := e.confirmedLSN("walstream")
	hold, _ := hideCheckpoints(e)
	e.insertTx("Order", 5, 2, &seq, false)
	p.waitLog(t, "Kafka transaction failed: a commit Kafka acknowledged was not decided on the checkpoint partition", 30*time.Second)
	if got := e.confirmedLSN("walstream"); got != before {
		t.Errorf("the slot confirmed %s (from %s) while the commit was not visible", got, before)
	}
	hold.Store(false)
	e.delivered(p, "Order", 5, 2, &seq)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	wantAll(t, grepLines(p.Log(), "session ended, restarting"), "Kafka acknowledged the commit of checkpoint", "but no commit marker followed its record", "within 4s")
}

// TestPartCommitNotVisible is TestCommitNotVisible for the part of a
// transaction larger than a Kafka transaction: a part's commit is settled
// when the next part commits, and a part that is not decided stops the
// next from committing, whose checkpoint covers it.
func TestPartCommitNotVisible(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testenv.BrokerKfake)
	p := e.start([]string{"--commit-timeout", "4s", "--max-batch-events", "4"}).streaming(t)
	seq := 0
	e.delivered(p, "Order", 3, 2, &seq)
	before := e.confirmedLSN("walstream")
	hold, held := hideCheckpoints(e)
	e.insertTx("Order", 10, 2, &seq, false) // parts of 4, 4 and 2 events
	p.waitLog(t, "Kafka transaction failed: a commit Kafka acknowledged was not decided on the checkpoint partition", 30*time.Second)
	if got := e.confirmedLSN("walstream"); got != before {
		t.Errorf("the slot confirmed %s (from %s) while a part's commit was not visible", got, before)
	}
	hold.Store(false)
	if !held.Load() {
		t.Fatal("no fetch of the checkpoint topic was held")
	}
	e.delivered(p, "Order", 3, 2, &seq)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	// The first part's marker was looked for as the second committed: its
	// checkpoint, at the part's fourth event, is the one named.
	wantAll(t, grepLines(p.Log(), "session ended, restarting"), "Kafka acknowledged the commit of checkpoint", "+4 events of the transaction committed at", "but no commit marker followed its record", "within 4s")
	// The second part was not committed: the next session resumed from
	// the first.
	streaming := strings.Split(grepLines(p.Log(), "msg=streaming"), "\n")
	if len(streaming) < 2 {
		t.Fatalf("want a second session, got %q", streaming)
	}
	wantAll(t, streaming[1], "+4 events of the transaction committed at")
}
