package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/pipeline"
)

// ErrUnhealthy is what `walstream status` exits non-zero with.
var ErrUnhealthy = errors.New("unhealthy")

// statusReport is `walstream status --json`.
type statusReport = pipeline.Report

// runStatus prints the slot's state and the checkpoint in Kafka of each
// stream, and fails when a slot is lost or ahead of its checkpoint.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	var statusTopic string
	var abort, commit string
	cfgs, err := config.ParseStreams(config.Command{Name: "status",
		About: "Prints the slot's state and the checkpoint in Kafka of the stream, or of every stream a config file lists under streams: (--stream names one); " +
			"exits non-zero when a slot is lost, missing or ahead of the checkpoint, or Kafka cannot be read, " +
			"and, with --from-debezium-offset or --connect-status-topic, while Debezium's connector has not stopped (see docs/debezium.md, Checking that the connector stopped).",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print JSON: the stream's report, or a list of every stream's")
			fs.StringVar(&statusTopic, "connect-status-topic", "", "Kafka Connect's status topic (status.storage.topic), read from --kafka-brokers: "+
				"report the state of the Debezium connector --debezium-connector names, and exit non-zero unless it stopped or was deleted and no other process holds the slot")
			fs.StringVar(&abort, "abort-hanging", "", "first abort the transaction hanging on the checkpoint topic that starts at PARTITION:OFFSET, "+
				"as kafka-transactions.sh abort does (needs the ClusterAction ACL; see docs/kafka.md, A transaction holding the checkpoint topic)")
			fs.StringVar(&commit, "commit-hanging", "", "first commit the transaction hanging on the checkpoint topic that starts at PARTITION:OFFSET: "+
				"only for a checkpoint record walstream stopped at whose transaction's events are in Kafka (see docs/kafka.md, A transaction holding the checkpoint topic)")
		},
		Uses:  config.StatusSettings,
		Needs: func() (pg, kafka bool) { return true, true },
	}, args, stdout)
	if err != nil {
		return err
	}
	if abort != "" || commit != "" {
		if err := endHanging(ctx, cfgs, abort, commit, stderr); err != nil {
			return err
		}
	}
	reports := make([]*statusReport, len(cfgs))
	for i, cfg := range cfgs {
		if statusTopic != "" && cfg.Takeover.Selector.Connector == "" {
			return fmt.Errorf("--connect-status-topic: the connector's name is needed: --debezium-connector, or the name of the connector config --config names")
		}
		cfg.Takeover.StatusTopic = statusTopic
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		in, err := pipeline.Inspect(ictx, cfg.Config)
		cancel()
		if err != nil {
			if len(cfgs) > 1 {
				err = fmt.Errorf("stream %s: %w", cfg.Stream, err)
			}
			return err
		}
		reports[i] = in.Report(cfg.Config, time.Now())
	}
	var fleet *pipeline.FleetReport
	if first := cfgs[0]; first.Fleet.Group != "" {
		fleet, err = pipeline.InspectFleet(ctx, first.Config)
		for _, r := range reports {
			if err != nil {
				r.Warnings = append(r.Warnings, fmt.Sprintf("describing the fleet's group %s: %v", first.Fleet.Group, err))
			} else {
				r.AddFleet(fleet)
			}
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		var v any = reports
		if len(reports) == 1 {
			v = reports[0] // the shape of a single stream's status stays an object
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	} else {
		if fleet != nil {
			printFleet(stdout, fleet)
			fmt.Fprintln(stdout)
		}
		for i, r := range reports {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			printStatus(stdout, r)
		}
	}
	var problems []error
	for _, r := range reports {
		if len(r.Problems) == 0 {
			continue
		}
		if len(reports) == 1 {
			return fmt.Errorf("%w: %s", ErrUnhealthy, r.Problems[0])
		}
		problems = append(problems, fmt.Errorf("%w: stream %s: %s", ErrUnhealthy, r.Stream, r.Problems[0]))
	}
	return errors.Join(problems...)
}

// endHanging ends the hanging transaction at PARTITION:OFFSET of the
// checkpoint topic that abort or commit names, and says so on w, apart
// from the status that follows.
func endHanging(ctx context.Context, cfgs []*config.Config, abort, commit string, w io.Writer) error {
	if abort != "" && commit != "" {
		return errors.New("--abort-hanging and --commit-hanging: give one")
	}
	if len(cfgs) > 1 {
		return errors.New("--abort-hanging and --commit-hanging end a transaction on one checkpoint topic: name the stream with --stream")
	}
	flagName, at, verb := "--abort-hanging", abort, "aborted"
	if commit != "" {
		flagName, at, verb = "--commit-hanging", commit, "committed"
	}
	part, off, ok := strings.Cut(at, ":")
	p, perr := strconv.ParseInt(part, 10, 32)
	o, oerr := strconv.ParseInt(off, 10, 64)
	if !ok || perr != nil || oerr != nil || p < 0 || o < 0 {
		return fmt.Errorf("%s %q: want PARTITION:OFFSET, the partition of the checkpoint topic and the offset its transaction starts at (walstream status names them)", flagName, at)
	}
	cfg := cfgs[0].Config
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := kafka.EndHanging(ectx, cfg.Kafka, cfg.CheckpointTopic, int32(p), o, commit != "")
	if err != nil {
		return fmt.Errorf("%s %s: %w", flagName, at, err)
	}
	fmt.Fprintf(w, "%s the transaction of %s starting at offset %d of %s-%d\n", verb, h.Holder(), o, cfg.CheckpointTopic, p)
	return nil
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
	defer tw.Flush()
	line := func(name, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", name, fmt.Sprintf(format, a...)) }
	s, c, sv, fo := r.Slot, r.Checkpoint, r.Server, r.Failover
	line("stream", "%s (transactional id %s)", r.Stream, r.TransactionalID)
	switch f := r.Fleet; {
	case f == nil:
	case f.MemberID == "":
		line("  run by", "no member of the fleet")
	default:
		line("  run by", "member %s on %s", f.MemberID, f.Host)
	}
	line("slot", "%s", s.Name)
	if s.Exists {
		active := "no"
		switch {
		case s.Creating != nil:
			active = "no, " + s.Creating.Text
		case s.Holder != nil && s.Holder.BackendType == "walsender":
			active = "yes, walsender " + s.Holder.Text
		case s.Holder != nil:
			active = "no, held by " + s.Holder.Text
		case s.ActivePID != nil:
			active = fmt.Sprintf("yes, walsender pid %d", *s.ActivePID)
		}
		retained := "none (restart_lsn is NULL)"
		if s.RetainedWALBytes != nil {
			retained = pipeline.HumanBytes(*s.RetainedWALBytes)
		}
		line("  plugin", "%s", s.Plugin)
		line("  wal_status", "%s", s.WALStatus)
		line("  streaming", "%s", active)
		if s.ConfirmedFlush == "" {
			line("  confirmed_flush_lsn", "none yet: the slot is not consistent until it is created (server at %s)", s.CurrentLSN)
		} else {
			line("  confirmed_flush_lsn", "%s (server at %s)", s.ConfirmedFlush, s.CurrentLSN)
			line("  lag", "%s", pipeline.HumanBytes(s.LagBytes))
			line("  caught up", "%s", caughtUpText(s.CaughtUp, s.LagBytes, s.FlushLagSeconds))
			if s.BehindBecause != "" {
				line("  behind because", "%s", s.BehindBecause)
			}
		}
		line("  retained WAL", "%s", retained)
		if s.SafeWALSizeBytes != nil {
			line("  safe_wal_size", "%s", pipeline.HumanBytes(*s.SafeWALSizeBytes))
		}
		if s.FlushLagSeconds != nil {
			line("  lag in seconds", "%.3f s (pg_stat_replication.flush_lag)", *s.FlushLagSeconds)
		}
		if d := s.Decoding; d != nil {
			line("  decoding", "spilled %s of %d transactions to disk, streamed %s of %d in progress, decoded %s of %d (logical_decoding_work_mem %s%s)",
				pipeline.HumanBytes(d.SpilledBytes), d.SpilledTransactions, pipeline.HumanBytes(d.StreamedBytes), d.StreamedTransactions,
				pipeline.HumanBytes(d.DecodedBytes), d.DecodedTransactions, d.WorkMem, resetText(d.StatsReset))
		}
	} else {
		line("  exists", "no")
	}
	line("server", "%s", sv.Host)
	if sv.SystemID != "" {
		line("  system", "%s timeline %d database %s", sv.SystemID, sv.Timeline, sv.Database)
		line("  WAL end", "%s", sv.WALEnd)
	}
	switch {
	case !fo.Supported:
		line("  failover slots", "not supported (before Postgres 17): the slot does not survive a promotion")
	case s.Exists:
		line("  failover slot", "%v (synced copy: %v), synchronized_standby_slots %q", fo.FailoverSlot, fo.Synced, strings.Join(fo.StandbySlots, ","))
	}
	line("checkpoint", "%s key %s", c.Topic, c.Key)
	switch {
	case r.Error != "":
		line("  position", "unknown")
	case !c.Found:
		line("  position", "none yet")
	default:
		line("  position", "%s", c.Position)
		line("  written", "%s (%.1f s ago)", c.WrittenAt.Format(time.RFC3339), *c.AgeSeconds)
		if c.SystemID != "" {
			line("  on", "system %s timeline %d database %s", c.SystemID, c.Timeline, c.Database)
		}
		if c.Events != nil {
			line("  events published", "%d", *c.Events)
		}
		if c.LastTransaction != "" {
			line("  last published", "%s", c.LastTransaction)
		}
		if c.Placement != "" {
			line("  placement", "%s", c.Placement)
		}
		if p := c.Phantoms; p != nil {
			line("  phantom events", "%s between %s and %s", count(p.Events), p.FromLSN, p.ToLSN)
		}
		if g := c.Gap; g != nil {
			line("  accepted gap", "%s at %s: %s to %s of system %s timeline %d, %s events",
				g.Kind, g.At.Format(time.RFC3339), g.FromLSN, g.ToLSN, g.PreviousSystemID, g.PreviousTimeline, count(g.Events))
		}
	}
	printReemits(tw, r.Reemits)
	if r.Debezium != nil {
		printDebezium(line, r)
	}
	if sr := r.SchemaRegistry; sr != nil {
		answers := "yes"
		if !sr.Answers {
			answers = "no"
		}
		line("schema registry", "%s (answers: %s)", sr.URL, answers)
	}
	if t := r.Topics; len(t.Checked) > 0 {
		line("topics", "%d checked (checkpoint, dead-letter, and those of the route-by values in the outbox)", len(t.Checked))
		if len(t.Missing) > 0 {
			line("  missing", "%s (create them, or let walstream create them with --topic-creation; see docs/kafka.md, Outbox and dead-letter topics)", strings.Join(t.Missing, ", "))
		}
	}
	for _, w := range r.Warnings {
		line("WARN", "%s", w)
	}
	for _, h := range r.Checkpoint.HeldBy {
		line("  to abort", "walstream status --abort-hanging %d:%d (a transaction of a process that is gone; one that goes on is aborted by Kafka at its timeout)",
			h.Partition, h.StableOffset)
	}
	for _, p := range r.Problems {
		line("PROBLEM", "%s", p)
	}
}

// printDebezium says whether Debezium's connector stopped.
func printDebezium(line func(name, format string, a ...any), r *statusReport) {
	d := r.Debezium
	line("debezium", "connector %s", cmp.Or(d.Connector, "(any name)"))
	if d.OffsetSource != "" {
		line("  offset", "%s", d.OffsetSource)
		takes := "no: Kafka holds this stream's checkpoint, and Debezium's offset is not past it"
		switch {
		case d.TakesOver:
			takes = "yes: " + d.Why
		case r.Error != "":
			takes = "unknown: the checkpoint could not be read"
		}
		line("  takes over", "%s", takes)
	}
	holder := "no other process: stopped, or streamed by walstream"
	if d.SlotHolder != nil {
		holder = "held by " + d.SlotHolder.Text + ", no instance of this stream"
	}
	line("  slot holder", "%s", holder)
	switch {
	case d.StatusError != "":
		line("  status topic", "%s: %s", d.StatusTopic, d.StatusError)
	case d.StatusTopic != "":
		line("  status topic", "%s: %s", d.StatusTopic, d.Status)
	}
	stopped := "no"
	if d.Stopped {
		stopped = "yes"
	}
	line("  stopped", "%s", stopped)
}

// caughtUpText says whether the slot has confirmed everything the server
// wrote and, if not, how far behind it is: the walstream_caught_up metric,
// walstream_slot_confirmed_lag_bytes and pg_stat_replication.flush_lag.
func caughtUpText(caughtUp bool, lag int64, lagSeconds *float64) string {
	if caughtUp {
		return "yes"
	}
	if lagSeconds == nil {
		return fmt.Sprintf("no, %s behind", pipeline.HumanBytes(lag))
	}
	return fmt.Sprintf("no, %s and %.3f s behind", pipeline.HumanBytes(lag), *lagSeconds)
}

// resetText says since when pg_stat_replication_slots counts.
func resetText(at *time.Time) string {
	if at == nil {
		return ""
	}
	return "; since " + at.UTC().Format(time.RFC3339)
}

// printFleet lists the members of the fleet's group and the streams each
// runs.
func printFleet(w io.Writer, f *pipeline.FleetReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "fleet\tgroup %s: %s, generation %d, %d members\n", f.Group, f.State, f.Generation, len(f.Members))
	for _, m := range f.Members {
		leader := ""
		if m.MemberID == f.Leader {
			leader = ", the leader"
		}
		streams := "none"
		if len(m.Streams) > 0 {
			streams = strings.Join(m.Streams, ", ")
		}
		fmt.Fprintf(tw, "  member %s\ton %s (client %s at %s%s): %d streams: %s\n", m.MemberID, m.Host, m.ClientID, m.ClientHost, leader, len(m.Streams), streams)
	}
}
