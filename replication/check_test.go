package replication

import (
	"context"
	"strings"
	"testing"

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
	before, err := Check(ctx, admin, names, tables)
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
	if err := Prepare(ctx, admin, names, true); err != nil {
		t.Fatal(err)
	}
	tables[0].Columns = tables[0].Columns[:4]
	after, err := Check(ctx, admin, names, tables)
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
}

// SetupSteps create the publication before the slot, with the statements
// Prepare would run, and can run twice.
func TestSetupSteps(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	if _, err := admin.Exec(ctx, outboxDDL); err != nil {
		t.Fatal(err)
	}
	steps := names.SetupSteps("walstream")
	if len(steps) != 4 || !strings.Contains(steps[0].SQL, names.PublicationSQL()) || !strings.Contains(steps[1].SQL, names.slotSQL()) {
		t.Fatalf("steps %+v: want the publication, then the slot, then the role and its grant", steps)
	}
	for run := 0; run < 2; run++ {
		for _, s := range steps {
			if _, err := admin.Exec(ctx, s.SQL); err != nil {
				t.Fatalf("run %d: %s: %v", run+1, s.SQL, err)
			}
		}
	}
	if err := Prepare(ctx, admin, names, false); err != nil {
		t.Fatalf("Prepare after the steps: %v", err)
	}
}
