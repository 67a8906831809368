package pipeline

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
)

// Inspection is the state of a stream as an operator asks for it: the
// slot as Postgres shows it, the checkpoint in Kafka, and what is wrong.
type Inspection struct {
	Slot replication.SlotState
	// Checkpoint and WrittenAt are the last committed checkpoint, when
	// Found.
	Checkpoint checkpoint.Checkpoint
	WrittenAt  time.Time
	Found      bool
	// Problems are what makes the stream unable to go on without loss, or
	// what could not be read; empty when healthy.
	Problems []string
	// KafkaErr is why the checkpoint could not be read; the slot's state
	// is still known then.
	KafkaErr error
}

// inspectKafkaTimeout bounds reading the checkpoint: a reachable cluster
// answers in far less, and the slot's state is worth printing without it.
const inspectKafkaTimeout = 10 * time.Second

// Inspect reads the slot and the checkpoint, changing nothing, so that it
// may run while walstream streams.
func Inspect(ctx context.Context, cfg Config) (*Inspection, error) {
	conn, err := replication.Connect(ctx, cfg.Postgres)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := replication.PollSlot(ctx, conn, cfg.Names)
	if err != nil {
		return nil, err
	}
	in := &Inspection{Slot: st, Problems: []string{}}
	kctx, cancel := context.WithTimeout(ctx, inspectKafkaTimeout)
	defer cancel()
	in.Checkpoint, in.WrittenAt, in.Found, err = publish.ReadCheckpoint(kctx, cfg.Kafka, cfg.CheckpointTopic, cfg.CheckpointKey)
	if err != nil {
		in.KafkaErr = fmt.Errorf("reading the checkpoint %q from topic %s at %s: %w", cfg.CheckpointKey, cfg.CheckpointTopic, strings.Join(cfg.Kafka.Brokers, ","), err)
		in.Problems = append(in.Problems, in.KafkaErr.Error())
	}
	slot := cfg.Names.Slot
	switch {
	case !st.Exists:
		in.Problems = append(in.Problems, fmt.Sprintf("slot %q does not exist", slot))
	case st.WALStatus == "lost":
		in.Problems = append(in.Problems, fmt.Sprintf("slot %q is lost (wal_status = lost): events may be missing", slot))
	case in.Found && in.Checkpoint.SlotAhead(st.ConfirmedFlush):
		in.Problems = append(in.Problems, fmt.Sprintf("slot %q confirmed_flush_lsn %s is ahead of the checkpoint %s: events in between may be missing",
			slot, st.ConfirmedFlush, in.Checkpoint))
	}
	return in, nil
}
