package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// httpAddr is where walstream serves /metrics, from its log.
func (p *proc) httpAddr(t *testing.T) string {
	t.Helper()
	p.waitLog(t, `msg="http listening"`, 30*time.Second)
	line := between(p.Log(), `msg="http listening"`, "\n")
	return between(line, " addr=", " ")
}

// metric scrapes one sample, such as `walstream_slot_wal_status{status="reserved"}`:
// the first series of that name with those labels, whatever others (the
// stream's) it carries.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	base, labels, _ := strings.Cut(strings.TrimSuffix(name, "}"), "{")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		series, v, ok := strings.Cut(sc.Text(), " ")
		got, have, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		if !ok || got != base || strings.HasPrefix(series, "#") {
			continue
		}
		for _, l := range strings.Split(labels, ",") {
			if l != "" && !slices.Contains(strings.Split(have, ","), l) {
				ok = false
			}
		}
		if ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not exported", name)
	return 0
}

func httpStatus(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// sqlInt runs a query returning one bigint.
func (e *env) sqlInt(q string) int64 {
	e.t.Helper()
	var v int64
	if err := e.pg.Connect("postgres").QueryRow(context.Background(), q).Scan(&v); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return v
}

// TestSlotMetrics: the slot metrics agree with pg_replication_slots; lag
// grows while walstream is stopped and returns to about 0 after a restart.
func TestSlotMetrics(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	args := []string{"--http-addr", "127.0.0.1:0", "--slot-poll-interval", "200ms"}
	p := e.start(args).streaming(t)
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	seq := 0
	e.insertTx("Order", 2000, 20, &seq, false)
	// The insert position: with synchronous_commit off, the write position
	// can trail the commit by the WAL writer's delay, longer on a busy
	// machine.
	lagStopped := e.sqlInt("SELECT (pg_current_wal_insert_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = 'walstream'")
	if lagStopped < 100<<10 {
		t.Fatalf("lag while stopped is %d bytes, want the 2,000 rows' WAL", lagStopped)
	}

	p = e.start(args).streaming(t)
	addr := p.httpAddr(t)
	// The slot gauges read 0 until the monitor's first poll, which the
	// retained WAL (never 0 for a slot) tells apart.
	testenv.Eventually(t, 30*time.Second, "slot lag metric back to about 0", func() bool {
		return metric(t, addr, "walstream_slot_retained_wal_bytes") > 0 &&
			metric(t, addr, "walstream_slot_confirmed_lag_bytes") < 64<<10
	})
	if sqlLag := e.sqlInt("SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = 'walstream'"); sqlLag >= 64<<10 {
		t.Fatalf("SQL says the slot lags %d bytes while the metric says about 0", sqlLag)
	}
	retained := metric(t, addr, "walstream_slot_retained_wal_bytes")
	sqlRetained := e.sqlInt("SELECT (pg_current_wal_lsn() - restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = 'walstream'")
	if retained <= 0 || float64(sqlRetained) < retained*0.5 || float64(sqlRetained) > retained*2+(64<<10) {
		t.Fatalf("retained WAL metric %v, SQL %d", retained, sqlRetained)
	}
	if v := metric(t, addr, `walstream_slot_wal_status{status="reserved"}`); v != 1 {
		t.Fatalf(`wal_status{status="reserved"} = %v, want 1`, v)
	}
	if v := metric(t, addr, `walstream_slot_wal_status{status="lost"}`); v != 0 {
		t.Fatalf(`wal_status{status="lost"} = %v, want 0`, v)
	}
	if v := metric(t, addr, "walstream_slot_active"); v != 1 {
		t.Fatalf("slot_active = %v, want 1", v)
	}
	if v := metric(t, addr, `walstream_events_published_total{topic="`+e.topic("outbox.event.Order")+`"}`); v != 2000 {
		t.Fatalf("events published = %v, want 2000", v)
	}
	if v := metric(t, addr, "walstream_replication_lag_seconds"); v != 0 {
		t.Fatalf("replication lag = %v s when caught up, want 0", v)
	}
	committed := metric(t, addr, "walstream_committed_lsn")
	if confirmed := metric(t, addr, "walstream_confirmed_lsn"); confirmed > committed {
		t.Fatalf("confirmed LSN %v passes committed %v", confirmed, committed)
	}
	// Idle, everything is confirmed and the lag reads 0: the idle
	// checkpoint covers WAL the server writes on its own (such as the
	// standby snapshot the bgwriter logs after activity).
	testenv.Eventually(t, time.Minute, "caught up and lag 0", func() bool {
		return metric(t, addr, "walstream_caught_up") == 1 && metric(t, addr, "walstream_slot_confirmed_lag_bytes") == 0
	})
}

// TestReadyz: ready while streaming; not ready while Postgres is down;
// ready again once it is back, without anyone touching walstream.
func TestReadyz(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	p := e.start([]string{"--http-addr", "127.0.0.1:0"}).streaming(t)
	addr := p.httpAddr(t)
	testenv.Eventually(t, 10*time.Second, "ready while streaming", func() bool { return httpStatus(addr, "/readyz") == 200 })
	if err := e.pg.Stop(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "not ready with Postgres down", func() bool { return httpStatus(addr, "/readyz") == 503 })
	if c := httpStatus(addr, "/healthz"); c != 200 {
		t.Fatalf("/healthz = %d with Postgres down, want 200: the process is fine", c)
	}
	if err := e.pg.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "ready again", func() bool { return httpStatus(addr, "/readyz") == 200 })
}

