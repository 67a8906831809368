package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/replication"
)

// A table whose OID differs from the one the checkpoint recorded was
// recreated since: refused unless accepted with its new OID or published
// by schema; an old checkpoint without OIDs compares nothing.
func TestTablesSinceCheckpoint(t *testing.T) {
	recorded := checkpoint.Checkpoint{LSN: 0x1000, Notes: &checkpoint.Notes{Tables: map[string]uint32{"public.outbox": 100}}}
	for _, tc := range []struct {
		name          string
		cp            checkpoint.Checkpoint
		now           uint32
		schema        bool
		accept        map[string]uint32
		want          string // empty: accepted
		wantMayChange bool
	}{
		{"same table", recorded, 100, false, nil, "", false},
		{"no OIDs recorded", checkpoint.Checkpoint{LSN: 0x1000}, 200, false, nil, "", false},
		{"recreated", recorded, 200, false, nil, "OID 100, now 200, found in the catalog at startup, after checkpoint 0/1000", false},
		{"recreated and accepted", recorded, 200, false, map[string]uint32{"public.outbox": 200}, "", true},
		{"accepted with the wrong OID", checkpoint.Checkpoint{LSN: 0x1000, Notes: &checkpoint.Notes{Tables: map[string]uint32{"public.outbox": 200}}}, 200, false,
			map[string]uint32{"public.outbox": 300}, "accepting table public.outbox as recreated with OID 300, but its OID is 200", false},
		// An earlier recreation accepted, and the table recreated again since
		// the checkpoint: the new gap, not the stale acceptance, is the news.
		{"recreated again, another OID accepted", recorded, 200, false, map[string]uint32{"public.outbox": 300},
			"nor the one accepted (OID 300): table public.outbox was dropped and recreated: OID 100, now 200, found in the catalog at startup, after checkpoint 0/1000", false},
		{"recreated under a schema publication", recorded, 200, true, nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tables := outboxTables{oids: map[string]uint32{"public.outbox": tc.now}, mayChange: map[string]bool{}, schemaPublished: map[string]bool{}}
			if tc.schema {
				tables.mayChange["public.outbox"], tables.schemaPublished["public.outbox"] = true, true
			}
			err := tables.sinceCheckpoint(tc.cp, tc.accept, slog.New(slog.DiscardHandler))
			refusedWith(t, err, tc.want)
			if got := tables.mayChange["public.outbox"]; tc.want == "" && got != tc.wantMayChange {
				t.Errorf("may change = %v, want %v", got, tc.wantMayChange)
			}
			var re *decode.TableRecreatedError
			if (tc.name == "recreated" || tc.name == "recreated again, another OID accepted") && (!errors.As(err, &re) || classifyFailure(err).kind != kindBadInput || !classifyFailure(err).permanent) {
				t.Errorf("err %v is not a permanent TableRecreatedError", err)
			}
			if tc.name == "accepted with the wrong OID" && !errors.Is(err, replication.ErrSetup) {
				t.Errorf("err %v is not a setup error", err)
			}
			if w := tables.watched(); tc.schema == (len(w) > 0) {
				t.Errorf("watched %v with a schema publication %v", w, tc.schema)
			}
		})
	}
}

