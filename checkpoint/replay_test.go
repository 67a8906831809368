package checkpoint

import (
	"errors"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// A server whose history was rewritten on the same timeline after the
// slot's position (a copy of its data directory restored and written to)
// replays from the slot: the stream published up to the checkpoint, then
// from the fork on transactions of another history, at LSNs that run on
// past the checkpoint. Whatever the positions, the witness stops the
// replay before it passes the checkpoint when a transaction with events
// the checkpoint covers is not one published, and nothing past the slot's
// position is confirmed before; a history that did not fork is never
// refused.
func TestWitnessRewrittenHistory(t *testing.T) {
	for seed := int64(1); seed <= 2000; seed++ {
		r := rand.New(rand.NewSource(seed))
		orig := genStream(r, 60)
		k := r.Intn(len(orig))
		var cp Checkpoint
		for _, it := range orig[:k+1] {
			if it.tx == nil {
				cp.LSN = it.marker
				continue
			}
			if it.tx.events > 0 {
				cp.Last = it.tx.last()
			}
			cp.LSN = it.tx.end
		}
		j := r.Intn(k + 1) // the slot confirmed everything before orig[j]
		slot := pglogrepl.LSN(1000)
		if j > 0 {
			slot = end(orig[j-1])
		}
		f := j + r.Intn(len(orig)-j+1) // the copy holds orig[:f]; f == len(orig): no fork
		server := append([]item(nil), orig[:f]...)
		if f < len(orig) {
			lsn := slot
			if f > 0 {
				lsn = end(orig[f-1])
			}
			for _, it := range genStream(r, 80) {
				if it.tx != nil {
					it.tx.commit += lsn - 1000
					it.tx.end += lsn - 1000
					it.tx.xid += 1_000_000
				} else {
					it.marker += lsn - 1000
				}
				server = append(server, it)
			}
		}

		tr := NewTracker(cp, true, slot)
		tr.ServerWALEnd(1 << 40)
		var refused error
		lost := false // a new transaction with events the checkpoint covers was sent
		for i, it := range server {
			at := end(it)
			if it.tx != nil && it.tx.commit < slot || it.tx == nil && it.marker < slot {
				continue
			}
			if it.tx != nil {
				refused = tr.Sent(it.tx.sent())
				lost = lost || i >= f && it.tx.events > 0 && cp.SkipTx(it.tx.commit)
			} else {
				refused = tr.DecodedTo(it.marker)
			}
			// At the latest where the replay reaches the checkpoint, the
			// first transaction or position it does not skip.
			if passed := it.tx != nil && it.tx.commit >= cp.LSN || it.tx == nil && it.marker >= cp.LSN; passed && lost && refused == nil {
				t.Fatalf("seed %d: the replay passed the checkpoint %s at %s without a refusal, after a new transaction it covers", seed, cp, at)
			}
			if c, _ := tr.Confirm(); c != slot && (lost || refused != nil) {
				t.Fatalf("seed %d: confirmed %s, past the slot's %s, on a rewritten history", seed, c, slot)
			}
			if refused != nil {
				break
			}
		}
		if refused == nil {
			refused = tr.DecodedTo(end(server[len(server)-1]) + 1)
		}
		var re *ReplayError
		switch {
		case lost && !errors.As(refused, &re):
			t.Fatalf("seed %d: a new transaction the checkpoint %s covers was skipped and not refused (%v)", seed, cp, refused)
		case f == len(orig) && refused != nil:
			t.Fatalf("seed %d: the history the checkpoint was published from is refused: %v", seed, refused)
		case refused != nil && !strings.Contains(refused.Error(), cp.Last.String()):
			t.Fatalf("seed %d: the refusal does not name the last transaction published (%s): %v", seed, cp.Last, refused)
		}
	}
}

func end(it item) pglogrepl.LSN {
	if it.tx != nil {
		return it.tx.end
	}
	return it.marker
}

// What a replay from the slot may show, one transaction at a time.
func TestWitness(t *testing.T) {
	at := time.Date(2026, 12, 6, 1, 2, 3, 456789000, time.UTC)
	last := Last{Xid: 700, CommitLSN: 0x500, CommitTime: at}
	cp := Checkpoint{LSN: 0x600, Last: last}
	partial := Checkpoint{LSN: 0x400, PartialCommitLSN: 0x500, Ordinal: 3, Last: last}
	tx := func(xid uint32, commit pglogrepl.LSN, events uint64) Sent {
		return Sent{Xid: xid, CommitLSN: commit, CommitTime: at, Events: events}
	}
	for _, tc := range []struct {
		name   string
		cp     Checkpoint
		slot   pglogrepl.LSN
		sent   []Sent
		to     pglogrepl.LSN // a keepalive after them; 0 for none
		refuse string        // in the error; "" for none
		done   bool          // confirmation is free again
	}{
		{"the slot at the checkpoint: nothing to replay", cp, 0x600, nil, 0, "", true},
		{"the last one again, then a new one", cp, 0x100, []Sent{tx(600, 0x200, 2), tx(700, 0x500, 1), tx(800, 0x700, 1)}, 0, "", true},
		{"the last one again, then the WAL passes the checkpoint", cp, 0x100, []Sent{tx(700, 0x500, 1)}, 0x650, "", true},
		{"the last one again, the WAL not yet past the checkpoint", cp, 0x100, []Sent{tx(700, 0x500, 1)}, 0x5F0, "", false},
		{"another transaction at its LSN", cp, 0x100, []Sent{tx(701, 0x500, 1)}, 0, "transaction 701 committed at 0/500", false},
		{"another commit time at its LSN", cp, 0x100, []Sent{{Xid: 700, CommitLSN: 0x500, CommitTime: at.Add(time.Microsecond), Events: 1}}, 0,
			"transaction 700 committed at 0/500 (2026-12-06T01:02:03.45679Z) instead", false},
		{"missing, a later one sent", cp, 0x100, []Sent{tx(600, 0x200, 1), tx(900, 0x700, 1)}, 0, "no transaction at 0/500, but transaction 900", false},
		{"missing, the WAL read past the checkpoint", cp, 0x100, []Sent{tx(600, 0x200, 1)}, 0x600, "no transaction at 0/500, and was read past it to 0/600", false},
		{"a transaction without events after it, before the checkpoint", cp, 0x100, []Sent{tx(700, 0x500, 1), tx(710, 0x580, 0)}, 0x600, "", true},
		{"a transaction with events after it, before the checkpoint", cp, 0x100, []Sent{tx(700, 0x500, 1), tx(710, 0x580, 2)}, 0,
			"transaction 710 committed at 0/580 with 2 events", false},
		{"the slot past it: events before the checkpoint", cp, 0x550, []Sent{tx(710, 0x580, 2)}, 0, "transaction 710 committed at 0/580 with 2 events", false},
		{"the slot past it: none", cp, 0x550, []Sent{tx(710, 0x580, 0)}, 0x600, "", true},
		{"a partial checkpoint: its transaction again", partial, 0x400, []Sent{tx(700, 0x500, 5)}, 0, "", true},
		{"a partial checkpoint: the WAL at the checkpoint's LSN is not past the transaction", partial, 0x400, nil, 0x450, "", false},
		{"a partial checkpoint: another transaction", partial, 0x400, []Sent{tx(702, 0x500, 5)}, 0, "transaction 702", false},
		{"an old record: nothing to check", Checkpoint{LSN: 0x600}, 0x100, []Sent{tx(1, 0x200, 4)}, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.cp, true, tc.slot)
			tr.ServerWALEnd(0x10000)
			var err error
			for _, s := range tc.sent {
				if err = tr.Sent(s); err != nil {
					break
				}
			}
			if err == nil && tc.to != 0 {
				err = tr.DecodedTo(tc.to)
			}
			switch {
			case tc.refuse == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)):
				t.Fatalf("got %v, want a refusal saying %q", err, tc.refuse)
			}
			want := tc.slot
			if tc.done {
				want = max(tc.slot, tc.cp.LSN)
			}
			if c, _ := tr.Confirm(); c != want {
				t.Fatalf("Confirm() = %s, want %s", c, want)
			}
		})
	}
}
