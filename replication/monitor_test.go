package replication

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/walstream/walstream/internal/testenv"
)

// A table dropped after the monitor polled the slot, before it described
// the tables, is reported as dropped while streaming, with the fix, as the
// next poll would report it; not as a table missing at setup.
func TestMonitorTableDroppedBetweenChecks(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	for _, sql := range []string{outboxDDL, names.PublicationSQL(false), "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')"} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := DescribeTables(ctx, admin, names)
	if err != nil {
		t.Fatal(err)
	}
	m := &Monitor{Conn: admin, Names: names, OIDs: map[string]uint32{names.Tables[0].String(): infos[0].OID}}
	if err := m.sameTables(ctx); err != nil {
		t.Fatalf("sameTables before the drop = %v", err)
	}
	if _, err := admin.Exec(ctx, "DROP TABLE public.outbox"); err != nil {
		t.Fatal(err)
	}
	wantSetupError(t, m.sameTables(ctx), `table "public"."outbox"`, `is no longer in publication "walstream_outbox"`, "ALTER PUBLICATION")
}

// A table that left the publication and came back between two polls is
// covered by another entry: the monitor stops, naming the table, both
// entries and what was lost.
func TestMonitorTableLeftPublicationBetweenPolls(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	for _, sql := range []string{outboxDDL, names.PublicationSQL(false)} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := DescribeTables(ctx, admin, names)
	if err != nil {
		t.Fatal(err)
	}
	name := names.Tables[0].String()
	m := &Monitor{Conn: admin, Names: names, OIDs: map[string]uint32{name: infos[0].OID}, Entries: map[string][]uint32{name: infos[0].Entries}}
	if err := m.sameTables(ctx); err != nil {
		t.Fatalf("sameTables before = %v", err)
	}
	for _, sql := range []string{"ALTER PUBLICATION walstream_outbox DROP TABLE public.outbox", "ALTER PUBLICATION walstream_outbox ADD TABLE public.outbox"} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	err = m.sameTables(ctx)
	var re *RepublishedError
	if !errors.As(err, &re) || !errors.Is(err, ErrSetup) || !slices.Equal(re.Was, infos[0].Entries) || len(re.Now) == 0 || Covers(re.Was, re.Now) || re.OID != infos[0].OID ||
		!strings.Contains(err.Error(), "came back while streaming") || !strings.Contains(err.Error(), "A table out of the publication") {
		t.Fatalf("sameTables after the table left the publication and came back = %v", err)
	}
}
