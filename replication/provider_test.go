package replication

import (
	"context"
	"strings"
	"testing"

	"github.com/walstream/walstream/internal/testenv"
)

// Check recognises a managed service by the setting only it has, and
// names the switch that is off and where to turn it on; on Amazon RDS a
// member of rds_replication may replicate. The services' settings are
// set here as custom settings of the database, as the services set them
// for the server.
func TestCheckManagedProviders(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.Settings("wal_level = replica"))
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	exec := execOn(t, admin)
	exec(outboxDDL)
	exec("CREATE ROLE app LOGIN; CREATE ROLE rds_replication NOLOGIN; GRANT SELECT ON public.outbox TO app")
	tables := []TableColumns{{Table: Table{"public", "outbox"}, Columns: []string{"id"}}}
	check := func(role string) string {
		t.Helper()
		findings, err := Check(ctx, connect(t, pg.URL(role, "postgres")), names, tables, "")
		if err != nil {
			t.Fatal(err)
		}
		return all(findings)
	}
	want := func(got string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(got, l) {
				t.Errorf("check does not say %q:\n%s", l, got)
			}
		}
	}

	exec("ALTER DATABASE postgres SET rds.logical_replication = 'off'")
	want(check("app"),
		"FAIL server is Amazon RDS or Aurora: rds.logical_replication is off, logical decoding is off: set rds.logical_replication = 1 in the instance's DB parameter group",
		"FAIL wal_level is replica: set rds.logical_replication = 1",
		`FAIL role app lacks REPLICATION: GRANT rds_replication TO "app"`)
	wantSetupError(t, Prepare(ctx, connect(t, pg.URL("app", "postgres")), names, Create{}),
		"wal_level", "the server is Amazon RDS or Aurora, rds.logical_replication is off", "set rds.logical_replication = 1")
	exec("GRANT rds_replication TO app")
	want(check("app"), "ok role app is a member of rds_replication")

	exec("ALTER DATABASE postgres RESET rds.logical_replication")
	exec("ALTER DATABASE postgres SET cloudsql.logical_decoding = 'off'")
	want(check("postgres"), "FAIL server is Google Cloud SQL: cloudsql.logical_decoding is off", "set the database flag cloudsql.logical_decoding = on",
		"FAIL wal_level is replica: set the database flag cloudsql.logical_decoding = on")
	// rds_replication lets a role replicate on RDS only.
	want(check("app"), `FAIL role app lacks REPLICATION: ALTER ROLE "app" WITH REPLICATION (as a member of cloudsqlsuperuser)`)

	exec("ALTER DATABASE postgres RESET cloudsql.logical_decoding")
	exec("ALTER DATABASE postgres SET azure.extensions = 'pg_stat_statements'")
	got := check("postgres")
	want(got, "ok server is Azure Database for PostgreSQL flexible server (azure.extensions is set)",
		"FAIL wal_level is replica: set the server parameter wal_level = logical and restart the server")
	want(check("app"), `FAIL role app lacks REPLICATION: ALTER ROLE "app" WITH REPLICATION (as a member of azure_pg_admin)`)

	exec("ALTER DATABASE postgres RESET azure.extensions")
	got = check("postgres")
	want(got, "FAIL wal_level is replica: set wal_level = logical in postgresql.conf")
	if strings.Contains(got, "server is") {
		t.Errorf("a server of no known service named as one:\n%s", got)
	}
}
