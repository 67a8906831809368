package pipeline

import (
	"errors"
	"strings"
	"testing"

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
