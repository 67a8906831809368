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
	// Server is the server Postgres connections reach, and Host the
	// address that answered (the primary, for a multi-host URL).
	Server replication.Server
	Host   string
	// Placement is where the checkpoint lies in the server's history, when
	// Found; PhantomEvents counts the events published past the fork
	// when it is Phantoms (-1: unknown).
	Placement     Placement
	PhantomEvents int64
	// Failover is whether the slot follows a promotion.
	Failover replication.FailoverState
	// Problems are what makes the stream unable to go on without loss, or
	// what could not be read; empty when healthy. Warnings are what makes
	// a failover unsafe.
	Problems []string
	Warnings []string
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
	in := &Inspection{Slot: st, Problems: []string{}, Warnings: []string{}, Host: replication.RemoteHost(conn.PgConn())}
	if in.Failover, err = replication.CheckFailover(ctx, conn, cfg.Names); err != nil {
		return nil, err
	}
	in.Warnings = append(in.Warnings, in.Failover.Warnings...)
	// IDENTIFY_SYSTEM needs a replication connection; a role without the
	// REPLICATION attribute still gets the rest of the report.
	history, identified, err := inspectServer(ctx, cfg, in)
	if err != nil {
		in.Warnings = append(in.Warnings, fmt.Sprintf("identifying the server (IDENTIFY_SYSTEM needs a role with REPLICATION): %v", err))
	}
	kctx, cancel := context.WithTimeout(ctx, inspectKafkaTimeout)
	defer cancel()
	in.Checkpoint, in.WrittenAt, in.Found, err = publish.ReadCheckpoint(kctx, cfg.Kafka, cfg.CheckpointTopic, cfg.CheckpointKey)
	if err != nil {
		in.KafkaErr = fmt.Errorf("reading the checkpoint %q from topic %s at %s: %w", cfg.CheckpointKey, cfg.CheckpointTopic, strings.Join(cfg.Kafka.Brokers, ","), err)
		in.Problems = append(in.Problems, in.KafkaErr.Error())
	}
	// Asked whether the checkpoint could be read or not: with brokers
	// down, a partition's new leader may not serve offsets yet, and this
	// says why.
	switch unwritable, err := publish.Unwritable(kctx, cfg.Kafka, cfg.TransactionalID, cfg.CheckpointTopic); {
	case err != nil && in.KafkaErr == nil:
		in.Warnings = append(in.Warnings, fmt.Sprintf("checking that Kafka can take walstream's writes: %v", err))
	case len(unwritable) > 0:
		in.Problems = append(in.Problems, "Kafka cannot take walstream's writes, so no transaction can commit until it can: "+strings.Join(unwritable, "; ")+
			" (see docs/kafka.md, When Kafka cannot take writes)")
	}
	if in.Found && identified {
		in.Placement = Place(in.Checkpoint, in.Server, history)
		in.PhantomEvents = -1
		if in.Placement.Verdict == Phantoms {
			h, err := publish.CheckpointHistory(ctx, cfg.Kafka, cfg.CheckpointTopic, cfg.CheckpointKey)
			if err != nil {
				return nil, err
			}
			in.PhantomEvents = checkpoint.EventsPast(h, in.Placement.Fork)
		}
		switch in.Placement.Verdict {
		case Phantoms, SystemChanged, OffHistory:
			in.Problems = append(in.Problems, (&DivergedError{Placement: in.Placement, Checkpoint: in.Checkpoint, Server: in.Server, From: in.Placement.goOnFrom(st.ConfirmedFlush),
				Events: in.PhantomEvents, Slot: cfg.Names.Slot, CheckpointKey: cfg.CheckpointKey}).Error())
		}
	}
	slot := cfg.Names.Slot
	switch {
	case !st.Exists && in.Found:
		in.Problems = append(in.Problems, fmt.Sprintf("slot %q does not exist, but Kafka holds checkpoint %s: it was dropped, or the server was "+
			"promoted from a standby without a copy of it; rows committed since the checkpoint cannot be streamed (see docs/postgres.md, The slot is missing)",
			slot, in.Checkpoint))
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

// inspectServer fills in the server's identity and returns its timeline
// history.
func inspectServer(ctx context.Context, cfg Config, in *Inspection) (history []replication.HistoryEntry, ok bool, err error) {
	rconn, err := replication.Dial(ctx, &cfg.Postgres.Config)
	if err != nil {
		return nil, false, err
	}
	defer rconn.Close(context.WithoutCancel(ctx))
	in.Server, history, err = identify(ctx, rconn)
	return history, err == nil, err
}
