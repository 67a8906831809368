package chaos

import (
	"testing"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/replication"
)

// The checker excuses rows of a recreation gap only after a stop that
// names it, in any of the places walstream finds it; a stop that names a
// missing table or publication entry without the gap is not excused.
func TestGapStop(t *testing.T) {
	names := replication.Names{Slot: "walstream", Publication: "walstream_outbox", Tables: []replication.Table{{Schema: "public", Name: "outbox"}}}
	outbox := names.Tables[0]
	partial := checkpoint.Checkpoint{LSN: 0xA9FFCC0, Ordinal: 3, PartialCommitLSN: 0xAA14890}
	for _, tc := range []struct {
		name, stop string
		want       bool
	}{
		{"in the stream", "walstream: " + (&decode.TableRecreatedError{Table: "public.outbox", OldOID: 16392, NewOID: 16402, LSN: 0x150D4E8}).Error(), true},
		{"at startup, recreated", "walstream: table public.outbox: not the table streamed before: " +
			(&decode.TableRecreatedError{Table: "public.outbox", OldOID: 16392, NewOID: 16402, Since: "0/150D4E8"}).Error(), true},
		{"at startup, recreated again after an accepted recreation", "walstream: table public.outbox: not the table streamed before, nor the one accepted (OID 16402): " +
			(&decode.TableRecreatedError{Table: "public.outbox", OldOID: 16402, NewOID: 16412, Since: "0/150D4E8"}).Error(), true},
		{"a stale acceptance", "walstream: postgres setup: accepting table public.outbox as recreated with OID 16402, but its OID is 16412", false},
		{"at startup, dropped", "walstream: " + names.TableDropped(outbox, 16392, "0/150D4E8").Error(), true},
		{"at startup, dropped, partial checkpoint", "walstream: " + names.TableDropped(outbox, 16392, partial.String()).Error(), true},
		{"slot monitor, recreated", `walstream: table "public"."outbox": was dropped and recreated while streaming (OID 16392, now 16402): rows committed to it before it was added to publication "walstream_outbox" again were never sent`, true},
		{"slot monitor, dropped", `walstream: table "public"."outbox": is no longer in publication "walstream_outbox" (dropped or removed) while streaming; ALTER PUBLICATION`, true},
		{"missing at a first start", "walstream: " + names.TableMissing(outbox).Error(), false},
		{"not in the publication", `walstream: publication "walstream_outbox": does not include table "public"."outbox"; ALTER PUBLICATION "walstream_outbox" ADD TABLE "public"."outbox"`, false},
		{"another table dropped", "walstream: " + names.TableDropped(replication.Table{Schema: "billing", Name: "outbox"}, 16392, "0/150D4E8").Error(), false},
	} {
		if got := gapStop.MatchString(tc.stop); got != tc.want {
			t.Errorf("%s: gapStop matches %v, want %v: %s", tc.name, got, tc.want, tc.stop)
		}
	}
}
