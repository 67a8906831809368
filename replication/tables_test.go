package replication

import (
	"context"
	"slices"
	"testing"

	"github.com/walstream/walstream/internal/testenv"
)

// DescribeTables reads, in one go, what setup checks (the OID, the
// columns and their types, publication membership) and what the decoder
// applies (NOT NULL, defaults), and describes a missing table with OID
// zero instead of failing, so that its caller can tell dropped from new.
func TestDescribeTables(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	exec := execOn(t, admin)
	exec(`CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text, type text DEFAULT 'created',
		payload jsonb, n int GENERATED ALWAYS AS (1) STORED)`)
	exec("ALTER TABLE public.outbox DROP COLUMN type")
	exec("ALTER TABLE public.outbox ADD COLUMN type text DEFAULT 'created'")
	exec("CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy'); ALTER TYPE public.mood ADD VALUE 'meh' BEFORE 'ok'")
	exec("ALTER TABLE public.outbox ADD COLUMN amount numeric(10,2), ADD COLUMN mood public.mood")
	exec(names.PublicationSQL(false))
	n := Names{Slot: "walstream", Publication: "walstream_outbox", Tables: []Table{{"billing", "outbox"}, {"public", "outbox"}}}
	describe := func() []TableInfo {
		t.Helper()
		infos, err := DescribeTables(ctx, admin, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != len(n.Tables) {
			t.Fatalf("%d tables described, want %d", len(infos), len(n.Tables))
		}
		for i, info := range infos {
			if info.Table != n.Tables[i] {
				t.Fatalf("table %d is %s, want %s", i, info.Table, n.Tables[i])
			}
		}
		return infos
	}

	infos := describe()
	if b := infos[0]; b.Exists() || b.OID != 0 || len(b.Columns) != 0 || b.Published || b.SchemaPublished {
		t.Errorf("missing table described as %+v", b)
	}
	var oid uint32
	if err := admin.QueryRow(ctx, "SELECT 'public.outbox'::regclass::oid").Scan(&oid); err != nil {
		t.Fatal(err)
	}
	p := infos[1]
	if !p.Exists() || p.OID != oid || !p.Published || p.SchemaPublished {
		t.Errorf("public.outbox described as OID %d, published %v, by schema %v; want OID %d, published by name", p.OID, p.Published, p.SchemaPublished, oid)
	}
	var moodOID uint32
	if err := admin.QueryRow(ctx, "SELECT 'public.mood'::regtype::oid").Scan(&moodOID); err != nil {
		t.Fatal(err)
	}
	want := []Column{
		{Name: "id", Type: 2950, TypMod: -1, NotNull: true},
		{Name: "aggregatetype", Type: 25, TypMod: -1, NotNull: true},
		{Name: "aggregateid", Type: 25, TypMod: -1},
		{Name: "payload", Type: 3802, TypMod: -1},
		{Name: "n", Type: 23, TypMod: -1}, // generated: its expression is no default
		{Name: "type", Type: 25, TypMod: -1, Default: "'created'::text"},
		{Name: "amount", Type: 1700, TypMod: 10<<16 | 2 + 4},                  // numeric's precision and scale
		{Name: "mood", Type: moodOID, TypMod: -1, Labels: "sad,meh,ok,happy"}, // in enumsortorder
	}
	if !slices.Equal(p.Columns, want) {
		t.Errorf("columns\n%+v\nwant, in column order without the dropped one,\n%+v", p.Columns, want)
	}
	// The publication's entry: another once the table left the
	// publication and came back, none while it is out.
	var entry uint32
	if err := admin.QueryRow(ctx, "SELECT oid FROM pg_publication_rel WHERE prrelid = $1", oid).Scan(&entry); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Entries, []uint32{entry}) || len(infos[0].Entries) != 0 {
		t.Errorf("entries %v and %v, want pg_publication_rel's %d and none for the missing table", p.Entries, infos[0].Entries, entry)
	}
	exec("ALTER PUBLICATION walstream_outbox DROP TABLE public.outbox")
	if p := describe()[1]; p.Published || len(p.Entries) != 0 {
		t.Errorf("public.outbox out of the publication described as published %v, entries %v", p.Published, p.Entries)
	}
	exec("ALTER PUBLICATION walstream_outbox ADD TABLE public.outbox")
	if p := describe()[1]; !p.Published || len(p.Entries) != 1 || p.Entries[0] == entry {
		t.Errorf("public.outbox back in the publication described as published %v, entries %v (it was %d)", p.Published, p.Entries, entry)
	}

	// Outside the publication, then published by schema.
	exec("CREATE SCHEMA billing")
	exec("CREATE TABLE billing.outbox (id uuid PRIMARY KEY)")
	if b := describe()[0]; !b.Exists() || b.Published || b.SchemaPublished || len(b.Columns) != 1 {
		t.Errorf("billing.outbox, not in the publication, described as %+v", b)
	}
	exec("CREATE PUBLICATION billing_outbox FOR TABLES IN SCHEMA billing")
	n.Publication = "billing_outbox"
	infos = describe()
	var schemaEntry uint32
	if err := admin.QueryRow(ctx, "SELECT oid FROM pg_publication_namespace WHERE pnnspid = 'billing'::regnamespace").Scan(&schemaEntry); err != nil {
		t.Fatal(err)
	}
	if b := infos[0]; !b.Published || !b.SchemaPublished || !slices.Equal(b.Entries, []uint32{schemaEntry}) {
		t.Errorf("billing.outbox, in a schema publication, described as published %v, by schema %v, entries %v (want %d)", b.Published, b.SchemaPublished, b.Entries, schemaEntry)
	}
	if p := infos[1]; p.Published || p.SchemaPublished {
		t.Errorf("public.outbox, not in publication billing_outbox, described as published %v, by schema %v", p.Published, p.SchemaPublished)
	}

	// Dropped: described as missing, not an error.
	exec("DROP TABLE public.outbox")
	if p := describe()[1]; p.Exists() || len(p.Columns) != 0 {
		t.Errorf("dropped table described as %+v", p)
	}

	// A takeover asks whether the event id column is unique: a unique
	// index on exactly the column, a primary key included, and no other
	// kind (over more columns, partial, on an expression); and whether it
	// is NOT NULL.
	exec(`CREATE TABLE pk (id uuid PRIMARY KEY, n int);
		CREATE TABLE plain (id text, n int, m int);
		CREATE INDEX ON plain (id);
		CREATE UNIQUE INDEX ON plain (id, n);
		CREATE UNIQUE INDEX ON plain (id) WHERE n > 0;
		CREATE UNIQUE INDEX ON plain (lower(id));
		CREATE UNIQUE INDEX ON plain (m) INCLUDE (id);
		CREATE TABLE uniq (id text UNIQUE);
		CREATE TABLE uniqnn (id text UNIQUE NOT NULL)`)
	for _, c := range []struct {
		table, column   string
		unique, notNull bool
	}{{"pk", "id", true, true}, {"pk", "n", false, false}, {"plain", "id", false, false}, {"plain", "m", true, false},
		{"uniq", "id", true, false}, {"uniqnn", "id", true, true}, {"missing", "id", false, false}} {
		unique, notNull, err := UniqueColumn(ctx, admin, Table{"public", c.table}, c.column)
		if err != nil || unique != c.unique || notNull != c.notNull {
			t.Errorf("UniqueColumn(%s, %s) = %v, %v, %v; want %v, %v", c.table, c.column, unique, notNull, err, c.unique, c.notNull)
		}
	}
}