// TestStatusCommand: `walstream status` against a real slot and checkpoint,
// then against a slot recreated ahead of the checkpoint.
func TestStatusCommand(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	p := e.start(nil).streaming(t)
	seq := 0
	e.delivered(p, "Order", 10, 2, &seq)

	status := func(extra ...string) (string, error) {
		var out, errOut bytes.Buffer
		cmd := exec.Command(binary, slices.Concat([]string{"status", "--pg-url", e.pg.URL("postgres", "postgres")}, e.kafkaArgs(), extra)...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String() + errOut.String(), err
	}
	out, err := status("--json")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	var confirmed string
	e.pg.Connect("postgres").QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'walstream'").Scan(&confirmed)
	if !r.Slot.Exists || !r.Streaming || r.Slot.ActivePID == nil || r.Slot.WALStatus != "reserved" || r.Slot.ConfirmedFlush != confirmed {
		t.Fatalf("slot in status %+v, SQL confirmed_flush_lsn %s", r.Slot, confirmed)
	}
	if !r.Checkpoint.Found || r.Checkpoint.LSN == "" || r.Checkpoint.AgeSeconds == nil || len(r.Problems) != 0 {
		t.Fatalf("checkpoint in status %+v, problems %v", r.Checkpoint, r.Problems)
	}
	if r.Slot.CaughtUp != (r.Slot.LagBytes == 0) {
		t.Fatalf("status says caught up %v with lag %d bytes", r.Slot.CaughtUp, r.Slot.LagBytes)
	}
	out, err = status()
	if err != nil || !strings.Contains(out, "yes, walsender pid") || !strings.Contains(out, "wal_status") || !strings.Contains(out, "caught up") {
		t.Fatalf("status table: %v\n%s", err, out)
	}

	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	e.pg.Exec("postgres", "SELECT pg_drop_replication_slot('walstream')")
	e.insertTx("Order", 1, 1, &seq, false)
	e.pg.Exec("postgres", "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')")
	out, err = status()
	if err == nil || !strings.Contains(out, "is ahead of the checkpoint") {
		t.Fatalf("status with the slot ahead: err %v\n%s", err, out)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("status exit: %v", err)
	}
}

// TestDroppedWhileStreaming: the slot monitor stops walstream with an
// actionable message when the outbox table or the publication goes away;
// neither produces an error on the replication stream by itself.
func TestDroppedWhileStreaming(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, sql string
		want      []string
	}{
		{"table", "DROP TABLE outbox", []string{`table "public"."outbox"`, `is no longer in publication "walstream_outbox"`, "ALTER PUBLICATION"}},
		{"publication", "DROP PUBLICATION walstream_outbox", []string{`publication "walstream_outbox"`, "was dropped while streaming", "CREATE PUBLICATION"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSharedEnv(t)
			p := e.start([]string{"--slot-poll-interval", "200ms"}).streaming(t)
			e.pg.Exec("postgres", tc.sql)
			wantAll(t, exitMessage(t, p), tc.want...)
		})
	}
}
