package main

import (
	"strings"
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
	kafka := testenv.StartKafkaAsync(t, testenv.KafkaConfig{Props: map[string]string{
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": abortCleanup}})
	e := newEnvWith(t, func() testenv.Broker { return kafka() })
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
	wantAll(t, grepLines(log, "session ended, restarting"), "aborted the open transaction of transactional id walstream-walstream",
		"past the transaction timeout of 10s", "no other producer took the transactional id")
	if got := metric(t, addr, `walstream_kafka_transaction_failures_total{cause="aborted_by_coordinator"}`); got != 1 {
		t.Errorf("walstream_kafka_transaction_failures_total{cause=aborted_by_coordinator} = %v, want 1", got)
	}
	if got := metric(t, addr, `walstream_errors_total{kind="transaction_aborted"}`); got != 1 {
		t.Errorf("walstream_errors_total{kind=transaction_aborted} = %v, want 1", got)
	}
}
