package replication

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// deadlines records the read deadlines set on it.
type deadlines struct{ set []time.Time }

func (d *deadlines) SetReadDeadline(t time.Time) error { d.set = append(d.set, t); return nil }

// nothingToConfirm is a Confirmer with no position yet, so that a status
// update sends nothing and needs no connection.
type nothingToConfirm struct{}

func (nothingToConfirm) Confirm() (pglogrepl.LSN, bool) { return 0, false }
func (nothingToConfirm) ServerWALEnd(pglogrepl.LSN)     {}

// ConfirmSoon moves the read deadline Run blocks on to ConfirmInterval
// after the last status update, and only once per update however many
// commits ask: a busy stream sends a few updates a second, not one per
// Kafka transaction. The next status update puts it back to
// StatusInterval.
func TestConfirmSoonCoalesces(t *testing.T) {
	const status, confirm = time.Hour, 200 * time.Millisecond
	rd := &deadlines{}
	s := &Stream{cfg: StreamConfig{StatusInterval: status, ConfirmInterval: confirm}, rd: rd}
	s.ConfirmSoon() // before Run's first status update: nothing to move
	if len(rd.set) != 0 {
		t.Fatalf("ConfirmSoon before Run set deadlines %v", rd.set)
	}
	ctx := t.Context()
	if _, err := s.statusDue(ctx, nothingToConfirm{}); err != nil {
		t.Fatal(err)
	}
	sent := s.lastStatus
	if got, want := rd.set, []time.Time{sent.Add(status)}; len(got) != 1 || !got[0].Equal(want[0]) {
		t.Fatalf("deadlines after a status update = %v, want %v", got, want)
	}
	for range 1000 {
		s.ConfirmSoon()
	}
	if got, want := len(rd.set), 2; got != want {
		t.Fatalf("1000 ConfirmSoon calls set %d deadlines in all, want %d: they must coalesce", got, want)
	}
	if got, want := rd.set[1], sent.Add(confirm); !got.Equal(want) {
		t.Fatalf("ConfirmSoon deadline = %v, want the last status update + ConfirmInterval %v", got, want)
	}
	if _, err := s.statusDue(ctx, nothingToConfirm{}); err != nil {
		t.Fatal(err)
	}
	if got, want := rd.set[2], s.lastStatus.Add(status); !got.Equal(want) {
		t.Fatalf("deadline after the next update = %v, want %v", got, want)
	}
	// Long after the last update, a commit is confirmed at once: the
	// deadline is already past.
	s.lastStatus = time.Now().Add(-time.Minute)
	s.ConfirmSoon()
	if got := rd.set[len(rd.set)-1]; !got.Before(time.Now()) {
		t.Fatalf("deadline %v for a commit long after the last update, want one already past", got)
	}

	off := &deadlines{}
	s = &Stream{cfg: StreamConfig{StatusInterval: status}, rd: off}
	if _, err := s.statusDue(ctx, nothingToConfirm{}); err != nil {
		t.Fatal(err)
	}
	s.ConfirmSoon()
	if len(off.set) != 1 {
		t.Fatalf("with no ConfirmInterval, ConfirmSoon set deadlines %v", off.set[1:])
	}
}
