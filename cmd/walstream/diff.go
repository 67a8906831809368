package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/diff"
	"github.com/walstream/walstream/publish/format"
)

// ErrDifferent is what `walstream diff` exits non-zero with.
var ErrDifferent = errors.New("the topics differ")

// runDiff compares Debezium's topics with walstream's shadow topics event
// by event; it exits non-zero when an event's records differ.
func runDiff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var topics, prefix, since, ignore string
	var timestamps bool
	var examples int
	cfg, err := config.Parse(config.Command{Name: "diff",
		About: "Compares Debezium's topics with walstream's in a shadow run, event by event (by the id header): partition, key, value and headers of each event's first record. " +
			"Exits non-zero when an event's records differ; events only one side has are counted with the times they span (see docs/debezium.md, Shadow mode).",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&topics, "topics", "outbox.event.*", "Debezium's topics: a shell pattern or comma-separated names")
			fs.StringVar(&prefix, "shadow-prefix", "shadow.", "walstream's topic of each is this prefix and its name")
			fs.StringVar(&since, "since", "", "compare the records timestamped from then on: an RFC 3339 time, or a duration before now (1h)")
			fs.StringVar(&ignore, "ignore-header", format.HeaderRunID, "headers left out of the comparison, comma-separated")
			fs.BoolVar(&timestamps, "timestamps", false, "compare record timestamps too (equal only when table.field.event.timestamp sets them)")
			fs.IntVar(&examples, "examples", 10, "differing and one-sided events named per topic")
		},
		Uses:  config.DiffSettings,
		Needs: func() (pg, kafka bool) { return false, true },
	}, args, stdout)
	if err != nil {
		return err
	}
	c := diff.Compare{Kafka: cfg.Kafka, Timestamps: timestamps, Examples: examples}
	for _, h := range strings.Split(ignore, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.IgnoreHeaders = append(c.IgnoreHeaders, h)
		}
	}
	if c.Since, err = parseSince(since, time.Now()); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if strings.ContainsAny(topics, "*?[") {
		if c.Pairs, err = diff.Pairs(ctx, cfg.Kafka, topics, prefix); err != nil {
			return err
		}
	} else {
		for _, t := range strings.Split(topics, ",") {
			if t = strings.TrimSpace(t); t != "" {
				c.Pairs = append(c.Pairs, diff.TopicPair{Left: t, Right: prefix + t})
			}
		}
	}
	if len(c.Pairs) == 0 {
		return errors.New("--topics names no topic")
	}
	result, err := c.Run(ctx)
	if err != nil {
		return err
	}
	printDiff(stdout, result)
	if n := result.Differences(); n > 0 {
		return fmt.Errorf("%w: %d events have records that differ", ErrDifferent, n)
	}
	return nil
}

// parseSince reads --since: a time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return t, nil
}

func printDiff(w io.Writer, r *diff.Comparison) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Debezium's topic\twalstream's topic\trecords\tevents equal\tdiffer\tonly Debezium's\tonly walstream's\tduplicates")
	for _, p := range r.Pairs {
		fmt.Fprintf(tw, "%s\t%s\t%d / %d\t%d\t%d\t%d\t%d\t%d / %d\n", p.Left, p.Right, p.LeftRecords, p.RightRecords, p.Equal, p.Different,
			p.OnlyLeft.Events, p.OnlyRight.Events, p.LeftDuplicates, p.RightDuplicates)
	}
	tw.Flush()
	for _, p := range r.Pairs {
		for _, d := range p.Differences {
			fmt.Fprintf(w, "%s: event %s differs in %s: Debezium's at partition %d offset %d, walstream's at partition %d offset %d\n",
				p.Left, d.Event, strings.Join(d.Fields, ", "), d.Left.Partition, d.Left.Offset, d.Right.Partition, d.Right.Offset)
		}
		for _, side := range []struct {
			name string
			o    diff.OneSided
		}{{"Debezium", p.OnlyLeft}, {"walstream", p.OnlyRight}} {
			if side.o.Events > 0 {
				fmt.Fprintf(w, "%s: %d events only %s published, timestamped %s to %s, e.g. %s\n", p.Left, side.o.Events, side.name,
					side.o.First.UTC().Format(time.RFC3339Nano), side.o.Last.UTC().Format(time.RFC3339Nano), strings.Join(side.o.Examples, ", "))
			}
		}
	}
}
