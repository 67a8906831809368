package pipeline

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/replication"
)

// Report is an Inspection as `walstream status --json` prints it: the
// figures an operator reads (lag, retained WAL, checkpoint age, phantom
// events) computed, positions as text. Its JSON is a stable interface.
type Report struct {
	// Stream is the stream's name; TransactionalID its Kafka
	// transactional.id.
	Stream          string `json:"stream"`
	TransactionalID string `json:"transactional_id"`
	Slot            struct {
		Name             string   `json:"name"`
		Exists           bool     `json:"exists"`
		Plugin           string   `json:"plugin,omitempty"`
		WALStatus        string   `json:"wal_status,omitempty"`
		Active           bool     `json:"active"`
		ActivePID        *int32   `json:"active_pid"`
		ConfirmedFlush   string   `json:"confirmed_flush_lsn,omitempty"`
		CurrentLSN       string   `json:"current_wal_lsn"`
		LagBytes         int64    `json:"lag_bytes"`
		CaughtUp         bool     `json:"caught_up"`
		RetainedWALBytes *int64   `json:"retained_wal_bytes"` // null without restart_lsn
		SafeWALSizeBytes *int64   `json:"safe_wal_size_bytes"`
		FlushLagSeconds  *float64 `json:"flush_lag_seconds"`
		// Holder is the process holding the slot, when one does.
		Holder *HolderReport `json:"holder,omitempty"`
		// Creating is set while the slot is being created: it has no
		// confirmed position yet, and cannot be streamed.
		Creating *CreatingReport `json:"creating,omitempty"`
		// Decoding is the slot's pg_stat_replication_slots row (Postgres
		// 14 and later), and BehindBecause why the slot is behind when
		// the server's decoding explains it.
		Decoding      *DecodingReport `json:"decoding,omitempty"`
		BehindBecause string          `json:"behind_because,omitempty"`
	} `json:"slot"`
	Checkpoint struct {
		Topic      string     `json:"topic"`
		Key        string     `json:"key"`
		Found      bool       `json:"found"`
		Position   string     `json:"position,omitempty"`
		LSN        string     `json:"lsn,omitempty"`
		WrittenAt  *time.Time `json:"written_at,omitempty"`
		AgeSeconds *float64   `json:"age_seconds,omitempty"`
		// SystemID, Timeline and Database are what the checkpoint's LSNs
		// belong to; empty in checkpoints written before they were recorded.
		SystemID string `json:"system_id,omitempty"`
		Timeline int32  `json:"timeline,omitempty"`
		Database string `json:"database,omitempty"`
		// Stream and Slot name the stream that wrote it; Stream is empty
		// in checkpoints written before it was recorded.
		Stream string `json:"stream,omitempty"`
		Slot   string `json:"slot,omitempty"`
		Events *int64 `json:"events,omitempty"`
		// LastTransaction is the last Postgres transaction published, which
		// a replay from the slot must show again; empty in checkpoints
		// written before it was recorded, and after an accepted gap.
		LastTransaction string `json:"last_transaction,omitempty"`
		// Placement is where the checkpoint lies in the server's history:
		// continuous, unidentified, safe_failover, phantoms, off_history,
		// system_changed.
		Placement string          `json:"placement,omitempty"`
		Phantoms  *PhantomsReport `json:"phantoms,omitempty"`
		// Gap is the last discontinuity an operator accepted.
		Gap *GapReport `json:"gap,omitempty"`
		// HeldBy are the transactions holding back the checkpoint topic's
		// last stable offset: read_committed readers of the topic see no
		// checkpoint written after each began.
		HeldBy []HoldReport `json:"held_by,omitempty"`
	} `json:"checkpoint"`
	Server struct {
		Host     string `json:"host"`
		SystemID string `json:"system_id"`
		Timeline int32  `json:"timeline"`
		WALEnd   string `json:"wal_end"`
		Database string `json:"database"`
	} `json:"server"`
	Failover struct {
		Supported    bool     `json:"supported"`
		FailoverSlot bool     `json:"failover_slot"`
		Synced       bool     `json:"synced"`
		StandbySlots []string `json:"synchronized_standby_slots"`
	} `json:"failover"`
	// Topics are the topics checked (checkpoint, dead-letter, and those of
	// the route-by values in the outbox tables) and those missing.
	Topics struct {
		Checked []string `json:"checked"`
		Missing []string `json:"missing"`
	} `json:"topics"`
	// Reemits are the re-emit requests the checkpoint records: those
	// queued or running and the last ones that ended.
	Reemits []ReemitReport `json:"reemits"`
	// SchemaRegistry is the registry keys or values need; absent when
	// none does.
	SchemaRegistry *RegistryReport `json:"schema_registry,omitempty"`
	// Debezium is whether the connector the stream takes over from has
	// stopped; absent unless the stream takes over from one or its status
	// topic is named.
	Debezium *DebeziumReport `json:"debezium,omitempty"`
	// Fleet is the member of the fleet's group the last assignment gives
	// the stream to; absent when its process joins no fleet's group.
	Fleet     *FleetStreamReport `json:"fleet,omitempty"`
	Streaming bool               `json:"streaming"`
	Problems  []string           `json:"problems"`
	Warnings  []string           `json:"warnings"`
	// Error is why part of the report could not be read, e.g. Kafka
	// unreachable; the rest is still reported.
	Error string `json:"error,omitempty"`
}

