package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

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
	} `json:"checkpoint"`
	Streaming bool     `json:"streaming"`
	Problems  []string `json:"problems"`
	// Error is why part of the report could not be read, e.g. Kafka
	// unreachable; the rest is still reported.
	Error string `json:"error,omitempty"`
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
	r.Problems = in.Problems
	if in.KafkaErr != nil {
		r.Error = in.KafkaErr.Error()
	}
	s := &r.Slot
	s.Name, s.Exists, s.Plugin, s.WALStatus = cfg.Slot, st.Exists, st.Plugin, st.WALStatus
	s.Active, s.ActivePID, s.CurrentLSN = st.Active, st.ActivePID, st.CurrentLSN.String()
	s.SafeWALSizeBytes = st.SafeWALSize
	if st.Exists {
		s.ConfirmedFlush = st.ConfirmedFlush.String()
		s.LagBytes = st.ConfirmedLag()
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
	}
	return &r, nil
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
	fmt.Fprintf(tw, "checkpoint\t%s key %s\n", c.Topic, c.Key)
	if r.Error != "" {
		fmt.Fprintf(tw, "  position\tunknown\n")
	} else if c.Found {
		fmt.Fprintf(tw, "  position\t%s\n  written\t%s (%.1f s ago)\n", c.Position, c.WrittenAt.Format(time.RFC3339), *c.AgeSeconds)
	} else {
		fmt.Fprintf(tw, "  position\tnone yet\n")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "PROBLEM\t%s\n", p)
	}
	tw.Flush()
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
