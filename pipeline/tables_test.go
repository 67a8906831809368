package pipeline

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
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
		{"accepted with the wrong OID", recorded, 200, false, map[string]uint32{"public.outbox": 300}, "accepting table public.outbox as recreated with OID 300, but its OID is 200", false},
		{"recreated under a schema publication", recorded, 200, true, nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tables := outboxTables{oids: map[string]uint32{"public.outbox": tc.now}, mayChange: map[string]bool{}, schemaPublished: map[string]bool{}}
			if tc.schema {
				tables.mayChange["public.outbox"], tables.schemaPublished["public.outbox"] = true, true
			}
			err := tables.sinceCheckpoint(tc.cp, tc.accept, slog.New(slog.DiscardHandler))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if got := tables.mayChange["public.outbox"]; tc.want == "" && got != tc.wantMayChange {
				t.Errorf("may change = %v, want %v", got, tc.wantMayChange)
			}
			var re *decode.TableRecreatedError
			if tc.name == "recreated" && (!errors.As(err, &re) || classifyFailure(err).kind != kindBadInput || !classifyFailure(err).permanent) {
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