// DebeziumReport is whether Debezium's connector stopped, read from the
// slot's holder and Kafka Connect's status topic.
type DebeziumReport struct {
	Connector string `json:"connector"`
	// OffsetSource is where a takeover reads the connector's offset;
	// TakesOver whether the stream's next start takes over, and Why.
	OffsetSource string `json:"offset_source,omitempty"`
	TakesOver    bool   `json:"takes_over"`
	Why          string `json:"why,omitempty"`
	// SlotHolder is the slot's holder when it is no instance of the
	// stream: the connector still streaming.
	SlotHolder *HolderReport `json:"slot_holder,omitempty"`
	// StatusTopic is Kafka Connect's status topic, when named; State the
	// connector's state there ("deleted" after a tombstone, empty when
	// the topic holds none), Tasks its tasks', Status all of it as text,
	// and StatusError why it could not be read.
	StatusTopic string            `json:"status_topic,omitempty"`
	State       string            `json:"state,omitempty"`
	Tasks       map[string]string `json:"tasks,omitempty"`
	Status      string            `json:"status,omitempty"`
	StatusError string            `json:"status_error,omitempty"`
	// Stopped: the slot is held by no other process, and the status
	// topic, where named, says the connector stopped or was deleted.
	Stopped bool `json:"stopped"`
}

// HoldReport is a transaction holding back the last stable offset of a
// checkpoint topic partition.
type HoldReport struct {
	Partition       int32   `json:"partition"`
	StableOffset    int64   `json:"stable_offset"`
	EndOffset       int64   `json:"end_offset"`
	Holder          string  `json:"holder"`
	ProducerID      int64   `json:"producer_id"`
	TransactionalID string  `json:"transactional_id,omitempty"`
	OpenSeconds     float64 `json:"open_seconds"`
	TimeoutSeconds  float64 `json:"timeout_seconds,omitempty"`
}

// DecodingReport is what the server did decoding for the slot, since
// StatsReset.
type DecodingReport struct {
	SpilledTransactions  int64      `json:"spill_txns"`
	Spills               int64      `json:"spill_count"`
	SpilledBytes         int64      `json:"spill_bytes"`
	StreamedTransactions int64      `json:"stream_txns"`
	Streams              int64      `json:"stream_count"`
	StreamedBytes        int64      `json:"stream_bytes"`
	DecodedTransactions  int64      `json:"total_txns"`
	DecodedBytes         int64      `json:"total_bytes"`
	StatsReset           *time.Time `json:"stats_reset,omitempty"`
	WorkMem              string     `json:"logical_decoding_work_mem"`
}

// holderReport is what the report says of a slot's holder.
func holderReport(h replication.Backend) *HolderReport {
	r := &HolderReport{PID: h.PID, BackendType: h.Type, Application: h.Application, Client: h.Client, State: h.State, Text: h.String()}
	if !h.Started.IsZero() {
		at := h.Started
		r.ConnectedAt = &at
	}
	return r
}

// HolderReport is the process holding the slot.
type HolderReport struct {
	PID         int32      `json:"pid"`
	BackendType string     `json:"backend_type,omitempty"`
	Application string     `json:"application_name,omitempty"`
	Client      string     `json:"client,omitempty"`
	State       string     `json:"state,omitempty"`
	ConnectedAt *time.Time `json:"connected_at,omitempty"`
	Text        string     `json:"text"`
}

// CreatingReport is a slot being created and what that waits for.
type CreatingReport struct {
	PID        int32           `json:"pid"`
	Since      *time.Time      `json:"since,omitempty"`
	WaitEvent  string          `json:"wait_event,omitempty"`
	WaitingFor []BlockerReport `json:"waiting_for"`
	Text       string          `json:"text"`
}