// A table that does not exist is named as dropped when the checkpoint
// recorded it: what (the table, its recorded OID), where (the checkpoint),
// what is lost and where to read how to recover. Without a record (a
// first start, an old checkpoint) it is only missing.
func TestTablesDroppedSinceCheckpoint(t *testing.T) {
	names := replication.Names{Slot: "walstream", Publication: "walstream_outbox",
		Tables: []replication.Table{{Schema: "public", Name: "outbox"}, {Schema: "billing", Name: "outbox"}}}
	recorded := checkpoint.Checkpoint{LSN: 0x16B3748, Notes: &checkpoint.Notes{Tables: map[string]uint32{"public.outbox": 100, "billing.outbox": 300}}}
	missing := `table "public"."outbox": does not exist; create it, and add it to the publication in the same transaction`
	for _, tc := range []struct {
		name string
		cp   checkpoint.Checkpoint
		// billing is billing.outbox's OID now, 0 for missing too.
		billing uint32
		accept  map[string]uint32
		want    []string
		not     string
	}{
		{"dropped", recorded, 300, nil, []string{`table "public"."outbox": was dropped after checkpoint 0/16B3748 (OID 100) and does not exist now`,
			`before it is added to publication "walstream_outbox" are never sent`, "see docs/postgres.md, A recreated outbox table",
			`BEGIN; CREATE TABLE "public"."outbox" (...); ALTER PUBLICATION "walstream_outbox" ADD TABLE "public"."outbox"; COMMIT`}, "does not exist;"},
		{"dropped, accepted as recreated", recorded, 300, map[string]uint32{"public.outbox": 200}, []string{"was dropped after checkpoint 0/16B3748 (OID 100)"}, ""},
		{"dropped, and another recreated", recorded, 400, nil, []string{"was dropped after checkpoint 0/16B3748 (OID 100)"}, ""},
		{"first start", checkpoint.Checkpoint{}, 300, nil, []string{missing}, "dropped"},
		{"checkpoint without OIDs", checkpoint.Checkpoint{LSN: 0x1000}, 300, nil, []string{missing}, "dropped"},
		{"recorded another table only", checkpoint.Checkpoint{LSN: 0x1000, Notes: &checkpoint.Notes{Tables: map[string]uint32{"billing.outbox": 300}}}, 300, nil, []string{missing}, "dropped"},
		{"missing and another recreated", checkpoint.Checkpoint{LSN: 0x1000, Notes: &checkpoint.Notes{Tables: map[string]uint32{"billing.outbox": 300}}}, 400, nil,
			[]string{"table billing.outbox was dropped and recreated: OID 300, now 400"}, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tables := outboxTables{names: names, oids: map[string]uint32{"billing.outbox": tc.billing}, missing: []replication.Table{names.Tables[0]},
				mayChange: map[string]bool{}, schemaPublished: map[string]bool{}}
			if tables.settled() {
				t.Fatal("settled with a missing table")
			}
			err := tables.sinceCheckpoint(tc.cp, tc.accept, slog.New(slog.DiscardHandler))
			if err == nil {
				t.Fatal("a missing table accepted")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v\nwant %q", err, want)
				}
			}
			if tc.not != "" && strings.Contains(err.Error(), tc.not) {
				t.Errorf("err = %v, want no %q", err, tc.not)
			}
			if f := classifyFailure(err); !f.permanent {
				t.Errorf("err %v is not permanent", err)
			}
		})
	}
}

