package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
	t.Parallel()
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
	e := &env{t: t, pg: pg, kafka: testenv.SharedBroker(t, testenv.TestBroker()), ns: testenv.TopicPrefix(t)}
	e.broker = e.kafka.Addr()
	p := e.start([]string{"--pg-url", least, "--create=false"}).streaming(t)
	seq := 0
	e.delivered(p, "Order", 50, 5, &seq)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
}

// TestInitCheckReportsProblems: --check on a database missing the
// publication and the slot says so, line by line, and fails.
func TestInitCheckReportsProblems(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// TestInitManagedProviders: init --apply prepares a database the way each
// managed service lets a role replicate, recognised by its settings, and
// --check then passes as the role it made. The services' roles and
// settings are simulated on Postgres 16, where a role with CREATEROLE and
// REPLICATION may give REPLICATION to the roles it creates, as Cloud SQL's
// and Azure's administrators may: rds_superuser, rds_replication and the
// master user; cloudsqlsuperuser and its postgres user; azure_pg_admin
// and its administrator; the services' switches of logical decoding are
// custom settings of each database. A setup init cannot run whole is
// refused before anything is created, or rolled back.
func TestInitManagedProviders(t *testing.T) {
	t.Parallel()
	registerSecret("init-Sekr1t")
	pg := testenv.StartPostgres(t, testenv.Version(16))
	ctx := context.Background()
	super := pg.Connect("postgres")
	exec := func(sql string) {
		t.Helper()
		if _, err := super.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, sql := range []string{
		"CREATE ROLE rds_superuser NOLOGIN CREATEROLE", "CREATE ROLE rds_replication NOLOGIN",
		"GRANT rds_replication TO rds_superuser WITH ADMIN OPTION",
		// RDS lets rds_superuser create slots through rds_replication;
		// here the master user has REPLICATION for that.
		"CREATE ROLE rdsmaster LOGIN CREATEROLE REPLICATION IN ROLE rds_superuser",
		"CREATE ROLE cloudsqlsuperuser NOLOGIN CREATEROLE CREATEDB",
		"CREATE ROLE cloudsqladmin LOGIN CREATEROLE REPLICATION IN ROLE cloudsqlsuperuser",
		"CREATE ROLE azure_pg_admin NOLOGIN",
		"CREATE ROLE azureadmin LOGIN CREATEROLE REPLICATION IN ROLE azure_pg_admin",
		// An administrator Azure's model admits but this server refuses
		// REPLICATION to give, and one of no service.
		"CREATE ROLE azurenorepl LOGIN CREATEROLE IN ROLE azure_pg_admin",
		"CREATE ROLE plainadmin LOGIN CREATEROLE",
	} {
		exec(sql)
	}
	for db, owner := range map[string]string{"rds": "rdsmaster", "cloudsql": "cloudsqladmin", "azure": "azureadmin",
		"azure_refused": "azurenorepl", "plain": "plainadmin"} {
		exec(fmt.Sprintf("CREATE DATABASE %s OWNER %s", db, owner))
	}
	exec("ALTER DATABASE rds SET rds.logical_replication = 'on'")
	exec("ALTER DATABASE cloudsql SET cloudsql.logical_decoding = 'on'")
	exec("ALTER DATABASE azure SET azure.extensions = 'pg_stat_statements'")
	exec("ALTER DATABASE azure_refused SET azure.extensions = 'pg_stat_statements'")

	for _, c := range []struct {
		db, admin, service string
		replicates         string // how the role made replicates
	}{
		{"rds", "rdsmaster", "Amazon RDS or Aurora", "member of rds_replication"},
		{"cloudsql", "cloudsqladmin", "Google Cloud SQL", "REPLICATION"},
		{"azure", "azureadmin", "Azure Database for PostgreSQL", "REPLICATION"},
	} {
		t.Run(c.db, func(t *testing.T) {
			role, slot := "walstream_"+c.db, "walstream_"+c.db
			args := []string{"init", "--pg-url", pg.URL(c.admin, c.db), "--slot", slot, "--role", role}
			out, err := walstreamCmd(t, append(args, "--apply")...)
			if err != nil || strings.Count(out, "ok    ") != 5 || !strings.Contains(out, "setup for "+c.service) {
				t.Fatalf("init --apply as %s: %v\n%s", c.admin, err, out)
			}
			t.Logf("init --apply as %s:\n%s", c.admin, out)
			var attr, member bool
			if err := super.QueryRow(ctx, `SELECT rolreplication, pg_has_role(oid, 'rds_replication', 'MEMBER') FROM pg_roles WHERE rolname = $1`, role).Scan(&attr, &member); err != nil {
				t.Fatal(err)
			}
			if got := map[bool]string{true: "member of rds_replication", false: "REPLICATION"}[member]; got != c.replicates || attr == member {
				t.Errorf("role %s: REPLICATION %v, member of rds_replication %v; want it to replicate as a %s", role, attr, member, c.replicates)
			}
			pg.Exec("postgres", fmt.Sprintf("ALTER ROLE %s PASSWORD 'init-Sekr1t'", role))
			url := strings.Replace(pg.URL(role, c.db), role+"@", role+":init-Sekr1t@", 1)
			out, err = walstreamCmd(t, "init", "--pg-url", url, "--slot", slot, "--check")
			if err != nil || strings.Contains(out, "WARN") || strings.Contains(out, "FAIL") {
				t.Fatalf("init --check as %s: %v\n%s", role, err, out)
			}
			if !strings.Contains(out, "ok    server is "+c.service) {
				t.Errorf("init --check does not name the service %s:\n%s", c.service, out)
			}
		})
	}

	// Naming another provider than the server's is refused.
	out, err := walstreamCmd(t, "init", "--pg-url", pg.URL("rdsmaster", "rds"), "--slot", "walstream_rds", "--role", "walstream_rds", "--check", "--provider", "azure")
	if err == nil || !strings.Contains(out, "FAIL  the server is Amazon RDS or Aurora (rds.logical_replication is set), but Azure Database for PostgreSQL was named as its provider") {
		t.Errorf("init --check --provider azure on RDS: %v\n%s", err, out)
	}

	nothing := func(db, role string) {
		t.Helper()
		var tables, pubs, slots, roles int
		if err := pg.Connect(db).QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_tables WHERE tablename = 'outbox'), (SELECT count(*) FROM pg_publication),
			(SELECT count(*) FROM pg_replication_slots WHERE database = current_database()), (SELECT count(*) FROM pg_roles WHERE rolname = $1)`, role).Scan(&tables, &pubs, &slots, &roles); err != nil {
			t.Fatal(err)
		}
		if tables+pubs+slots+roles != 0 {
			t.Errorf("database %s: %d outbox tables, %d publications, %d slots and %d roles %s after a refused setup, want none", db, tables, pubs, slots, roles, role)
		}
	}
	// A plain Postgres administrator that is no superuser and lacks
	// REPLICATION can neither create the slot nor give the role
	// REPLICATION: both are said, and nothing is created.
	out, err = walstreamCmd(t, "init", "--pg-url", pg.URL("plainadmin", "plain"), "--slot", "walstream_plain", "--role", "walstream_plain", "--apply")
	wantAll(t, out, "role plainadmin cannot run the setup; nothing was changed",
		`slot "walstream_plain": may not create a replication slot: ALTER ROLE "plainadmin" WITH REPLICATION`,
		`role "walstream_plain": may not give it REPLICATION: a role needs CREATEROLE and REPLICATION itself to do that; plainadmin lacks one`)
	if err == nil {
		t.Error("init --apply as plainadmin succeeded")
	}
	t.Logf("init --apply as plainadmin:\n%s", out)
	nothing("plain", "walstream_plain")

	// Azure's model admits its administrator, but this server refuses it
	// REPLICATION to give: the transaction that creates the table, the
	// publication and the role is rolled back. The slot exists already,
	// so that only Postgres refuses.
	pg.Exec("azure_refused", "SELECT pg_create_logical_replication_slot('walstream_refused', 'pgoutput')")
	out, err = walstreamCmd(t, "init", "--pg-url", pg.URL("azurenorepl", "azure_refused"), "--slot", "walstream_refused", "--role", "walstream_refused", "--apply")
	wantAll(t, out, `creating role "walstream_refused"`, "nothing was changed: the setup runs in one transaction, which was rolled back")
	if err == nil || strings.Contains(out, "ok    ") {
		t.Errorf("init --apply as azurenorepl: %v\n%s", err, out)
	}
	t.Logf("init --apply as azurenorepl:\n%s", out)
	pg.Exec("azure_refused", "SELECT pg_drop_replication_slot('walstream_refused')")
	nothing("azure_refused", "walstream_refused")
}

// TestInitPrintsProviders: the printed setup follows the privilege model
// named, Postgres's when none is, and an unknown one is refused.
func TestInitPrintsProviders(t *testing.T) {
	for provider, want := range map[string][]string{
		"":         {"-- For Postgres as released", `CREATE ROLE "walstream" LOGIN REPLICATION`},
		"rds":      {`CREATE ROLE "walstream" LOGIN;`, `GRANT rds_replication TO "walstream"`, "a member of rds_replication replicates"},
		"cloudsql": {`CREATE ROLE "walstream" LOGIN;`, `ALTER ROLE "walstream" WITH REPLICATION`, "a member of cloudsqlsuperuser"},
		"azure":    {`CREATE ROLE "walstream" LOGIN;`, `ALTER ROLE "walstream" WITH REPLICATION`, "a member of azure_pg_admin"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"init", "--provider", provider}, &out, &out); err != nil {
			t.Fatalf("init --provider %q: %v", provider, err)
		}
		wantAll(t, out.String(), want...)
		if provider == "rds" && strings.Contains(out.String(), "REPLICATION;") {
			t.Errorf("init --provider rds gives the role REPLICATION, which RDS refuses:\n%s", out.String())
		}
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"init", "--provider", "aurora"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), `--provider: "aurora" is not a provider walstream knows: postgres, rds (Amazon RDS and Aurora)`) {
		t.Errorf("init --provider aurora: %v", err)
	}
}
