package replication

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/internal/testenv"
)

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// execOn returns a func that runs SQL on conn, failing the test with the
// statement.
func execOn(t *testing.T, conn *pgx.Conn) func(sql string) {
	return func(sql string) {
		t.Helper()
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

var names = Names{Slot: "walstream", Publication: "walstream_outbox", Tables: []Table{{"public", "outbox"}}}

const outboxDDL = `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload jsonb)`

// wantSetupError checks that err is a SetupError whose message has every
// part, so the operator learns what is wrong and how to fix it.
func wantSetupError(t *testing.T, err error, parts ...string) {
	t.Helper()
	if !errors.Is(err, ErrSetup) {
		t.Fatalf("err = %v, want a setup error", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestPrepare(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))

	t.Run("table missing", func(t *testing.T) {
		err := Prepare(ctx, admin, names, createAll)
		wantSetupError(t, err, `table "public"."outbox"`, "does not exist")
	})
	if _, err := admin.Exec(ctx, outboxDDL); err != nil {
		t.Fatal(err)
	}
	t.Run("role lacks REPLICATION", func(t *testing.T) {
		if _, err := admin.Exec(ctx, "CREATE ROLE app LOGIN"); err != nil {
			t.Fatal(err)
		}
		err := Prepare(ctx, connect(t, pg.URL("app", "postgres")), names, createAll)
		wantSetupError(t, err, `role "app"`, "REPLICATION", `ALTER ROLE "app" WITH REPLICATION`)
	})
	t.Run("publication missing and create=false", func(t *testing.T) {
		err := Prepare(ctx, admin, names, Create{})
		wantSetupError(t, err, `publication "walstream_outbox"`, "does not exist",
			`CREATE PUBLICATION "walstream_outbox" FOR TABLE "public"."outbox" WITH (publish = 'insert, update')`)
	})
	t.Run("publication without the table", func(t *testing.T) {
		if _, err := admin.Exec(ctx, "CREATE TABLE other (x int); CREATE PUBLICATION other_pub FOR TABLE other"); err != nil {
			t.Fatal(err)
		}
		n := names
		n.Publication = "other_pub"
		err := Prepare(ctx, admin, n, createAll)
		wantSetupError(t, err, `publication "other_pub"`, `does not include table "public"."outbox"`, "ALTER PUBLICATION")
	})
	t.Run("slot missing and create=false", func(t *testing.T) {
		if _, err := admin.Exec(ctx, names.PublicationSQL(false)); err != nil {
			t.Fatal(err)
		}
		err := Prepare(ctx, admin, names, Create{})
		wantSetupError(t, err, `slot "walstream"`, "does not exist", "pg_create_logical_replication_slot('walstream', 'pgoutput')")
	})
	t.Run("creates the slot", func(t *testing.T) {
		if err := Prepare(ctx, admin, names, createAll); err != nil {
			t.Fatal(err)
		}
		s, ok, err := LookupSlot(ctx, admin, "walstream")
		if err != nil || !ok {
			t.Fatalf("slot after Prepare: ok=%v err=%v", ok, err)
		}
		if s.Plugin != "pgoutput" || s.ConfirmedFlush == 0 {
			t.Fatalf("slot = %+v, want pgoutput with a confirmed_flush_lsn", s)
		}
		// Idempotent: a second run finds everything in place.
		if err := Prepare(ctx, admin, names, Create{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("second outbox table not in the publication", func(t *testing.T) {
		if _, err := admin.Exec(ctx, "CREATE SCHEMA billing; CREATE TABLE billing.outbox (LIKE public.outbox)"); err != nil {
			t.Fatal(err)
		}
		n := names
		n.Tables = []Table{{"public", "outbox"}, {"billing", "outbox"}}
		err := Prepare(ctx, admin, n, createAll)
		wantSetupError(t, err, `publication "walstream_outbox"`, `does not include table "billing"."outbox"`,
			`ALTER PUBLICATION "walstream_outbox" ADD TABLE "billing"."outbox"`)
		n.Tables = append(n.Tables, Table{"billing", "missing"})
		wantSetupError(t, Prepare(ctx, admin, n, createAll), `table "billing"."missing"`, "does not exist")
	})
	t.Run("slot of another plugin", func(t *testing.T) {
		if _, err := admin.Exec(ctx, "SELECT pg_create_logical_replication_slot('decoder', 'test_decoding')"); err != nil {
			t.Fatal(err)
		}
		n := names
		n.Slot = "decoder"
		err := Prepare(ctx, admin, n, createAll)
		wantSetupError(t, err, `slot "decoder"`, `output plugin "test_decoding"`, "pgoutput")
	})
	t.Run("slot lost", func(t *testing.T) {
		// Let the server drop WAL the slot needs: keep at most 1 MB for
		// slots, write past it and checkpoint.
		if _, err := admin.Exec(ctx, "SELECT pg_create_logical_replication_slot('doomed', 'pgoutput')"); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			"ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'", "SELECT pg_reload_conf()",
			"CREATE TABLE churn (x text)",
			"INSERT INTO churn SELECT repeat('x', 1000) FROM generate_series(1, 40000)", "SELECT pg_switch_wal()", "CHECKPOINT",
			"INSERT INTO churn SELECT repeat('x', 1000) FROM generate_series(1, 40000)", "SELECT pg_switch_wal()", "CHECKPOINT",
		} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		n := names
		n.Slot = "doomed"
		err := Prepare(ctx, admin, n, createAll)
		wantSetupError(t, err, `slot "doomed"`, "wal_status = lost", "events may be missing")
		// A lost slot has no restart_lsn: it retains nothing, and the
		// current LSN minus NULL must not read as retained WAL.
		st, err := PollSlot(ctx, admin, n)
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := st.Retained(); ok || n != 0 || st.WALStatus != "lost" {
			t.Fatalf("lost slot: Retained() = %d, %v, wal_status %q; want 0, false, lost", n, ok, st.WALStatus)
		}
		reg := prometheus.NewRegistry()
		m := NewSlotMetrics(reg)
		m.set(st)
		got := -1.0
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "walstream_slot_retained_wal_bytes" {
				got = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		if got != 0 {
			t.Fatalf("walstream_slot_retained_wal_bytes of a lost slot = %v, want 0", got)
		}
		for _, q := range []string{"ALTER SYSTEM RESET max_slot_wal_keep_size", "SELECT pg_reload_conf()"} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	})
}

// The sslmode=prefer fallback's TLS refusal does not hide the real error
// of the plain attempt.
func TestConnectErrorIsTheLastAttempt(t *testing.T) {
	pg := testenv.StartPostgres(t)
	cfg, err := pgx.ParseConfig(strings.Replace(pg.URL("postgres", "postgres"), "sslmode=disable", "sslmode=prefer", 1))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "nosuchdb"
	_, err = Connect(context.Background(), cfg)
	var ce *ConnectError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `database "nosuchdb" does not exist`) || strings.Contains(err.Error(), "TLS") {
		t.Fatalf("Connect = %v, want the missing database without the TLS fallback", err)
	}
	if Permanent(err) == false {
		t.Errorf("a missing database is not permanent: %v", err)
	}
}

func TestPrepareWALLevel(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.Settings("wal_level = replica"))
	err := Prepare(context.Background(), connect(t, pg.URL("postgres", "postgres")), names, createAll)
	wantSetupError(t, err, "wal_level", `"replica"`, "logical", "restart Postgres")
}

func TestValidateNames(t *testing.T) {
	outbox := []Table{{"public", "outbox"}}
	for _, tc := range []struct {
		n    Names
		want string
	}{
		{Names{"walstream", "walstream_outbox", outbox}, ""},
		{Names{"walstream", "walstream_outbox", []Table{{"orders", "outbox"}, {"billing", "outbox"}}}, ""},
		{Names{"Bad", "p", outbox}, `slot name "Bad"`},
		{Names{"s; DROP", "p", outbox}, "slot name"},
		{Names{"s", "p'x", outbox}, `publication name "p'x"`},
		{Names{"s", "p", []Table{{"pub lic", "outbox"}}}, "schema name"},
		{Names{"s", "p", []Table{{"public", `out"box`}}}, "table name"},
		{Names{"s", "p", nil}, "no outbox table"},
		{Names{"s", "p", []Table{{"public", "outbox"}, {"public", "outbox"}}}, "listed twice"},
	} {
		err := tc.n.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.Validate() = %v, want error containing %q", tc.n, err, tc.want)
		}
	}
	// Each field's fault is its own error, naming the field.
	err := Names{"Bad", "p'x", nil}.Validate()
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Validate() = %v, want the faults of three fields joined", err)
	}
	var fields []string
	for _, e := range j.Unwrap() {
		var ne *NameError
		if !errors.As(e, &ne) {
			t.Fatalf("%v is no *NameError", e)
		}
		fields = append(fields, ne.Field)
	}
	if got := strings.Join(fields, " "); got != "Slot Publication Tables" {
		t.Errorf("fields %s, want Slot Publication Tables", got)
	}
}

// createAll lets Prepare create what is missing, the slot as a failover
// slot where the server has them.
var createAll = Create{Publication: true, Slot: true, FailoverSlot: true}

func TestParseTables(t *testing.T) {
	got, err := ParseTables(" public.outbox, billing.outbox ,")
	if err != nil || len(got) != 2 || got[0] != (Table{"public", "outbox"}) || got[1] != (Table{"billing", "outbox"}) {
		t.Fatalf("ParseTables = %v, %v", got, err)
	}
	if _, err := ParseTables("public.outbox,outbox"); err == nil || !strings.Contains(err.Error(), "schema-qualified") {
		t.Fatalf("an unqualified table: %v", err)
	}
	step := OutboxTableStep(Table{"billing", "Outbox"}, "event_id", "kind", "key", "body")
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "billing"."Outbox"`, `"event_id"    uuid`, `"kind"`, `"body"        jsonb`} {
		if !strings.Contains(step.SQL, want) {
			t.Errorf("outbox table SQL lacks %q:\n%s", want, step.SQL)
		}
	}
	if step.Name != `table "billing"."Outbox"` {
		t.Errorf("step name %q", step.Name)
	}
}