// Only a table that is missing or out of the publication makes a session
// look at the checkpoint before setup.
func TestTablesSettled(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    outboxTables
		want bool
	}{
		{"all there", outboxTables{}, true},
		{"missing", outboxTables{missing: []replication.Table{{Schema: "public", Name: "outbox"}}}, false},
		{"not in the publication", outboxTables{unpublished: true}, false},
	} {
		if got := tc.t.settled(); got != tc.want {
			t.Errorf("%s: settled = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A table dropped between the session's read of the tables and its
// setup's is named as dropped since the checkpoint, as at a start after
// the drop: rows committed to a table created again before it is in the
// publication are never sent, and the stop says so.
func TestTableDroppedDuringSetup(t *testing.T) {
	for _, tc := range []struct {
		name, ddl, want string
	}{
		{"dropped", "DROP TABLE public.outbox", `table "public"."outbox": was dropped after checkpoint`},
		// Created again, not yet in the publication: what a start after
		// the recreation says, not setup's "does not include table".
		{"recreated", "DROP TABLE public.outbox; " + outboxDDL, "table public.outbox was dropped and recreated: OID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := testenv.StartPostgres(t)
			broker := testenv.StartKfake(t)
			pg.Exec("postgres", outboxDDL)
			cfg := testConfig(t, pg, broker.Addr())
			log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
			a := startInstance(t, cfg, log, "a")
			conn := pg.Connect("postgres")
			ctx := context.Background()
			if _, err := conn.Exec(ctx, `INSERT INTO outbox VALUES (gen_random_uuid(), 'Order', 'o-1', 'Created', '{}')`); err != nil {
				t.Fatal(err)
			}
			lsn := queryLSN(t, conn, "SELECT pg_current_wal_insert_lsn()::text")
			testenv.Eventually(t, 30*time.Second, "the row's checkpoint in Kafka", func() bool {
				in, err := Inspect(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				return in.Found && in.Checkpoint.LSN >= lsn
			})
			a.cancel()
			<-a.done
			b := cfg
			b.Hook = func(point string) {
				if point == "tables-checked" {
					if _, err := conn.Exec(ctx, tc.ddl); err != nil {
						t.Error(err)
					}
				}
			}
			in := startInstance(t, b, log, "b")
			select {
			case <-in.done:
			case <-time.After(60 * time.Second):
				t.Fatal("walstream did not stop within 60s of its outbox table changed")
			}
			if in.err == nil || !strings.Contains(in.err.Error(), tc.want) {
				t.Fatalf("stopped with %v, want %q", in.err, tc.want)
			}
		})
	}
}

// A table the publication covers by none of the entries the checkpoint
// recorded left the publication and came back since: refused unless
// accepted by its OID. One of them still covering it (listed by name and
// by schema, one of the two dropped) kept it published throughout. A
// recreated table's entries change with its OID, which decides; a
// checkpoint without entries compares none.
func TestTablesRepublishedSinceCheckpoint(t *testing.T) {
	recorded := checkpoint.Checkpoint{LSN: 0x1000, Notes: &checkpoint.Notes{Tables: map[string]uint32{"public.outbox": 100}, Entries: map[string][]uint32{"public.outbox": {500, 700}}}}
	for _, tc := range []struct {
		name    string
		cp      checkpoint.Checkpoint
		oid     uint32
		entries []uint32
		accept  map[string]uint32
		want    string // empty: accepted
	}{
		{"same entries", recorded, 100, []uint32{500, 700}, nil, ""},
		{"one of two entries left", recorded, 100, []uint32{700}, nil, ""},
		{"an entry added", recorded, 100, []uint32{500, 600, 700}, nil, ""},
		{"no entries recorded", checkpoint.Checkpoint{LSN: 0x1000, Notes: &checkpoint.Notes{Tables: map[string]uint32{"public.outbox": 100}}}, 100, []uint32{600}, nil, ""},
		{"left and came back", recorded, 100, []uint32{600}, nil, `table public.outbox (OID 100) left publication "p" and came back after checkpoint 0/1000 (its entries in the publication [500 700], now [600])`},
		{"left, came back, accepted", recorded, 100, []uint32{600}, map[string]uint32{"public.outbox": 100}, ""},
		{"recreated and accepted", recorded, 200, []uint32{600}, map[string]uint32{"public.outbox": 200}, ""},
		{"recreated", recorded, 200, []uint32{600}, nil, "OID 100, now 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tables := outboxTables{names: replication.Names{Publication: "p"}, oids: map[string]uint32{"public.outbox": tc.oid},
				entries: map[string][]uint32{"public.outbox": tc.entries}, mayChange: map[string]bool{}, schemaPublished: map[string]bool{}}
			err := tables.sinceCheckpoint(tc.cp, tc.accept, slog.New(slog.DiscardHandler))
			refusedWith(t, err, tc.want)
			var re *replication.RepublishedError
			if tc.name == "left and came back" && (!errors.As(err, &re) || !classifyFailure(err).permanent) {
				t.Errorf("err %v is not a permanent RepublishedError", err)
			}
		})
	}
}

// refusedWith checks that err says want, or is nil when want is empty.
func refusedWith(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("err = %v, want %q", err, want)
	}
}
