package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/internal/testenv"
)

// A commit reaches the slot's confirmed_flush_lsn well within the status
// interval (the keepalive, here 30 s), the idle slot reads no lag, and the
// slot metrics say what Inspect (walstream status) says. The bounds are
// generous: they show the confirm does not wait for the keepalive, not
// how fast it is.
func TestConfirmsPromptly(t *testing.T) {
	pg := testenv.StartPostgres(t)
	broker := testenv.StartKfake(t)
	pg.Exec("postgres", `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload jsonb)`)
	cfg := testConfig(t, pg, broker.Addr())
	cfg.StatusInterval, cfg.ConfirmInterval = 30*time.Second, 250*time.Millisecond
	cfg.SlotPollInterval, cfg.ProgressInterval = 200*time.Millisecond, 200*time.Millisecond
	reg := prometheus.NewRegistry()
	logs := &testenv.LogBuffer{}
	p := New(cfg, logs.Logger(), reg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, "streaming", func() bool { _, ok := p.state.streaming(time.Now()); return ok })

	conn := pg.Connect("postgres")
	// Let the session's first status update go by, so that the next one
	// is 30 s away unless a commit brings it forward.
	time.Sleep(time.Second)
	pg.Exec("postgres", `INSERT INTO outbox SELECT gen_random_uuid(), 'Order', 'o-' || i, 'Created', '{}' FROM generate_series(1, 3) i`)
	inserted := queryLSN(t, conn, "SELECT pg_current_wal_insert_lsn()::text")
	start := time.Now()
	for queryLSN(t, conn, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'walstream'") < inserted {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("confirmed_flush_lsn did not reach %s within 10 s of the commit (status interval 30 s)", inserted)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Idle: everything committed and the server has nothing new.
	var in *Inspection
	testenv.Eventually(t, 30*time.Second, "the idle slot caught up", func() bool {
		var err error
		if in, err = Inspect(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		return in.Slot.CaughtUp() && gauge(t, reg, "walstream_caught_up") == 1
	})
	if got := in.Slot.ConfirmedLag(); got != 0 {
		t.Fatalf("idle lag = %d bytes, want 0", got)
	}
	// Read at the same moment, the metrics and Inspect agree.
	time.Sleep(2 * cfg.SlotPollInterval)
	in, err := Inspect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gauge(t, reg, "walstream_slot_confirmed_lag_bytes"), float64(in.Slot.ConfirmedLag()); got != want {
		t.Fatalf("walstream_slot_confirmed_lag_bytes = %v, Inspect lag %v", got, want)
	}
	if got, want := gauge(t, reg, "walstream_caught_up") == 1, in.Slot.CaughtUp(); got != want {
		t.Fatalf("walstream_caught_up = %v, Inspect caught up %v", got, want)
	}
	testenv.Eventually(t, 30*time.Second, "a progress line counting the events", func() bool {
		return strings.Contains(logs.String(), "msg=progress") && strings.Contains(logs.String(), "events=3 ")
	})

	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
}

// gauge reads the unlabelled gauge name from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// queryLSN runs sql, which selects one LSN as text, on conn.
func queryLSN(t *testing.T, conn *pgx.Conn, sql string) pglogrepl.LSN {
	t.Helper()
	var text string
	if err := conn.QueryRow(context.Background(), sql).Scan(&text); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(text)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}
