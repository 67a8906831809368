package pipeline

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/replication"
)

// The report computes lag, retained WAL, the checkpoint's age and the
// phantom range, and keeps the JSON shape walstream status --json prints.
func TestReport(t *testing.T) {
	cfg := Config{Names: replication.Names{Slot: "orders"}, CheckpointTopic: "walstream.checkpoints", CheckpointKey: "orders"}
	written := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lag := 1500 * time.Millisecond
	in := &Inspection{
		Slot: replication.SlotState{Slot: replication.Slot{Plugin: "pgoutput", WALStatus: "reserved", ConfirmedFlush: 0x1000, HasConfirmed: true},
			Exists: true, CurrentLSN: 0x1800, RestartLSN: 0x800, HasRestart: true, FlushLag: &lag},
		Checkpoint: checkpoint.Checkpoint{LSN: 0x900, PartialCommitLSN: 0x950, Counted: true, Events: 7,
			Identity: checkpoint.Identity{SystemID: "1", Timeline: 1, Database: "app"},
			Gap:      checkpoint.Gap{Kind: checkpoint.GapSlotAhead, From: 0x10, To: 0x20, Events: -1, At: written}},
		WrittenAt: written, Found: true,
		Server:    replication.Server{SystemID: "1", Timeline: 2, XLogPos: 0x1800, Database: "app"},
		Placement: Placement{Verdict: Phantoms, Fork: pglogrepl.LSN(0x880)}, PhantomEvents: 3,
		Problems: []string{"p"}, Warnings: []string{}, KafkaErr: errors.New("kafka down"),
	}
	r := in.Report(cfg, written.Add(90*time.Second))
	s, c := r.Slot, r.Checkpoint
	if s.Name != "orders" || s.LagBytes != 0x800 || s.CaughtUp || *s.RetainedWALBytes != 0x1000 || *s.FlushLagSeconds != 1.5 || s.ConfirmedFlush != "0/1000" {
		t.Errorf("slot %+v", s)
	}
	if !c.Found || *c.AgeSeconds != 90 || *c.Events != 7 || c.Placement != "phantoms" || c.Topic != "walstream.checkpoints" || c.Key != "orders" {
		t.Errorf("checkpoint %+v", c)
	}
	if p := c.Phantoms; p == nil || p.FromLSN != "0/880" || p.ToLSN != "0/950" || p.Events != 3 {
		t.Errorf("phantoms %+v: want from the fork to the partial commit", p)
	}
	if g := c.Gap; g == nil || g.Kind != "slot_ahead" || g.FromLSN != "0/10" || g.Events != -1 {
		t.Errorf("gap %+v", g)
	}
	if r.Error != "kafka down" || r.Server.WALEnd != "0/1800" || r.Failover.StandbySlots == nil {
		t.Errorf("report %+v", r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ Slot, Checkpoint, Failover map[string]any }
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Slot["retained_wal_bytes"] != float64(0x1000) || back.Checkpoint["placement"] != "phantoms" ||
		back.Failover["synchronized_standby_slots"] == nil {
		t.Errorf("JSON %s", b)
	}

	// A slot without restart_lsn and a server not identified: no retained
	// WAL, no placement; no checkpoint: no age.
	in = &Inspection{Slot: replication.SlotState{Exists: true, CurrentLSN: 0x10, Slot: replication.Slot{ConfirmedFlush: 0x10, HasConfirmed: true}}}
	r = in.Report(cfg, written)
	if r.Slot.RetainedWALBytes != nil || !r.Slot.CaughtUp || r.Checkpoint.Found || r.Checkpoint.AgeSeconds != nil || r.Checkpoint.Placement != "" {
		t.Errorf("report %+v", r)
	}

	// A slot being created is held, but not streamed, caught up or behind.
	pid := int32(42)
	in = &Inspection{Slot: replication.SlotState{Exists: true, CurrentLSN: 0x2000, Slot: replication.Slot{Type: "logical", Active: true, ActivePID: &pid}},
		Holder:   &replication.Backend{PID: pid, Type: "client backend"},
		Creating: &replication.SlotWait{Slot: "orders", PID: pid, Blockers: []replication.Blocker{{PID: 7, Xid: 900, XidAge: 3, Current: true}}}}
	r = in.Report(cfg, written)
	if r.Streaming || r.Slot.CaughtUp || r.Slot.LagBytes != 0 || r.Slot.ConfirmedFlush != "" || r.Slot.Creating == nil ||
		len(r.Slot.Creating.WaitingFor) != 1 || r.Slot.Creating.WaitingFor[0].Xid != 900 || !r.Slot.Creating.WaitingFor[0].Current {
		t.Errorf("report of a slot being created: streaming %v, slot %+v", r.Streaming, r.Slot)
	}
}

// A stream no member of its fleet runs is a warning; while the group
// rebalances, Kafka describes no member's streams, and the warning says
// that instead of naming none.
func TestReportFleet(t *testing.T) {
	members := []FleetMemberReport{{MemberID: "m1", Host: "h1", Streams: []string{"orders"}}, {MemberID: "m2", Host: "h2"}}
	for _, tc := range []struct {
		state   string
		members []FleetMemberReport
		member  string
		warning string
	}{
		{"Stable", members, "m1", ""},
		{"Stable", members[1:], "", "no member of the fleet's group g (Stable, 1 members) runs stream orders"},
		{"Empty", nil, "", "no member of the fleet's group g (Empty, 0 members) runs stream orders"},
		{"CompletingRebalance", []FleetMemberReport{{MemberID: "m1"}, {MemberID: "m2"}}, "", "is rebalancing (CompletingRebalance, 2 members)"},
		{"PreparingRebalance", []FleetMemberReport{{MemberID: "m1"}}, "", "is rebalancing (PreparingRebalance, 1 members)"},
	} {
		r := &Report{Stream: "orders"}
		r.AddFleet(&FleetReport{Group: "g", State: tc.state, Members: tc.members})
		if r.Fleet.MemberID != tc.member {
			t.Errorf("%s: member %q, want %q", tc.state, r.Fleet.MemberID, tc.member)
		}
		switch {
		case tc.warning == "" && len(r.Warnings) != 0:
			t.Errorf("%s: warnings %q", tc.state, r.Warnings)
		case tc.warning != "" && (len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], tc.warning)):
			t.Errorf("%s: warnings %q, want one saying %q", tc.state, r.Warnings, tc.warning)
		}
	}
}
