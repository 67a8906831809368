package pipeline

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/replication"
)

func TestPlace(t *testing.T) {
	const sys = "7441234567890123456"
	on := func(tli int32, lsn pglogrepl.LSN) checkpoint.Checkpoint {
		return checkpoint.Checkpoint{LSN: lsn, Identity: checkpoint.Identity{SystemID: sys, Timeline: tli, Database: "app"}}
	}
	srv := func(tli int32, xlog pglogrepl.LSN) replication.Server {
		return replication.Server{SystemID: sys, Timeline: tli, XLogPos: xlog, Database: "app"}
	}
	// Timeline 3 forked from 2 at 0/5000, which forked from 1 at 0/3000.
	h3 := []replication.HistoryEntry{{Timeline: 1, Switch: 0x3000}, {Timeline: 2, Switch: 0x5000}}
	for _, tc := range []struct {
		name    string
		cp      checkpoint.Checkpoint
		srv     replication.Server
		history []replication.HistoryEntry
		want    Placement
	}{
		{"same timeline, behind the server", on(1, 0x2000), srv(1, 0x9000), nil, Placement{Verdict: Continuous}},
		{"same timeline, at the server's WAL end", on(1, 0x9000), srv(1, 0x9000), nil, Placement{Verdict: Continuous}},
		{"same timeline, ahead of the server", on(1, 0x9001), srv(1, 0x9000), nil, Placement{Verdict: Phantoms, Fork: 0x9000, Ahead: true}},
		{"same timeline, part of a transaction the server lacks", on(1, 0x8000).Part(0x9000, 3), srv(1, 0x9000), nil,
			Placement{Verdict: Phantoms, Fork: 0x9000, Ahead: true}},
		{"an old record, behind the server", checkpoint.Checkpoint{LSN: 0x2000}, srv(1, 0x9000), nil, Placement{Verdict: Unidentified}},
		{"an old record, ahead of the server", checkpoint.Checkpoint{LSN: 0xA000}, srv(1, 0x9000), nil, Placement{Verdict: Phantoms, Fork: 0x9000, Ahead: true}},
		{"another system", checkpoint.Checkpoint{LSN: 0x100, Identity: checkpoint.Identity{SystemID: "1", Timeline: 1}}, srv(1, 0x9000), nil,
			Placement{Verdict: SystemChanged}},
		{"another system, even far behind", checkpoint.Checkpoint{LSN: 0x1, Identity: checkpoint.Identity{SystemID: "1", Timeline: 1}}, srv(1, 0x9000), nil,
			Placement{Verdict: SystemChanged}},
		{"failover, checkpoint before the fork", on(2, 0x4000), srv(3, 0x9000), h3, Placement{Verdict: SafeFailover, Fork: 0x5000}},
		{"failover, checkpoint at the fork", on(2, 0x5000), srv(3, 0x9000), h3, Placement{Verdict: SafeFailover, Fork: 0x5000}},
		{"failover, checkpoint past the fork", on(2, 0x6000), srv(3, 0x9000), h3, Placement{Verdict: Phantoms, Fork: 0x5000}},
		{"two failovers, checkpoint past the older fork", on(1, 0x3100), srv(3, 0x9000), h3, Placement{Verdict: Phantoms, Fork: 0x3000}},
		{"two failovers, checkpoint before the older fork", on(1, 0x2000), srv(3, 0x9000), h3, Placement{Verdict: SafeFailover, Fork: 0x3000}},
		{"an old primary: checkpoint on a later timeline", on(4, 0x2000), srv(3, 0x9000), h3, Placement{Verdict: OffHistory}},
		{"the old primary after a failover", on(2, 0x2000), srv(1, 0x9000), nil, Placement{Verdict: OffHistory}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Place(tc.cp, tc.srv, tc.history); got != tc.want {
				t.Fatalf("Place(%v %v, %+v) = %+v, want %+v", tc.cp, tc.cp.Identity, tc.srv, got, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	now := time.Date(2026, 11, 23, 19, 0, 0, 0, time.UTC)
	old := checkpoint.Identity{SystemID: "7000000000000000001", Timeline: 1, Database: "app"}
	srv := replication.Server{SystemID: "7000000000000000001", Timeline: 2, XLogPos: 0x9000, Database: "app"}
	own := checkpoint.Identity{SystemID: srv.SystemID, Timeline: 2, Database: "app"}
	cp := checkpoint.Checkpoint{LSN: 0x6000, Identity: old, Events: 100, Counted: true}
	foreign := replication.Server{SystemID: "7999999999999999999", Timeline: 1, XLogPos: 0x300, Database: "app"}
	for _, tc := range []struct {
		name      string
		cp        checkpoint.Checkpoint
		pl        Placement
		srv       replication.Server
		acc       Accept
		want      checkpoint.Checkpoint
		wantFresh bool
		wantErr   []string // parts of the error; nil: no error
	}{
		{"continuous, identity already recorded", checkpoint.Checkpoint{LSN: 0x6000, Identity: own}, Placement{Verdict: Continuous}, srv, Accept{},
			checkpoint.Checkpoint{LSN: 0x6000, Identity: own}, false, nil},
		{"an old record takes the server's identity", checkpoint.Checkpoint{LSN: 0x6000}, Placement{Verdict: Unidentified}, srv, Accept{},
			checkpoint.Checkpoint{LSN: 0x6000, Identity: own}, true, nil},
		{"safe failover keeps the position", cp, Placement{Verdict: SafeFailover, Fork: 0x7000}, srv, Accept{},
			checkpoint.Checkpoint{LSN: 0x6000, Identity: own, Events: 100, Counted: true}, true, nil},
		{"phantoms stop", cp, Placement{Verdict: Phantoms, Fork: 0x5000}, srv, Accept{},
			cp, false, []string{"phantom events: 7 events", "0/5000 and 0/6000", "timeline 1 forked", "timeline 2"}},
		{"phantoms, count unknown", cp, Placement{Verdict: Phantoms, Fork: 0x5000}, srv, Accept{SystemChange: true},
			cp, false, []string{"an unknown number of events"}},
		{"phantoms accepted: the skip position moves to the fork", cp, Placement{Verdict: Phantoms, Fork: 0x5000}, srv, Accept{Phantoms: true},
			checkpoint.Checkpoint{LSN: 0x5000, Identity: own, Events: 100, Counted: true,
				Gap: checkpoint.Gap{Kind: checkpoint.GapPhantoms, Previous: old, From: 0x5000, To: 0x6000, Events: 7, At: now}}, true, nil},
		{"the server's WAL ends before the checkpoint: stop", checkpoint.Checkpoint{LSN: 0x6000, Identity: own}, Placement{Verdict: Phantoms, Fork: 0x5000, Ahead: true}, srv, Accept{},
			cp, false, []string{"at least 7 events", "between 0/5000 and 0/6000", "ends at 0/5000", "same timeline", "restored", "slot's position 0/200"}},
		{"the server's WAL ends before the checkpoint, accepted: from the slot, as where the WAL parted cannot be told",
			checkpoint.Checkpoint{LSN: 0x6000, Identity: own}, Placement{Verdict: Phantoms, Fork: 0x5000, Ahead: true}, srv, Accept{Phantoms: true},
			checkpoint.Checkpoint{LSN: 0x200, Identity: own,
				Gap: checkpoint.Gap{Kind: checkpoint.GapPhantoms, Previous: own, From: 0x200, To: 0x6000, Events: 7, At: now}}, true, nil},
		{"another system stops", cp, Placement{Verdict: SystemChanged}, foreign, Accept{Phantoms: true},
			cp, false, []string{"another Postgres cluster", foreign.SystemID, old.SystemID, "restored from a backup", "slot \"walstream\""}},
		{"another system accepted: from the slot", cp, Placement{Verdict: SystemChanged}, foreign, Accept{SystemChange: true},
			checkpoint.Checkpoint{LSN: 0x200, Identity: checkpoint.Identity{SystemID: foreign.SystemID, Timeline: 1, Database: "app"}, Events: 100, Counted: true,
				Gap: checkpoint.Gap{Kind: checkpoint.GapSystemChanged, Previous: old, To: 0x6000, Events: -1, At: now}}, true, nil},
		{"off the history stops, whatever is accepted", cp, Placement{Verdict: OffHistory}, srv, Accept{SystemChange: true, Phantoms: true},
			cp, false, []string{"not in the history", "old primary", "target_session_attrs=primary"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := int64(7)
			if strings.Contains(tc.name, "unknown") {
				events = -1
			}
			got, fresh, err := resolve(tc.cp, tc.pl, tc.srv, 0x200, events, tc.acc, now, "walstream", "walstream")
			if tc.wantErr != nil {
				var de *DivergedError
				if !errors.As(err, &de) {
					t.Fatalf("resolve = %v, want a DivergedError", err)
				}
				for _, part := range tc.wantErr {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q does not say %q", err, part)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || fresh != tc.wantFresh {
				t.Fatalf("resolve = %+v fresh %v, want %+v fresh %v", got, fresh, tc.want, tc.wantFresh)
			}
		})
	}
}
