package pipeline

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/debezium"
)

// fromOffset makes the first checkpoint of a takeover, or refuses what
// would lose events, naming the slot's position and the offset.
func TestFromOffset(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	commit := now.Add(-time.Second)
	off := debezium.Offset{Connector: "outbox", Server: "dbz", LSN: 0x2000, Proc: 0x2000, Commit: 0x1800, TxID: 9, HasTxID: true,
		CommitTime: commit, MessageType: "INSERT", Raw: []byte(`{"lsn":8192}`)}
	tk := Takeover{Source: debezium.Source{Kind: debezium.SourceTopic, Topic: "connect-offsets"}, Lookback: time.Minute}
	own := checkpoint.Identity{SystemID: "7", Timeline: 1, Database: "app"}
	for _, c := range []struct {
		name           string
		off            debezium.Offset
		slot, until    pglogrepl.LSN
		allowSlotAhead bool
		want           pglogrepl.LSN // the checkpoint's LSN; 0: refused
		refusal        string
		slotAhead      bool
	}{
		{name: "slot behind the offset", off: off, slot: 0x1000, until: 0x3000, want: 0x1800},
		{name: "slot at the offset", off: off, slot: 0x1800, until: 0x3000, want: 0x1800},
		{name: "slot ahead", off: off, slot: 0x1900, until: 0x3000, refusal: "slot confirmed_flush_lsn 0/1900, Debezium's offset lsn_commit 0/1800", slotAhead: true},
		{name: "slot ahead, allowed", off: off, slot: 0x1900, until: 0x3000, allowSlotAhead: true, want: 0x1900},
		{name: "offset past the server's WAL", off: off, slot: 0x1000, until: 0x1700, refusal: "past the server's WAL flush position 0/1700"},
		{name: "no lsn_commit", off: debezium.Offset{LSN: 0x2000, Proc: 0x1F00}, slot: 0x1000, until: 0x3000, want: 0x1F00},
		{name: "a snapshot", off: debezium.Offset{Snapshot: true}, slot: 0x1000, until: 0x3000, refusal: "snapshot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp, err := fromOffset(c.off, tk, c.slot, c.until, c.allowSlotAhead, own, now)
			if c.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), c.refusal) {
					t.Fatalf("fromOffset = %s, %v; want a refusal naming %q", cp, err, c.refusal)
				}
				if errors.Is(err, ErrSlotAhead) != c.slotAhead {
					t.Errorf("errors.Is(ErrSlotAhead) = %v, want %v", !c.slotAhead, c.slotAhead)
				}
				return
			}
			if err != nil || cp.LSN != c.want || cp.Identity != own {
				t.Fatalf("fromOffset = %s (%v), %v; want %s", cp, cp.Identity, err, c.want)
			}
			tr := cp.Notes.Takeover
			if tr == nil || tr.Until != c.until || tr.Source != "kafka:connect-offsets" || string(tr.Offset) != string(c.off.Raw) || !tr.Time.Equal(now) {
				t.Fatalf("takeover = %+v", tr)
			}
			if want := c.off.CommitTime.Add(-time.Minute); !c.off.CommitTime.IsZero() && !tr.Since.Equal(want) {
				t.Errorf("Since = %s, want %s", tr.Since, want)
			}
			if c.off.CommitTime.IsZero() && !tr.Since.IsZero() {
				t.Errorf("Since = %s without a commit time, want zero: read every record", tr.Since)
			}
			if gap := cp.Gap; c.slot > c.off.Resume() && (gap.Kind != checkpoint.GapSlotAhead || gap.From != c.off.Resume() || gap.To != c.slot) {
				t.Errorf("Gap = %+v, want the slot ahead from the offset to the slot", gap)
			}
		})
	}
}

// A takeover's errors stop walstream: the operator is at hand.
func TestTakeoverErrorsArePermanent(t *testing.T) {
	for _, err := range []error{
		&TakeoverError{Slot: "s", Err: debezium.ErrNoOffset},
		&TakeoverError{Slot: "s", Err: errors.Join(ErrSlotAhead, errors.New("x"))},
	} {
		if f := classifyFailure(err); !f.permanent {
			t.Errorf("classifyFailure(%v) = %+v, want permanent", err, f)
		}
	}
	if f := classifyFailure(&TakeoverError{Err: errors.New("x")}); f.kind != kindTakeover {
		t.Errorf("kind = %s, want %s", f.kind, kindTakeover)
	}
}
