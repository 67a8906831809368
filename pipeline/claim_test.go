package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/replication"
)

// A checkpoint is this stream's when its slot and database are (or were
// not recorded); its stream name does not decide.
func TestOwned(t *testing.T) {
	cfg := &Config{Stream: "app/walstream", Names: replication.Names{Slot: "walstream"}, CheckpointKey: "app/walstream", CheckpointTopic: "walstream.checkpoints"}
	srv := replication.Server{SystemID: "1", Database: "app"}
	id := checkpoint.Identity{SystemID: "1", Timeline: 1, Database: "app"}
	for _, tc := range []struct {
		name  string
		owner checkpoint.Owner
		id    checkpoint.Identity
		want  string
	}{
		{"this stream", checkpoint.Owner{Stream: "app/walstream", Slot: "walstream"}, id, ""},
		{"renamed", checkpoint.Owner{Stream: "orders", Slot: "walstream"}, id, ""},
		{"before identities", checkpoint.Owner{Slot: "walstream"}, checkpoint.Identity{}, ""},
		{"another system", checkpoint.Owner{Slot: "walstream"}, checkpoint.Identity{SystemID: "2", Database: "app"}, ""},
		{"another slot", checkpoint.Owner{Stream: "app/other", Slot: "other"}, id,
			`two streams claim checkpoint key "app/walstream" in topic walstream.checkpoints: this stream (stream app/walstream: database app, slot walstream, system 1) and the one whose checkpoint is there (stream app/other, slot other: system 1 timeline 1 database app)`},
		{"another database", checkpoint.Owner{Slot: "walstream"}, checkpoint.Identity{SystemID: "1", Database: "billing"}, "two streams claim"},
	} {
		err := owned(checkpoint.Checkpoint{Owner: tc.owner, Identity: tc.id}, cfg, srv)
		var sk *SharedKeyError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it owned", tc.name, err)
		case tc.want != "" && (!errors.As(err, &sk) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		case tc.want != "" && !classifyFailure(err).permanent:
			t.Errorf("%s: a shared key is retried", tc.name)
		}
	}
}

// A checkpoint older than the last one the process committed is refused
// only within one history: after a change of system an operator accepted,
// or a failover to a later timeline, the checkpoints of the new history
// are compared with each other, not with the old one's last position.
func TestRegressedWithinHistory(t *testing.T) {
	srv := replication.Server{SystemID: "8", Timeline: 2, XLogPos: 0x10000, Database: "d"}
	cfg := &Config{Names: replication.Names{Slot: "s"}, CheckpointKey: "k", CheckpointTopic: "cp", TransactionalID: "walstream-d/s",
		Accept: Accept{SystemChange: true}}
	old := checkpoint.Identity{SystemID: "7", Timeline: 1, Database: "d"}
	tl1 := checkpoint.Identity{SystemID: "8", Timeline: 1, Database: "d"}
	tl2 := checkpoint.Identity{SystemID: "8", Timeline: 2, Database: "d"}
	at := func(lsn pglogrepl.LSN, id checkpoint.Identity) checkpoint.Checkpoint {
		return checkpoint.Checkpoint{LSN: lsn, Identity: id, Owner: checkpoint.Owner{Slot: "s"}}
	}
	for _, tc := range []struct {
		name            string
		committed, read checkpoint.Checkpoint
		regressed       bool
	}{
		{"older, same history", at(0x900, tl2), at(0x500, tl2), true},
		{"the same", at(0x900, tl2), at(0x900, tl2), false},
		{"another system, accepted", at(0x900, old), at(0x500, tl2), false},
		{"a later timeline", at(0x900, tl1), at(0x500, tl2), false},
		{"an earlier timeline", at(0x500, tl2), at(0x900, tl1), true},
		{"no identity recorded", at(0x900, tl2), at(0x500, checkpoint.Identity{}), true},
	} {
		src := &fakeSource{fence: func(context.Context) error { return nil },
			read: func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
				return tc.read, time.Now(), true, nil
			}}
		_, _, err := fenceAndRead(context.Background(), src, cfg, srv, &earlier{committed: tc.committed}, slog.New(slog.DiscardHandler))
		var re *RegressedError
		if errors.As(err, &re) != tc.regressed || err != nil && !tc.regressed {
			t.Errorf("%s: fenceAndRead = %v; want regressed %v", tc.name, err, tc.regressed)
		}
		// What the process remembers as committed follows the history.
		prior := &earlier{committed: tc.committed}
		prior.remember(tc.read)
		if want := tc.committed; !tc.regressed && prior.committed != tc.read || tc.regressed && prior.committed != want {
			t.Errorf("%s: remembered %s after a session committed %s, having committed %s", tc.name, prior.committed, tc.read, tc.committed)
		}
	}
}
