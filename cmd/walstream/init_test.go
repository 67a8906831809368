package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

func walstreamCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestInit: the printed SQL is explained and idempotent; --apply prepares
// a bare database so that walstream streams as the least-privilege role;
// --check passes for it and flags a superuser as over-privileged.
func TestInit(t *testing.T) {
	pg := testenv.StartPostgres(t)
	admin := pg.URL("postgres", "postgres")

	out, err := walstreamCmd(t, "init", "--pg-url", admin)
	if err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	for _, want := range []string{"-- The outbox table", "CREATE TABLE IF NOT EXISTS \"public\".\"outbox\"", "CREATE PUBLICATION \"walstream_outbox\"",
		"pg_create_logical_replication_slot('walstream', 'pgoutput')", "CREATE ROLE \"walstream\" LOGIN REPLICATION", "GRANT SELECT ON \"public\".\"outbox\" TO \"walstream\"",
		// A failover slot on Postgres 17 and the settings it needs.
		"pg_create_logical_replication_slot('walstream', 'pgoutput', false, false, true)", "synchronized_standby_slots", "sync_replication_slots = on",
		"hot_standby_feedback = on", "primary_slot_name", "dbname=postgres", "ALTER_REPLICATION_SLOT walstream (FAILOVER true)", "target_session_attrs=primary"} {
		if !strings.Contains(out, want) {
			t.Errorf("init output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "CREATE PUBLICATION") > strings.Index(out, "pg_create_logical_replication_slot") {
		t.Error("the slot is created before the publication")
	}
	// The printed SQL runs twice with psql without error.
	for i := 0; i < 2; i++ {
		cmd := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", admin)
		cmd.Stdin = strings.NewReader(out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("psql run %d of the printed SQL: %v\n%s", i+1, err, b)
		}
	}
	out, err = walstreamCmd(t, "init", "--pg-url", admin, "--apply")
	if err != nil || strings.Count(out, "ok ") != 5 {
		t.Fatalf("init --apply on a prepared database: %v\n%s", err, out)
	}
	// Each statement is named for what it makes, not by its first line.
	for _, want := range []string{`ok    table "public"."outbox"`, `ok    publication "walstream_outbox"`, `ok    slot "walstream"`,
		`ok    role "walstream"`, `ok    grant SELECT on "public"."outbox" to "walstream"`} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("init --apply output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "DO $$") {
		t.Errorf("init --apply names a statement by its first line:\n%s", out)
	}

	out, err = walstreamCmd(t, "init", "--pg-url", admin, "--check")
	if err != nil || !strings.Contains(out, "WARN  role postgres is a superuser: over-privileged") {
		t.Fatalf("init --check as a superuser: %v\n%s", err, out)
	}
	pg.Exec("postgres", "ALTER ROLE walstream PASSWORD 'init-Sekr1t'")
	registerSecret("init-Sekr1t")
	least := strings.Replace(pg.URL("walstream", "postgres"), "walstream@", "walstream:init-Sekr1t@", 1)
	out, err = walstreamCmd(t, "init", "--pg-url", least, "--check")
	if err != nil || strings.Contains(out, "WARN") || strings.Count(out, "ok ") != 6 {
		t.Fatalf("init --check as the least-privilege role: %v\n%s", err, out)
	}
	if s := leakedSecret(out); s != "" {
		t.Fatalf("init output holds the password")
	}

	// walstream streams as that role, creating nothing.
	e := &env{t: t, pg: pg, kafka: testenv.StartBroker(t, testenv.TestBroker())}
	e.broker = e.kafka.Addr()
	p := e.start([]string{"--pg-url", least, "--create=false"}).streaming(t)
	seq := 0
	e.insertTx("Order", 50, 5, &seq, false)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
}

// TestInitCheckReportsProblems: --check on a database missing the
// publication and the slot says so, line by line, and fails.
func TestInitCheckReportsProblems(t *testing.T) {
	pg := testenv.StartPostgres(t)
	pg.Exec("postgres", "CREATE TABLE outbox (id uuid, aggregatetype text, payload jsonb)")
	out, err := walstreamCmd(t, "init", "--pg-url", pg.URL("postgres", "postgres"), "--check")
	if err == nil {
		t.Fatalf("init --check passed a broken setup:\n%s", out)
	}
	for _, want := range []string{"ok    wal_level is logical", "FAIL  table public.outbox has no column aggregateid",
		"FAIL  publication walstream_outbox does not exist", "FAIL  slot walstream does not exist", "3 requirement(s) not met"} {
		if !strings.Contains(out, want) {
			t.Errorf("init --check output lacks %q:\n%s", want, out)
		}
	}
}

// TestInitSeveralTables: init creates every outbox table of a config file
// with its own column names, one publication over them, and --check then
// passes table by table.
func TestInitSeveralTables(t *testing.T) {
	pg := testenv.StartPostgres(t)
	admin := pg.URL("postgres", "postgres")
	pg.Exec("postgres", "CREATE SCHEMA orders; CREATE SCHEMA billing")
	cfg := filepath.Join(t.TempDir(), "walstream.yaml")
	if err := os.WriteFile(cfg, []byte("tables:\n  orders.outbox:\n  billing.outbox:\n    table.field.event.key: invoice_id\n    route.by.field: kind\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := walstreamCmd(t, "init", "--config", cfg, "--pg-url", admin, "--apply")
	if err != nil {
		t.Fatalf("init --apply: %v\n%s", err, out)
	}
	var columns string
	if err := pg.Connect("postgres").QueryRow(context.Background(), `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'billing.outbox'::regclass AND attnum > 0`).Scan(&columns); err != nil {
		t.Fatal(err)
	}
	if columns != "id,kind,invoice_id,type,payload,created_at" {
		t.Errorf("billing.outbox columns %s, want its mapping's names", columns)
	}
	out, err = walstreamCmd(t, "init", "--config", cfg, "--pg-url", admin, "--check")
	for _, want := range []string{"ok    table orders.outbox exists", "ok    table billing.outbox exists",
		"ok    publication walstream_outbox includes orders.outbox", "ok    publication walstream_outbox includes billing.outbox"} {
		if !strings.Contains(out, want) {
			t.Errorf("init --check output lacks %q:\n%s", want, out)
		}
	}
	if err != nil {
		t.Fatalf("init --check: %v\n%s", err, out)
	}
}

// TestInitApplyChecksWALLevel: on a server without wal_level=logical,
// init --apply says so and creates nothing.
func TestInitApplyChecksWALLevel(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.Settings("wal_level = replica"))
	out, err := walstreamCmd(t, "init", "--pg-url", pg.URL("postgres", "postgres"), "--apply")
	if err == nil || !strings.Contains(out, "wal_level") || !strings.Contains(out, "logical") {
		t.Fatalf("init --apply with wal_level=replica: %v\n%s", err, out)
	}
	var tables, pubs int
	if err := pg.Connect("postgres").QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM pg_tables WHERE tablename = 'outbox'), (SELECT count(*) FROM pg_publication)").Scan(&tables, &pubs); err != nil {
		t.Fatal(err)
	}
	if tables != 0 || pubs != 0 {
		t.Fatalf("init --apply created %d outbox tables and %d publications before failing on wal_level", tables, pubs)
	}
}

// TestInitFailoverSlot: on Postgres 17 init --apply creates a failover
// slot, and --check says so and warns that no standby slot is named.
func TestInitFailoverSlot(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.Version(17))
	admin := pg.URL("postgres", "postgres")
	if out, err := walstreamCmd(t, "init", "--pg-url", admin, "--apply"); err != nil {
		t.Fatalf("init --apply: %v\n%s", err, out)
	}
	out, err := walstreamCmd(t, "init", "--pg-url", admin, "--check")
	if err != nil {
		t.Fatalf("init --check: %v\n%s", err, out)
	}
	for _, want := range []string{"ok    slot walstream is a failover slot", "WARN  synchronized_standby_slots is empty"} {
		if !strings.Contains(out, want) {
			t.Errorf("init --check lacks %q:\n%s", want, out)
		}
	}
	// Without failover slots, a plain one; --check warns how to convert it.
	pg.Exec("postgres", "SELECT pg_drop_replication_slot('walstream')")
	if out, err := walstreamCmd(t, "init", "--pg-url", admin, "--apply", "--failover-slot=false"); err != nil {
		t.Fatalf("init --apply --failover-slot=false: %v\n%s", err, out)
	}
	out, _ = walstreamCmd(t, "init", "--pg-url", admin, "--check")
	if !strings.Contains(out, `WARN  slot "walstream" is not a failover slot`) || !strings.Contains(out, "ALTER_REPLICATION_SLOT walstream (FAILOVER true)") {
		t.Errorf("init --check of a plain slot on Postgres 17:\n%s", out)
	}
}
