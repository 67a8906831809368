package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/pipeline"
)

// ErrUnhealthy is what `walstream status` exits non-zero with.
var ErrUnhealthy = errors.New("unhealthy")

// statusReport is `walstream status --json`.
type statusReport struct {
	Slot struct {
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
		Events   *int64 `json:"events,omitempty"`
		// Placement is where the checkpoint lies in the server's history:
		// continuous, unidentified, safe_failover, phantoms, off_history,
		// system_changed.
		Placement string    `json:"placement,omitempty"`
		Phantoms  *phantoms `json:"phantoms,omitempty"`
		// Gap is the last discontinuity an operator accepted.
		Gap *gapReport `json:"gap,omitempty"`
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
	Streaming bool     `json:"streaming"`
	Problems  []string `json:"problems"`
	Warnings  []string `json:"warnings"`
	// Error is why part of the report could not be read, e.g. Kafka
	// unreachable; the rest is still reported.
	Error string `json:"error,omitempty"`
}

// phantoms are events published from WAL the server's history lacks.
type phantoms struct {
	FromLSN string `json:"from_lsn"`
	ToLSN   string `json:"to_lsn"`
	Events  int64  `json:"events"` // -1: unknown
}

type gapReport struct {
	Kind             string    `json:"kind"`
	PreviousSystemID string    `json:"previous_system_id,omitempty"`
	PreviousTimeline int32     `json:"previous_timeline,omitempty"`
	FromLSN          string    `json:"from_lsn"`
	ToLSN            string    `json:"to_lsn"`
	Events           int64     `json:"events"` // -1: unknown
	At               time.Time `json:"at"`
}

// runStatus prints the slot's state and the checkpoint in Kafka, and
// fails when the slot is lost or ahead of the checkpoint.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	cfg, err := parseCommand(command{name: "status",
		about: "Prints the slot's state and the checkpoint in Kafka; exits non-zero when the slot is lost, missing or ahead of the checkpoint, or Kafka cannot be read.",
		extra: func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "print JSON") },
		uses:  statusSettings,
		needs: func() (pg, kafka bool) { return true, true },
	}, args, stdout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := collectStatus(ctx, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		printStatus(stdout, r)
	}
	if len(r.Problems) > 0 {
		return fmt.Errorf("%w: %s", ErrUnhealthy, r.Problems[0])
	}
	return nil
}