// BlockerReport is a transaction the creation of the slot waits for.
type BlockerReport struct {
	PID            int32   `json:"pid"` // 0 for a prepared transaction
	Prepared       string  `json:"prepared,omitempty"`
	Xid            uint32  `json:"xid"`
	XidAge         int64   `json:"xid_age"`
	RunningSeconds float64 `json:"running_seconds,omitempty"`
	Application    string  `json:"application_name,omitempty"`
	State          string  `json:"state,omitempty"`
	Client         string  `json:"client,omitempty"`
	Current        bool    `json:"current"`
	Query          string  `json:"query,omitempty"`
}

// RegistryReport is whether the schema registry answers.
type RegistryReport struct {
	URL     string `json:"url"`
	Answers bool   `json:"answers"`
	Error   string `json:"error,omitempty"`
}

// PhantomsReport are events published from WAL the server's history lacks.
type PhantomsReport struct {
	FromLSN string `json:"from_lsn"`
	ToLSN   string `json:"to_lsn"`
	Events  int64  `json:"events"` // -1: unknown
}

// GapReport is the last discontinuity an operator accepted.
type GapReport struct {
	Kind             string    `json:"kind"`
	PreviousSystemID string    `json:"previous_system_id,omitempty"`
	PreviousTimeline int32     `json:"previous_timeline,omitempty"`
	FromLSN          string    `json:"from_lsn"`
	ToLSN            string    `json:"to_lsn"`
	Events           int64     `json:"events"` // -1: unknown
	At               time.Time `json:"at"`
}

// ReemitReport is a re-emit request and where it stands, with the
// figures an operator reads: rows done and remaining (estimated), rate and
// time left.
type ReemitReport struct {
	ID     string   `json:"id"`
	Table  string   `json:"table"`
	Where  string   `json:"where"`
	Origin string   `json:"origin"`
	LSN    string   `json:"lsn"`
	State  string   `json:"state"`
	Key    []string `json:"key,omitempty"`
	// Rows are those published; Remaining the estimate of those left, -1
	// before the first chunk; Estimate the planner's estimate of the
	// matching rows at the start.
	Rows      int64 `json:"rows"`
	Remaining int64 `json:"remaining_estimated"`
	Estimate  int64 `json:"estimate"`
	// RowsPerSecond is the rate from the first chunk to the last, and
	// ETASeconds the time left at it; zero when unknown.
	RowsPerSecond float64    `json:"rows_per_second"`
	ETASeconds    float64    `json:"eta_seconds"`
	LastKey       []string   `json:"last_key,omitempty"`
	UpperKey      []string   `json:"upper_key,omitempty"`
	Accepted      time.Time  `json:"accepted"`
	Started       *time.Time `json:"started,omitempty"`
	Updated       *time.Time `json:"updated,omitempty"`
	Ended         *time.Time `json:"ended,omitempty"`
	Error         string     `json:"error,omitempty"`
}

// ReemitReports are the figures of the requests cp records.
func ReemitReports(cp checkpoint.Checkpoint) []ReemitReport {
	out := []ReemitReport{}
	for _, q := range reemitsOf(cp) {
		r := ReemitReport{ID: q.ID, Table: q.Table, Where: q.Where, Origin: q.Origin, LSN: q.LSN.String(), State: string(q.State), Key: q.Key,
			Rows: q.Rows, Remaining: q.Remaining(), Estimate: q.Estimate, RowsPerSecond: q.Rate(), ETASeconds: q.ETA().Seconds(),
			LastKey: q.Last, UpperKey: q.Upper, Accepted: q.Accepted, Error: q.Error}
		for _, t := range []struct {
			dst **time.Time
			v   time.Time
		}{{&r.Started, q.Started}, {&r.Updated, q.Updated}, {&r.Ended, q.Ended}} {
			if !t.v.IsZero() {
				v := t.v
				*t.dst = &v
			}
		}
		out = append(out, r)
	}
	return out
}

