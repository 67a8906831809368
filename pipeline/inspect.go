package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
	// CheckpointKey and TransactionalID are the stream's: its own, or
	// those of earlier versions where its checkpoint was found there.
	CheckpointKey, TransactionalID string
	// Topics are those checked: the checkpoint and dead-letter topics, and
	// the topics of the route-by values the outbox tables hold; Missing
	// those the cluster does not have.
	Topics, MissingTopics []string
}

// routeValuesChecked bounds the route-by values Inspect reads per table.
const routeValuesChecked = 100

// inspectTopics lists the topics the stream writes to that are missing.
func (in *Inspection) inspectTopics(ctx context.Context, conn *pgx.Conn, cfg *Config) {
	topics := []string{cfg.CheckpointTopic}
	if cfg.DeadLetterTopic != "" {
		topics = append(topics, cfg.DeadLetterTopic)
	}
	if !cfg.SkipEvent.IsZero() && cfg.SkipTopic != "" {
		topics = append(topics, cfg.SkipTopic)
	}
	router, err := publish.NewRouter(cfg.Encoding, cfg.Outboxes...)
	for _, o := range cfg.Outboxes {
		if err != nil {
			break
		}
		var values []string
		values, err = replication.RouteValues(ctx, conn, replication.Table{Schema: o.Schema, Name: o.Table}, o.Columns.AggregateType, routeValuesChecked)
		for _, v := range values {
			if t, terr := router.TopicOf(o, v); terr == nil && publish.ValidTopic(t) == nil {
				topics = append(topics, t)
			}
		}
	}
	if err != nil {
		in.Warnings = append(in.Warnings, fmt.Sprintf("the outbox topics were not checked: %v", err))
	}
	slices.Sort(topics)
	in.Topics = slices.Compact(topics)
	in.MissingTopics, err = publish.MissingTopics(ctx, cfg.Kafka, in.Topics)
	if err != nil {
		in.Warnings = append(in.Warnings, fmt.Sprintf("checking the topics: %v", err))
	}
	for _, t := range in.MissingTopics {
		if t != cfg.CheckpointTopic { // walstream creates that one
			in.Warnings = append(in.Warnings, fmt.Sprintf("topic %s does not exist: a record to it stops the stream unless the cluster or walstream creates it", t))
		}
	}
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
	var legacy bool
	in.Checkpoint, in.WrittenAt, in.Found, legacy, err = findCheckpoint(kctx, &cfg, in.Server.Database)
	if err != nil {
		in.KafkaErr = fmt.Errorf("at %s: %w", strings.Join(cfg.Kafka.Brokers, ","), err)
		in.Problems = append(in.Problems, in.KafkaErr.Error())
	}
	if legacy {
		cfg.CheckpointKey, cfg.TransactionalID = cfg.LegacyKey, cfg.LegacyTransactionalID
	}
	in.CheckpointKey, in.TransactionalID = cfg.CheckpointKey, cfg.TransactionalID
	if in.KafkaErr == nil {
		in.inspectTopics(kctx, conn, &cfg)
	}
	if in.Found {
		if err := owned(in.Checkpoint, &cfg, in.Server); err != nil {
			in.Problems = append(in.Problems, err.Error())
		}
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
				Events: in.PhantomEvents, Slot: cfg.Names.Slot, CheckpointKey: cfg.CheckpointKey, Stream: cfg.Stream}).Error())
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