func collectStatus(ctx context.Context, cfg *Config) (*statusReport, error) {
	pcfg, err := cfg.pipeline()
	if err != nil {
		return nil, err
	}
	in, err := pipeline.Inspect(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	st := in.Slot
	var r statusReport
	r.Problems, r.Warnings = in.Problems, in.Warnings
	if in.KafkaErr != nil {
		r.Error = in.KafkaErr.Error()
	}
	sv := &r.Server
	sv.Host, sv.SystemID, sv.Timeline, sv.WALEnd, sv.Database = in.Host, in.Server.SystemID, in.Server.Timeline, in.Server.XLogPos.String(), in.Server.Database
	fo := &r.Failover
	fo.Supported, fo.FailoverSlot, fo.Synced, fo.StandbySlots = in.Failover.Supported, in.Failover.Failover, in.Failover.Synced, in.Failover.StandbySlots
	if fo.StandbySlots == nil {
		fo.StandbySlots = []string{}
	}
	s := &r.Slot
	s.Name, s.Exists, s.Plugin, s.WALStatus = cfg.Slot, st.Exists, st.Plugin, st.WALStatus
	s.Active, s.ActivePID, s.CurrentLSN = st.Active, st.ActivePID, st.CurrentLSN.String()
	s.SafeWALSizeBytes = st.SafeWALSize
	if st.Exists {
		s.ConfirmedFlush = st.ConfirmedFlush.String()
		s.LagBytes, s.CaughtUp = st.ConfirmedLag(), st.CaughtUp()
		if n, ok := st.Retained(); ok {
			s.RetainedWALBytes = &n
		}
	}
	if st.FlushLag != nil {
		sec := st.FlushLag.Seconds()
		s.FlushLagSeconds = &sec
	}
	r.Streaming = st.Active

	c := &r.Checkpoint
	c.Topic, c.Key = cfg.CheckpointTopic, cfg.CheckpointKey
	if c.Found = in.Found; in.Found {
		at := in.WrittenAt
		c.Position, c.LSN, c.WrittenAt = in.Checkpoint.String(), in.Checkpoint.LSN.String(), &at
		age := time.Since(at).Seconds()
		c.AgeSeconds = &age
		cp := in.Checkpoint
		c.SystemID, c.Timeline, c.Database = cp.Identity.SystemID, cp.Identity.Timeline, cp.Identity.Database
		if cp.Counted {
			n := int64(cp.Events)
			c.Events = &n
		}
		if in.Server.SystemID != "" { // else the server could not be identified (a warning says why)
			c.Placement = in.Placement.Verdict.String()
		}
		if in.Placement.Verdict == pipeline.Phantoms {
			c.Phantoms = &phantoms{FromLSN: in.Placement.Fork.String(), ToLSN: max(cp.LSN, cp.PartialCommitLSN).String(), Events: in.PhantomEvents}
		}
		if g := cp.Gap; g.Kind != checkpoint.GapNone {
			c.Gap = &gapReport{Kind: string(g.Kind), PreviousSystemID: g.Previous.SystemID, PreviousTimeline: g.Previous.Timeline,
				FromLSN: g.From.String(), ToLSN: g.To.String(), Events: g.Events, At: g.At}
		}
	}
	return &r, nil
}

// count is an event count for people: "unknown" for -1.
func count(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return fmt.Sprint(n)
}

func printStatus(w io.Writer, r *statusReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	s, c := r.Slot, r.Checkpoint
	fmt.Fprintf(tw, "slot\t%s\n", s.Name)
	if s.Exists {
		fmt.Fprintf(tw, "  plugin\t%s\n  wal_status\t%s\n", s.Plugin, s.WALStatus)
		active := "no"
		if s.ActivePID != nil {
			active = fmt.Sprintf("yes, walsender pid %d", *s.ActivePID)
		}
		fmt.Fprintf(tw, "  streaming\t%s\n", active)
		fmt.Fprintf(tw, "  confirmed_flush_lsn\t%s (server at %s)\n", s.ConfirmedFlush, s.CurrentLSN)
		fmt.Fprintf(tw, "  lag\t%s\n", bytesText(s.LagBytes))
		fmt.Fprintf(tw, "  caught up\t%s\n", caughtUpText(s.CaughtUp, s.LagBytes, s.FlushLagSeconds))
		if s.RetainedWALBytes != nil {
			fmt.Fprintf(tw, "  retained WAL\t%s\n", bytesText(*s.RetainedWALBytes))
		} else {
			fmt.Fprintf(tw, "  retained WAL\tnone (restart_lsn is NULL)\n")
		}
		if s.SafeWALSizeBytes != nil {
			fmt.Fprintf(tw, "  safe_wal_size\t%s\n", bytesText(*s.SafeWALSizeBytes))
		}
		if s.FlushLagSeconds != nil {
			fmt.Fprintf(tw, "  lag in seconds\t%.3f s (pg_stat_replication.flush_lag)\n", *s.FlushLagSeconds)
		}
	} else {
		fmt.Fprintf(tw, "  exists\tno\n")
	}
	sv, fo := r.Server, r.Failover
	fmt.Fprintf(tw, "server\t%s\n", sv.Host)
	if sv.SystemID != "" {
		fmt.Fprintf(tw, "  system\t%s timeline %d database %s\n  WAL end\t%s\n", sv.SystemID, sv.Timeline, sv.Database, sv.WALEnd)
	}
	switch {
	case !fo.Supported:
		fmt.Fprintf(tw, "  failover slots\tnot supported (before Postgres 17): the slot does not survive a promotion\n")
	case s.Exists:
		fmt.Fprintf(tw, "  failover slot\t%v (synced copy: %v), synchronized_standby_slots %q\n", fo.FailoverSlot, fo.Synced, strings.Join(fo.StandbySlots, ","))
	}
	fmt.Fprintf(tw, "checkpoint\t%s key %s\n", c.Topic, c.Key)
	if r.Error != "" {
		fmt.Fprintf(tw, "  position\tunknown\n")
	} else if c.Found {
		fmt.Fprintf(tw, "  position\t%s\n  written\t%s (%.1f s ago)\n", c.Position, c.WrittenAt.Format(time.RFC3339), *c.AgeSeconds)
		if c.SystemID != "" {
			fmt.Fprintf(tw, "  on\tsystem %s timeline %d database %s\n", c.SystemID, c.Timeline, c.Database)
		}
		if c.Events != nil {
			fmt.Fprintf(tw, "  events published\t%d\n", *c.Events)
		}
		if c.Placement != "" {
			fmt.Fprintf(tw, "  placement\t%s\n", c.Placement)
		}
		if p := c.Phantoms; p != nil {
			fmt.Fprintf(tw, "  phantom events\t%s between %s and %s\n", count(p.Events), p.FromLSN, p.ToLSN)
		}
		if g := c.Gap; g != nil {
			fmt.Fprintf(tw, "  accepted gap\t%s at %s: %s to %s of system %s timeline %d, %s events\n",
				g.Kind, g.At.Format(time.RFC3339), g.FromLSN, g.ToLSN, g.PreviousSystemID, g.PreviousTimeline, count(g.Events))
		}
	} else {
		fmt.Fprintf(tw, "  position\tnone yet\n")
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(tw, "WARN\t%s\n", w)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "PROBLEM\t%s\n", p)
	}
	tw.Flush()
}

// caughtUpText says whether the slot has confirmed everything the server
// wrote and, if not, how far behind it is: the walstream_caught_up metric,
// walstream_slot_confirmed_lag_bytes and pg_stat_replication.flush_lag.
func caughtUpText(caughtUp bool, lag int64, lagSeconds *float64) string {
	if caughtUp {
		return "yes"
	}
	if lagSeconds == nil {
		return fmt.Sprintf("no, %s behind", bytesText(lag))
	}
	return fmt.Sprintf("no, %s and %.3f s behind", bytesText(lag), *lagSeconds)
}

func bytesText(n int64) string {
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