// Report computes what an operator reads from the inspection of cfg's
// stream, the checkpoint's age as of now.
func (in *Inspection) Report(cfg Config, now time.Time) *Report {
	st := in.Slot
	var r Report
	r.Problems, r.Warnings = in.Problems, in.Warnings
	if in.KafkaErr != nil {
		r.Error = in.KafkaErr.Error()
	}
	if in.Registry != "" {
		r.SchemaRegistry = &RegistryReport{URL: in.Registry, Answers: in.RegistryErr == nil}
		if in.RegistryErr != nil {
			r.SchemaRegistry.Error = in.RegistryErr.Error()
		}
	}
	for _, h := range in.Held {
		hr := HoldReport{Partition: h.Partition, StableOffset: h.Stable, EndOffset: h.End, Holder: h.Holder(), ProducerID: h.ProducerID,
			TransactionalID: h.TransactionalID, OpenSeconds: now.Sub(h.Since).Seconds(), TimeoutSeconds: h.Timeout.Seconds()}
		r.Checkpoint.HeldBy = append(r.Checkpoint.HeldBy, hr)
	}
	sv := &r.Server
	sv.Host, sv.SystemID, sv.Timeline, sv.WALEnd, sv.Database = in.Host, in.Server.SystemID, in.Server.Timeline, in.Server.XLogPos.String(), in.Server.Database
	fo := &r.Failover
	fo.Supported, fo.FailoverSlot, fo.Synced, fo.StandbySlots = in.Failover.Supported, in.Failover.Failover, in.Failover.Synced, in.Failover.StandbySlots
	if fo.StandbySlots == nil {
		fo.StandbySlots = []string{}
	}
	s := &r.Slot
	s.Name, s.Exists, s.Plugin, s.WALStatus = cfg.Names.Slot, st.Exists, st.Plugin, st.WALStatus
	s.Active, s.ActivePID, s.CurrentLSN = st.Active, st.ActivePID, st.CurrentLSN.String()
	s.SafeWALSizeBytes = st.SafeWALSize
	if st.Exists && st.HasConfirmed {
		s.ConfirmedFlush = st.ConfirmedFlush.String()
		s.LagBytes, s.CaughtUp = st.ConfirmedLag(), st.CaughtUp()
	}
	if st.Exists {
		if n, ok := st.Retained(); ok {
			s.RetainedWALBytes = &n
		}
	}
	if st.FlushLag != nil {
		sec := st.FlushLag.Seconds()
		s.FlushLagSeconds = &sec
	}
	// A slot being created is held but not streamed: it has no position
	// to stream from until it is consistent.
	r.Streaming = st.Active && st.HasConfirmed && (in.Holder == nil || in.Holder.Type == "" || in.Holder.Type == "walsender")
	if h := in.Holder; h != nil {
		s.Holder = holderReport(*h)
	}
	if d := st.Decoding; d != nil {
		s.Decoding = &DecodingReport{SpilledTransactions: d.SpillTxns, Spills: d.SpillCount, SpilledBytes: d.SpillBytes,
			StreamedTransactions: d.StreamTxns, Streams: d.StreamCount, StreamedBytes: d.StreamBytes,
			DecodedTransactions: d.TotalTxns, DecodedBytes: d.TotalBytes, WorkMem: d.WorkMem}
		if !d.StatsReset.IsZero() {
			at := d.StatsReset
			s.Decoding.StatsReset = &at
		}
	}
	s.BehindBecause = in.Behind
	if w := in.Creating; w != nil {
		c := &CreatingReport{PID: w.PID, WaitEvent: w.WaitEvent, WaitingFor: []BlockerReport{}, Text: w.String()}
		if !w.Since.IsZero() {
			at := w.Since
			c.Since = &at
		}
		for _, b := range w.Blockers {
			c.WaitingFor = append(c.WaitingFor, BlockerReport{PID: b.PID, Prepared: b.Prepared, Xid: b.Xid, XidAge: b.XidAge,
				RunningSeconds: b.Running.Seconds(), Application: b.Application, State: b.State, Client: b.Client, Current: b.Current, Query: b.Query})
		}
		s.Creating = c
	}

	c := &r.Checkpoint
	r.Reemits = ReemitReports(in.Checkpoint)
	r.Stream, r.TransactionalID = cfg.Stream, cmp.Or(in.TransactionalID, cfg.TransactionalID)
	r.Topics.Checked, r.Topics.Missing = append([]string{}, in.Topics...), append([]string{}, in.MissingTopics...)
	c.Topic, c.Key = cfg.CheckpointTopic, cmp.Or(in.CheckpointKey, cfg.CheckpointKey)
	if c.Found = in.Found; in.Found {
		at := in.WrittenAt
		c.Position, c.LSN, c.WrittenAt = in.Checkpoint.String(), in.Checkpoint.LSN.String(), &at
		age := now.Sub(at).Seconds()
		c.AgeSeconds = &age
		cp := in.Checkpoint
		c.SystemID, c.Timeline, c.Database = cp.Identity.SystemID, cp.Identity.Timeline, cp.Identity.Database
		c.Stream, c.Slot = cp.Owner.Stream, cp.Owner.Slot
		if cp.Counted {
			n := int64(cp.Events)
			c.Events = &n
		}
		if cp.Last.Known() {
			c.LastTransaction = cp.Last.String()
		}
		if in.Server.SystemID != "" { // else the server could not be identified (a warning says why)
			c.Placement = in.Placement.Verdict.String()
		}
		if in.Placement.Verdict == Phantoms {
			c.Phantoms = &PhantomsReport{FromLSN: in.Placement.Fork.String(), ToLSN: max(cp.LSN, cp.PartialCommitLSN).String(), Events: in.PhantomEvents}
		}
		if g := cp.Gap; g.Kind != checkpoint.GapNone {
			c.Gap = &GapReport{Kind: string(g.Kind), PreviousSystemID: g.Previous.SystemID, PreviousTimeline: g.Previous.Timeline,
				FromLSN: g.From.String(), ToLSN: g.To.String(), Events: g.Events, At: g.At}
		}
	}
	if d := in.Debezium; d != nil {
		r.Debezium = debeziumReport(d, cfg.Takeover)
	}
	return &r
}

