package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/internal/testenv"
)

// TestSlotCreationWaitsNamed: a transaction is open when walstream first
// starts, so the slot it creates must wait for it to end, as Postgres
// requires. While it waits, walstream names that transaction (its PID,
// xid, application and state, not its query) in the log at every progress
// interval and on /readyz, and `walstream status` says the slot is being
// created, not streamed. Once the transaction ends walstream streams.
func TestSlotCreationWaitsNamed(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	ctx := context.Background()
	long, err := pgx.Connect(ctx, e.pg.URL("postgres", "postgres")+"&application_name=nightly_report")
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close(ctx)
	var pid int32
	if err := long.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(ctx, "BEGIN; SELECT txid_current() /* payroll */"); err != nil {
		t.Fatal(err)
	}
	p := e.start([]string{"--progress-interval", "1s", "--http-addr", "127.0.0.1:0"})
	addr := p.httpAddr(t)
	p.waitLog(t, "waiting for 1 transaction to end", 30*time.Second)
	testenv.Eventually(t, 30*time.Second, "the wait logged again at the progress interval", func() bool {
		return strings.Count(p.Log(), "waiting for 1 transaction to end") >= 2
	})
	line := grepLines(p.Log(), "waiting for 1 transaction to end")
	wantAll(t, line, `creating slot \"walstream\"`, "application nightly_report", "state idle in transaction", "xid age", "blockers=1")
	if !strings.Contains(line, "pid "+strconv.Itoa(int(pid))+" (") || strings.Contains(p.Log(), "payroll") {
		t.Errorf("the wait does not name pid %d, or shows its query:\n%s", pid, line)
	}
	code, body := httpGet(addr, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not streaming: creating slot") || !strings.Contains(body, "nightly_report") {
		t.Errorf("/readyz while the slot waits: %d %q", code, body)
	}
	out, err := walstreamCmd(t, slices.Concat([]string{"status", "--json", "--pg-url", e.pg.URL("postgres", "postgres")}, e.kafkaArgs())...)
	var r statusReport
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("status --json (%v): %v\n%s", err, jerr, out)
	}
	if r.Streaming || r.Slot.Creating == nil || len(r.Slot.Creating.WaitingFor) != 1 || r.Slot.Creating.WaitingFor[0].PID != pid ||
		r.Slot.Creating.WaitingFor[0].Application != "nightly_report" || r.Slot.CaughtUp || r.Slot.ConfirmedFlush != "" {
		t.Errorf("status while the slot waits: streaming %v, slot %+v", r.Streaming, r.Slot)
	}
	out, _ = walstreamCmd(t, slices.Concat([]string{"status", "--pg-url", e.pg.URL("postgres", "postgres")}, e.kafkaArgs())...)
	wantAll(t, out, "waiting for 1 transaction to end", "nightly_report", "none yet")
	if !regexpFind(`streaming\s+no, creating slot "walstream"`, out) || regexpFind(`streaming\s+yes`, out) {
		t.Errorf("status calls a slot being created streaming:\n%s", out)
	}

	if _, err := long.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	p.streaming(t)
	p.waitLog(t, `msg="slot created"`, 10*time.Second)
	seq := 0
	e.delivered(p, "Order", 3, 1, &seq)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	if code, body := httpGet(addr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once streaming: %d %q", code, body)
	}
}

// TestInitApplyWaitsNamed: init --apply creates the slot behind an open
// transaction, printing what it waits for until the transaction ends.
func TestInitApplyWaitsNamed(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	long, err := pgx.Connect(ctx, pg.URL("postgres", "postgres")+"&application_name=nightly_report")
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close(ctx)
	if _, err := long.Exec(ctx, "BEGIN; SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	// The transaction ends once init printed what it waits for (after
	// its first watch interval, 5 s), not after a fixed time that a
	// loaded machine may not give it.
	p := testenv.StartProcessT(t, testenv.ProcessConfig{Path: binary, Args: []string{"init", "--apply", "--role", "", "--pg-url", pg.URL("postgres", "postgres")}})
	if err := p.WaitLog(ctx, `wait  creating slot "walstream"`, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	err, ok := p.Wait(60 * time.Second)
	if !ok {
		t.Fatal("init --apply did not end after the transaction did")
	}
	if out := p.Log(); err != nil || !strings.Contains(out, "application nightly_report") || !strings.Contains(out, `ok    slot "walstream"`) {
		t.Fatalf("init --apply behind an open transaction: %v\n%s", err, out)
	}
}
