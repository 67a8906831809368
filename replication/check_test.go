package replication

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// Check reads what Prepare requires without changing it: before the
// setup it fails the publication and the slot; after Prepare and on the
// same server it finds every requirement met, warning of the superuser.
func TestCheckAgreesWithPrepare(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	if _, err := admin.Exec(ctx, outboxDDL); err != nil {
		t.Fatal(err)
	}
	tables := []TableColumns{{Table: Table{"public", "outbox"}, Columns: []string{"id", "aggregatetype", "aggregateid", "payload", "missing_col"}}}
	byStatus := func(fs []Finding) map[Status][]string {
		m := make(map[Status][]string)
		for _, f := range fs {
			m[f.Status] = append(m[f.Status], f.Text)
		}
		return m
	}
	before, err := Check(ctx, admin, names, tables, "")
	if err != nil {
		t.Fatal(err)
	}
	got := byStatus(before)
	for _, want := range []string{"table public.outbox has no column missing_col", "publication walstream_outbox does not exist", "slot walstream does not exist"} {
		if !strings.Contains(strings.Join(got[Fail], "\n"), want) {
			t.Errorf("before setup: failures %q lack %q", got[Fail], want)
		}
	}
	if len(got[Fail]) != 3 {
		t.Errorf("before setup: %d failures %q, want 3", len(got[Fail]), got[Fail])
	}
	if err := Prepare(ctx, admin, names, createAll); err != nil {
		t.Fatal(err)
	}
	tables[0].Columns = tables[0].Columns[:4]
	after, err := Check(ctx, admin, names, tables, "")
	if err != nil {
		t.Fatal(err)
	}
	got = byStatus(after)
	if len(got[Fail]) != 0 || len(got[Warn]) != 1 || !strings.Contains(got[Warn][0], "superuser") {
		t.Fatalf("after Prepare: failures %q, warnings %q; want none and the superuser warning", got[Fail], got[Warn])
	}
	for _, want := range []string{"wal_level is logical", "table public.outbox exists", "publication walstream_outbox includes public.outbox", "slot walstream is a pgoutput slot"} {
		if !strings.Contains(strings.Join(got[OK], "\n"), want) {
			t.Errorf("after Prepare: ok lines %q lack %q", got[OK], want)
		}
	}

	// A role that may not read the table, and a table that does not exist.
	if _, err := admin.Exec(ctx, "CREATE ROLE reader LOGIN REPLICATION"); err != nil {
		t.Fatal(err)
	}
	reader := connect(t, pg.URL("reader", "postgres"))
	tables = append(tables, TableColumns{Table: Table{"billing", "outbox"}, Columns: []string{"id"}})
	found, err := Check(ctx, reader, names, tables, "")
	if err != nil {
		t.Fatal(err)
	}
	got = byStatus(found)
	for _, want := range []string{`role reader may not SELECT from public.outbox: GRANT SELECT ON "public"."outbox" TO "reader"`, "table billing.outbox does not exist"} {
		if !strings.Contains(strings.Join(got[Fail], "\n"), want) {
			t.Errorf("as reader: failures %q lack %q", got[Fail], want)
		}
	}
	if len(got[Fail]) != 2 {
		t.Errorf("as reader: %d failures %q, want 2", len(got[Fail]), got[Fail])
	}
}

// SetupSteps create the publication before the slot, with the statements
// Prepare would run, and can run twice; on Postgres 17 the slot is a
// failover slot, before it a plain one.
func TestSetupSteps(t *testing.T) {
	for _, major := range []int{15, 17} {
		t.Run(fmt.Sprint(major), func(t *testing.T) {
			pg := testenv.StartPostgres(t, testenv.Version(major))
			ctx := context.Background()
			admin := connect(t, pg.URL("postgres", "postgres"))
			if _, err := admin.Exec(ctx, outboxDDL); err != nil {
				t.Fatal(err)
			}
			steps := names.SetupSteps("walstream", true, "")
			if len(steps) != 4 || !strings.Contains(steps[0].SQL, names.PublicationSQL(false)) ||
				!strings.Contains(steps[1].SQL, strings.TrimPrefix(names.CreateSlotSQL(true), "SELECT ")) ||
				!strings.Contains(steps[1].SQL, strings.TrimPrefix(names.CreateSlotSQL(false), "SELECT ")) {
				t.Fatalf("steps %+v: want the publication, then the slot, then the role and its grant", steps)
			}
			for run := 0; run < 2; run++ {
				for _, s := range steps {
					if _, err := admin.Exec(ctx, s.SQL); err != nil {
						t.Fatalf("run %d: %s: %v", run+1, s.SQL, err)
					}
				}
			}
			if err := Prepare(ctx, admin, names, Create{}); err != nil {
				t.Fatalf("Prepare after the steps: %v", err)
			}
			st, err := CheckFailover(ctx, admin, names)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := st.Failover, major >= 17; got != want || st.Supported != want || !st.Exists {
				t.Fatalf("Postgres %d: slot failover = %v, supported %v, exists %v; want failover and supported %v", major, got, st.Supported, st.Exists, want)
			}
		})
	}
}

// CheckFailover on Postgres 17 warns about a plain slot and about each
// way synchronized_standby_slots can fail a failover, and is quiet when a
// streaming standby's slot is named.
func TestCheckFailover(t *testing.T) {
	primary := testenv.StartPostgres(t, testenv.Version(17))
	ctx := context.Background()
	admin := connect(t, primary.URL("postgres", "postgres"))
	if _, err := admin.Exec(ctx, outboxDDL); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(ctx, admin, names, Create{Publication: true, Slot: true}); err != nil {
		t.Fatal(err)
	}
	set := func(v string) {
		t.Helper()
		if _, err := admin.Exec(ctx, "ALTER SYSTEM SET synchronized_standby_slots = '"+v+"'"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
		// The reload is asynchronous: the session sees it once its
		// backend has had the signal.
		testenv.Eventually(t, 10*time.Second, "synchronized_standby_slots = '"+v+"' after the reload", func() bool {
			var got string
			if err := admin.QueryRow(ctx, "SHOW synchronized_standby_slots").Scan(&got); err != nil {
				t.Fatal(err)
			}
			return got == v
		})
	}
	warnings := func(parts ...string) {
		t.Helper()
		st, err := CheckFailover(ctx, admin, names)
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(st.Warnings, "\n")
		for _, p := range parts {
			if !strings.Contains(all, p) {
				t.Errorf("warnings %q do not say %q", all, p)
			}
		}
		if len(parts) == 0 && len(st.Warnings) > 0 {
			t.Errorf("warnings %q, want none", all)
		}
	}
	warnings(`slot "walstream" is not a failover slot`, "ALTER_REPLICATION_SLOT walstream (FAILOVER true)", "synchronized_standby_slots is empty")

	// The conversion the warning gives, on a replication connection.
	rconn, err := Dial(ctx, &connect(t, primary.URL("postgres", "postgres")).Config().Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := rconn.Exec(ctx, names.AlterFailoverCommand()).Close(); err != nil {
		t.Fatal(err)
	}
	rconn.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_create_physical_replication_slot('idle')"); err != nil {
		t.Fatal(err)
	}
	set("missing")
	warnings(`names slot "missing", which does not exist`)
	set("idle")
	warnings(`names slot "idle", which no standby streams`)
	testenv.StartStandby(t, primary, testenv.StandbyConfig{Slot: "standby1", SyncSlots: true})
	set("standby1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := CheckFailover(ctx, admin, names)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Warnings) == 0 && st.Failover && len(st.StandbySlots) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with a streaming standby named: %+v, want a failover slot and no warnings", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
