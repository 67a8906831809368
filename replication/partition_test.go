package replication

import (
	"context"
	"strings"
	"testing"

	"github.com/walstream/walstream/internal/testenv"
)

// partitionedDDL is an outbox table range-partitioned by time, as one
// whose old partitions are dropped instead of deleted from.
const partitionedDDL = `CREATE TABLE public.outbox (id uuid NOT NULL, aggregatetype text, aggregateid text, type text, payload jsonb,
	created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE TABLE public.outbox_2000 PARTITION OF public.outbox FOR VALUES FROM ('2000-01-01') TO ('2100-01-01')`

// A partitioned outbox table: Prepare creates the publication publishing
// its partitions' rows as its own, and finds every partition setting the
// same way; a publication that publishes them under their partitions'
// names is refused by Prepare, the slot monitor and Check alike, each
// naming the setting and the statement that fixes it.
func TestPartitionedOutbox(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	exec := execOn(t, admin)
	exec(partitionedDDL)
	if err := Prepare(ctx, admin, names, createAll); err != nil {
		t.Fatal(err)
	}
	var viaRoot bool
	if err := admin.QueryRow(ctx, "SELECT pubviaroot FROM pg_publication WHERE pubname = 'walstream_outbox'").Scan(&viaRoot); err != nil {
		t.Fatal(err)
	}
	if !viaRoot {
		t.Fatal("Prepare created the publication of a partitioned outbox table without publish_via_partition_root")
	}
	poll := func() SlotState {
		t.Helper()
		st, err := PollSlot(ctx, admin, names)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := poll(); st.fatal(names) != nil || len(st.Partitioned) != 1 || !st.ViaRoot || len(st.Missing) != 0 {
		t.Fatalf("poll of a set-up partitioned outbox: %+v, fatal %v", st, st.fatal(names))
	}
	tables := []TableColumns{{Table: Table{"public", "outbox"}, Columns: []string{"id", "aggregatetype", "aggregateid", "payload"}}}
	findings, err := Check(ctx, admin, names, tables, "")
	if err != nil {
		t.Fatal(err)
	}
	if f := failures(findings); len(f) != 0 || !strings.Contains(all(findings), "includes partitioned table public.outbox and publishes its partitions' rows as its own") {
		t.Fatalf("Check of a set-up partitioned outbox: failures %q in\n%s", f, all(findings))
	}
	// Partitions come and go; the table stays the one the slot streams.
	oid := func() uint32 {
		infos, err := DescribeTables(ctx, admin, names)
		if err != nil {
			t.Fatal(err)
		}
		if !infos[0].Published {
			t.Fatalf("partitioned outbox table described as outside the publication: %+v", infos[0])
		}
		return infos[0].OID
	}
	before := oid()
	// What the catalog says of a partition as it is detached and dropped,
	// for rows still coming under its name.
	var part uint32
	if err := admin.QueryRow(ctx, "SELECT 'public.outbox_2000'::regclass::oid").Scan(&part); err != nil {
		t.Fatal(err)
	}
	relation := func(what string, want RelationState) {
		t.Helper()
		if got, err := DescribeRelation(ctx, admin, names, part); err != nil || got != want {
			t.Fatalf("DescribeRelation of the partition %s = %+v, %v; want %+v", what, got, err, want)
		}
	}
	relation("attached", RelationState{Root: Table{"public", "outbox"}, Partition: true, Exists: true, Published: true})
	exec("CREATE TABLE public.outbox_2100 PARTITION OF public.outbox FOR VALUES FROM ('2100-01-01') TO ('2200-01-01')")
	exec("ALTER TABLE public.outbox DETACH PARTITION public.outbox_2000")
	relation("detached", RelationState{Exists: true})
	exec("DROP TABLE public.outbox_2000")
	relation("dropped", RelationState{})
	if after := oid(); after != before {
		t.Fatalf("the outbox table's OID changed from %d to %d as partitions came and went", before, after)
	}
	if st := poll(); st.fatal(names) != nil {
		t.Fatalf("after partitions came and went: %v", st.fatal(names))
	}

	exec("ALTER PUBLICATION walstream_outbox SET (publish_via_partition_root = false)")
	want := []string{`publication "walstream_outbox"`, `partitioned outbox table "public"."outbox"`, "publish_via_partition_root is off",
		`ALTER PUBLICATION "walstream_outbox" SET (publish_via_partition_root = true)`}
	wantSetupError(t, Prepare(ctx, admin, names, Create{}), want...)
	st := poll()
	wantSetupError(t, st.fatal(names), want...)
	if len(st.Missing) != 0 {
		t.Errorf("the table published the wrong way also reads as missing from the publication: %v", st.Missing)
	}
	findings, err = Check(ctx, admin, names, tables, "")
	if err != nil {
		t.Fatal(err)
	}
	if f := failures(findings); len(f) != 1 || !strings.Contains(f[0], "publish_via_partition_root is off") || !strings.Contains(f[0], "SET (publish_via_partition_root = true)") {
		t.Fatalf("Check of a publication without publish_via_partition_root: failures %q", f)
	}

	// The publication dropped: the statement to recreate it has the option.
	exec("DROP PUBLICATION walstream_outbox")
	wantSetupError(t, poll().fatal(names), "publish_via_partition_root = true")
	wantSetupError(t, Prepare(ctx, admin, names, Create{}), "publish_via_partition_root = true")

	// init's SQL decides where it runs.
	for _, s := range names.SetupSteps("", false, "")[:1] {
		exec(s.SQL)
	}
	if err := admin.QueryRow(ctx, "SELECT pubviaroot FROM pg_publication WHERE pubname = 'walstream_outbox'").Scan(&viaRoot); err != nil || !viaRoot {
		t.Fatalf("the setup step made the publication of a partitioned table with publish_via_partition_root %v (%v)", viaRoot, err)
	}
}

func failures(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		if f.Status == Fail {
			out = append(out, f.Text)
		}
	}
	return out
}

func all(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Status.String() + " " + f.Text + "\n")
	}
	return b.String()
}
