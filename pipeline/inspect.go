package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/group"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish/format"
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
	// Holder is the process holding the slot, when one does; Creating,
	// when the slot is still being created, what that waits for.
	Holder   *replication.Backend
	Creating *replication.SlotWait
	// Behind, when the slot is behind, says why when the server's
	// decoding explains it: a large transaction spilled to disk and
	// decoded again at its commit holds up everything after it.
	Behind string
	// Problems are what makes the stream unable to go on without loss, or
	// what could not be read; empty when healthy. Warnings are what makes
	// a failover unsafe.
	Problems []string
	Warnings []string
	// KafkaErr is why the checkpoint could not be read; the slot's state
	// is still known then.
	KafkaErr error
	// Held are the transactions that hold back the last stable offset of
	// the checkpoint topic.
	Held []kafka.Hold
	// CheckpointKey and TransactionalID are the stream's: its own, or
	// those of earlier versions where its checkpoint was found there.
	CheckpointKey, TransactionalID string
	// Topics are those checked: the checkpoint and dead-letter topics, and
	// the topics of the route-by values the outbox tables hold; Missing
	// those the cluster does not have.
	Topics, MissingTopics []string
	// Registry is the schema registry keys or values need, empty when
	// none; RegistryErr is why it does not answer.
	Registry    string
	RegistryErr error
	// Debezium is whether the connector a takeover follows has stopped,
	// when the stream takes over from one or its status topic is named.
	Debezium *DebeziumStop
}

// DebeziumStop is whether Debezium's connector has stopped, read without
// Kafka Connect's REST API: from the slot's holder, and from Kafka
// Connect's status topic where it is named.
type DebeziumStop struct {
	// Pending says why the stream's next start takes over from the
	// connector, empty when it does not (takeoverPending).
	Pending string
	// Other is the slot's holder when it is no instance of the stream
	// (its application_name is another): the connector still streaming.
	Other *replication.Backend
	// Status is the connector's state in the status topic, when one is
	// named; StatusErr why it could not be read.
	Status    *debezium.ConnectorStatus
	StatusErr error
}

// Stopped reports whether the connector has let go of the slot, and its
// status, where read, says it stopped or was deleted.
func (d *DebeziumStop) Stopped() bool {
	return d.Other == nil && d.StatusErr == nil && (d.Status == nil || d.Status.Stopped())
}

