package replication

import (
	"context"
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