func debeziumReport(d *DebeziumStop, t Takeover) *DebeziumReport {
	dr := &DebeziumReport{Connector: t.Selector.Connector, TakesOver: d.Pending != "", Why: d.Pending, StatusTopic: t.StatusTopic, Stopped: d.Stopped()}
	if t.Enabled() {
		dr.OffsetSource = t.Source.String()
	}
	if h := d.Other; h != nil {
		dr.SlotHolder = holderReport(*h)
	}
	if d.StatusErr != nil {
		dr.StatusError = d.StatusErr.Error()
	}
	if st := d.Status; st != nil && d.StatusErr == nil {
		dr.Status = st.String()
		switch {
		case st.Deleted:
			dr.State = "deleted"
		case st.Found:
			dr.State = st.Connector.State
		}
		for n, ts := range st.Tasks {
			if dr.Tasks == nil {
				dr.Tasks = make(map[string]string)
			}
			dr.Tasks[strconv.Itoa(n)] = ts.State
		}
	}
	return dr
}

// FleetReport is a fleet's group as `walstream status` prints it: the
// coordinator's state, and each member with the streams the last
// assignment gives it.
type FleetReport struct {
	Group      string              `json:"group"`
	State      string              `json:"state"`
	Generation int32               `json:"generation"`
	Leader     string              `json:"leader,omitempty"`
	Members    []FleetMemberReport `json:"members"`
}

// FleetMemberReport is one member of a fleet's group: its member id, the
// client id and host the coordinator sees, the host it says it runs on,
// and its streams.
type FleetMemberReport struct {
	MemberID   string   `json:"member_id"`
	ClientID   string   `json:"client_id"`
	ClientHost string   `json:"client_host"`
	Host       string   `json:"host"`
	Streams    []string `json:"streams"`
}

// FleetStreamReport is a stream's fleet, and the member that runs the
// stream.
type FleetStreamReport struct {
	FleetReport
	MemberID string `json:"member_id,omitempty"`
	Host     string `json:"host,omitempty"`
}

// AddFleet notes in r its fleet and which member runs its stream, and
// warns when none does: no process of the fleet runs, or none has the
// stream in its config. While the group rebalances, Kafka describes its
// members without their assignments (or hosts), and the warning says so
// instead: the processes go on with their streams meanwhile.
func (r *Report) AddFleet(f *FleetReport) {
	r.Fleet = &FleetStreamReport{FleetReport: *f}
	for _, m := range f.Members {
		if slices.Contains(m.Streams, r.Stream) {
			r.Fleet.MemberID, r.Fleet.Host = m.MemberID, m.Host
			return
		}
	}
	if len(f.Members) > 0 && (f.State == "PreparingRebalance" || f.State == "CompletingRebalance") {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the fleet's group %s is rebalancing (%s, %d members): Kafka does not say which member runs stream %s until it is Stable; "+
			"the processes go on with their streams meanwhile: run walstream status again", f.Group, f.State, len(f.Members), r.Stream))
		return
	}
	r.Warnings = append(r.Warnings, fmt.Sprintf("no member of the fleet's group %s (%s, %d members) runs stream %s: no process of the fleet runs, or none has the stream in its config",
		f.Group, f.State, len(f.Members), r.Stream))
}