// inspectDebezium reads whether the connector the stream takes over from
// stopped; a problem while the next start would take over from it, or the
// status topic was named to check it.
func (in *Inspection) inspectDebezium(ctx context.Context, cfg *Config) {
	t := cfg.Takeover
	if !t.Enabled() && t.StatusTopic == "" {
		return
	}
	d := &DebeziumStop{}
	if t.Enabled() && in.KafkaErr == nil {
		d.Pending = takeoverPending(ctx, cfg, in.Checkpoint, in.Found)
	}
	if h := in.Holder; h != nil && h.Application != replication.AppName(&cfg.Postgres.Config) {
		d.Other = h
	}
	if t.StatusTopic != "" {
		st, err := debezium.ReadStatus(ctx, topicReader{cfg.Kafka}, t.StatusTopic, t.Selector.Connector)
		d.Status, d.StatusErr = &st, err
	}
	in.Debezium = d
	if d.Stopped() || d.Pending == "" && t.StatusTopic == "" {
		return
	}
	var why []string
	if d.Other != nil {
		why = append(why, fmt.Sprintf("slot %q is held by %s, no instance of this stream", cfg.Names.Slot, d.Other))
	}
	switch {
	case d.StatusErr != nil:
		why = append(why, d.StatusErr.Error())
	case d.Status != nil && !d.Status.Stopped():
		why = append(why, "status topic "+t.StatusTopic+": "+d.Status.String())
	}
	in.Problems = append(in.Problems, fmt.Sprintf("Debezium's %s has not stopped: %s (see docs/debezium.md, Checking that the connector stopped)",
		t.Selector, strings.Join(why, "; ")))
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
	router, err := format.NewRouter(cfg.Encoding, nil, cfg.Outboxes...)
	for _, o := range cfg.Outboxes {
		if err != nil {
			break
		}
		var values []string
		values, err = replication.RouteValues(ctx, conn, replication.Table{Schema: o.Schema, Name: o.Table}, o.Columns.AggregateType, routeValuesChecked)
		for _, v := range values {
			if t, terr := router.TopicOf(o, v); terr == nil && format.ValidTopic(t) == nil {
				topics = append(topics, t)
			}
		}
	}
	if err != nil {
		in.Warnings = append(in.Warnings, fmt.Sprintf("the outbox topics were not checked: %v", err))
	}
	slices.Sort(topics)
	in.Topics = slices.Compact(topics)
	in.MissingTopics, err = kafka.MissingTopics(ctx, cfg.Kafka, in.Topics)
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

// InspectFleet describes the group of cfg's fleet (cfg.Fleet.Group) as its
// coordinator does: its members, and the streams each runs.
func InspectFleet(ctx context.Context, cfg Config) (*FleetReport, error) {
	kctx, cancel := context.WithTimeout(ctx, inspectKafkaTimeout)
	defer cancel()
	d, err := group.Describe(kctx, cfg.Kafka, cfg.Fleet.Group)
	if err != nil {
		return nil, fmt.Errorf("at %s: %w", strings.Join(cfg.Kafka.Brokers, ","), err)
	}
	f := &FleetReport{Group: d.Group, State: d.State, Generation: d.Generation, Leader: d.Leader, Members: []FleetMemberReport{}}
	for _, m := range d.Members {
		f.Members = append(f.Members, FleetMemberReport{MemberID: m.ID, ClientID: m.ClientID, ClientHost: m.Host, Host: m.Name,
			Streams: append([]string{}, m.Streams...)})
	}
	return f, nil
}

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
	if st.Active && st.ActivePID != nil {
		h, err := replication.DescribeBackend(ctx, conn, *st.ActivePID)
		if err != nil {
			return nil, err
		}
		in.Holder = &h
		if st.Creating() {
			w, err := replication.SlotCreationWait(ctx, conn, cfg.Names.Slot, *st.ActivePID, cfg.BlockingQueries)
			if err != nil {
				return nil, err
			}
			in.Creating = &w
		}
	}
	// IDENTIFY_SYSTEM needs a replication connection; a role without the
	// REPLICATION attribute still gets the rest of the report.
	history, identified, err := inspectServer(ctx, cfg, in)
	if err != nil {
		in.Warnings = append(in.Warnings, fmt.Sprintf("identifying the server (IDENTIFY_SYSTEM needs a role with REPLICATION): %v", err))
	}
	cfg.hook("identified")
	kctx, cancel := context.WithTimeout(ctx, inspectKafkaTimeout)
	defer cancel()
	var legacy bool
	in.Checkpoint, in.WrittenAt, in.Found, legacy, err = findCheckpoint(kctx, &cfg, in.Server.Database)
	if err != nil {
		in.KafkaErr = fmt.Errorf("at %s: %w", strings.Join(cfg.Kafka.Brokers, ","), err)
		in.Problems = append(in.Problems, in.KafkaErr.Error())
	}
	if legacy {
		if cfg.LegacyTransactionalID != "" {
			cfg.TransactionalID = cfg.LegacyTransactionalID
		}
		cfg.CheckpointKey = cfg.LegacyKey
	}
	in.CheckpointKey, in.TransactionalID = cfg.CheckpointKey, cfg.TransactionalID
	if cfg.Encoding.UsesRegistry() {
		rctx, cancel := context.WithTimeout(ctx, inspectKafkaTimeout)
		in.Registry, in.RegistryErr = format.CheckRegistry(rctx, cfg.Encoding.Registry)
		cancel()
		if in.RegistryErr != nil {
			in.Problems = append(in.Problems, "no record can be written without the schema registry: "+in.RegistryErr.Error())
		}
	}
	if in.KafkaErr == nil {
		in.inspectTopics(kctx, conn, &cfg)
	}
	in.inspectDebezium(ctx, &cfg)
	if in.Found {
		if err := owned(in.Checkpoint, &cfg, in.Server); err != nil {
			in.Problems = append(in.Problems, err.Error())
		}
	}
	// Asked whether the checkpoint could be read or not: with brokers
	// down, a partition's new leader may not serve offsets yet, and this
	// says why.
	switch unwritable, err := kafka.Unwritable(kctx, cfg.Kafka, cfg.TransactionalID, cfg.CheckpointTopic); {
	case err != nil && in.KafkaErr == nil:
		in.Warnings = append(in.Warnings, fmt.Sprintf("checking that Kafka can take walstream's writes: %v", err))
	case len(unwritable) > 0:
		in.Problems = append(in.Problems, "Kafka cannot take walstream's writes, so no transaction can commit until it can: "+strings.Join(unwritable, "; ")+
			" (see docs/kafka.md, When Kafka cannot take writes)")
	}
	if in.KafkaErr == nil {
		held, err := kafka.Holds(kctx, cfg.Kafka, cfg.CheckpointTopic)
		if err != nil {
			in.Warnings = append(in.Warnings, fmt.Sprintf("checking for transactions that hold back the checkpoint topic: %v", err))
		}
		for _, h := range held {
			in.Warnings = append(in.Warnings, "the checkpoint topic "+h.String()+": read_committed readers of it see no checkpoint written after it began "+
				"until Kafka ends it, at its timeout at the latest; walstream reads past it (see docs/kafka.md, A transaction holding the checkpoint topic)")
		}
		in.Held = held
	}
	if in.Found && identified {
		// The stream may have committed past the WAL end identified
		// before the checkpoint was read.
		walEnd := func(ctx context.Context) (pglogrepl.LSN, error) { return replication.WALEnd(ctx, conn) }
		if srv, err := walEndFor(ctx, in.Checkpoint, in.Server, walEnd); err != nil {
			in.Warnings = append(in.Warnings, err.Error())
		} else {
			in.Server = srv
		}
		in.Placement = Place(in.Checkpoint, in.Server, history)
		in.PhantomEvents = -1
		if in.Placement.Verdict == Phantoms {
			h, err := store.CheckpointHistory(ctx, cfg.Kafka, cfg.CheckpointTopic, cfg.CheckpointKey)
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
	if st.HasConfirmed && !st.CaughtUp() && st.Decoding != nil {
		// What the server does for the slot in a second tells a large
		// transaction being decoded from one that was.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(lagSample):
		}
		after, err := replication.PollSlot(ctx, conn, cfg.Names)
		if err != nil {
			return nil, err
		}
		var walsender *replication.Backend
		if after.Active && after.ActivePID != nil {
			if b, err := replication.DescribeBackend(ctx, conn, *after.ActivePID); err == nil {
				walsender = &b
			}
		}
		in.Behind = explainLag(st.Decoding, after.Decoding, walsender, lagSample)
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

// lagSample is how long Inspect watches the server's decoding of a slot
// that is behind.
const lagSample = time.Second

// explainLag says why a slot is behind when the server's decoding, seen at
// before and again over the sample, explains it; empty otherwise.
// Transactions larger than logical_decoding_work_mem are spilled to disk
// while decoded and decoded again at their commit, whatever table they
// write: everything committed after such a transaction waits for that.
// Streamed in progress instead (walstream asks for it on Postgres 14 and
// later), they hold nothing up.
func explainLag(before, after *replication.DecodingStats, walsender *replication.Backend, sample time.Duration) string {
	if before == nil || after == nil {
		return ""
	}
	grew := func(now, then int64) int64 {
		if now < then { // reset meanwhile
			return now
		}
		return now - then
	}
	spilled, streamed := grew(after.SpillBytes, before.SpillBytes), grew(after.StreamBytes, before.StreamBytes)
	since := "since the statistics were reset"
	if !after.StatsReset.IsZero() {
		since = "since " + after.StatsReset.UTC().Format(time.RFC3339)
	}
	history := fmt.Sprintf("Postgres has spilled %s of %d transactions for this slot %s", HumanBytes(after.SpillBytes), after.SpillTxns, since)
	switch {
	case spilled > 0:
		return fmt.Sprintf("Postgres is decoding a transaction larger than logical_decoding_work_mem (%s) and spilling it to disk (%s in %s): "+
			"it is decoded again at its commit, and everything committed after it waits for that; %s", after.WorkMem, HumanBytes(spilled), sample, history)
	case walsender != nil && strings.HasPrefix(walsender.WaitEvent, "IO/ReorderBuffer"):
		return fmt.Sprintf("the walsender reads a transaction it spilled to disk back at its commit (wait event %s): "+
			"everything committed after it waits for that; %s", walsender.WaitEvent, history)
	case streamed > 0:
		return fmt.Sprintf("Postgres streams a large transaction in progress (%s in %s): walstream keeps its outbox rows until it commits, "+
			"and nothing committed after it waits for it", HumanBytes(streamed), sample)
	case after.SpillTxns > 0:
		return fmt.Sprintf("%s, each larger than logical_decoding_work_mem (%s): such a transaction holds up everything committed after it "+
			"while Postgres decodes it again at its commit", history, after.WorkMem)
	}
	return ""
}

// HumanBytes is a size for people, in binary units.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
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
