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

	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/pipeline"
)

// reemitFlags are `walstream reemit`'s own flags.
type reemitFlags struct {
	where, ids, fromKey, toKey, cancel string
	list, json, dryRun                 bool
}

func (f *reemitFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.where, "where", "", "SQL predicate the rows must satisfy, one expression over the table's columns, e.g. \"aggregatetype = 'Order' and created_at >= now() - interval '7 days'\"")
	fs.StringVar(&f.ids, "ids", "", "comma-separated event ids (the event id column's values) of the rows to publish again")
	fs.StringVar(&f.fromKey, "from-key", "", "first primary key of the rows to publish again, inclusive; a composite key's values comma-separated in key order")
	fs.StringVar(&f.toKey, "to-key", "", "last primary key of the rows to publish again, inclusive; a composite key's values comma-separated in key order")
	fs.BoolVar(&f.dryRun, "dry-run", false, "check the request and print the predicate and the estimate of its rows, without making it")
	fs.BoolVar(&f.list, "list", false, "list the re-emit requests the stream's checkpoint records: queued, running, and the last ones that ended")
	fs.StringVar(&f.cancel, "cancel", "", "cancel the re-emit request with this id")
	fs.BoolVar(&f.json, "json", false, "with --list, print JSON")
}

// runReemit requests a re-emit, lists the requests or cancels one.
func runReemit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f reemitFlags
	cfg, err := config.Parse(config.Command{Name: "reemit",
		About: "Publishes an outbox table's rows again, exactly once per request, while the stream goes on: those that satisfy --where, have one of --ids, " +
			"or lie from --from-key to --to-key (together: all of them). The request is written to the WAL and the stream meets it in commit order; " +
			"--list shows where requests stand, --cancel ends one. See docs/reemit.md.",
		Flags: f.define,
		Uses:  config.ReemitSettings,
		Needs: func() (pg, kafka bool) { return true, true },
	}, args, stdout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	switch {
	case f.list && f.cancel != "":
		return errors.New("--list and --cancel go alone")
	case f.list:
		return listReemits(ctx, cfg, f.json, stdout)
	case f.cancel != "":
		lsn, known, err := pipeline.CancelReemit(ctx, cfg.Config, f.cancel)
		if err != nil {
			return err
		}
		note := ""
		if !known {
			note = " (the checkpoint does not record it yet: it is cancelled if the stream meets it before the cancel)"
		}
		fmt.Fprintf(stdout, "cancel of re-emit request %s written to the WAL at %s%s; walstream reemit --list shows it end\n", f.cancel, lsn, note)
		return nil
	}
	table, err := reemitTable(cfg)
	if err != nil {
		return err
	}
	req := pipeline.ReemitRequest{Table: table, Where: f.where, IDs: splitList(f.ids), FromKey: splitList(f.fromKey), ToKey: splitList(f.toKey)}
	a, err := pipeline.RequestReemit(ctx, cfg.Config, req, f.dryRun)
	if err != nil {
		return fmt.Errorf("re-emit request refused: %w", err)
	}
	where := a.Where
	if where == "" {
		where = "every row"
	}
	if f.dryRun {
		fmt.Fprintf(stdout, "would re-emit from %s: %s (about %d rows, the planner's estimate); nothing was requested\n", table, where, a.Estimate)
		return nil
	}
	fmt.Fprintf(stdout, "re-emit request %s of %s: %s (about %d rows, the planner's estimate), written to the WAL at %s\n", a.ID, table, where, a.Estimate, a.LSN)
	if a.Checkpoint == nil {
		fmt.Fprintf(stdout, "stream %s has no checkpoint yet: the request runs once it streams past it\n", cfg.Stream)
	}
	fmt.Fprintf(stdout, "its records carry the header walstream.reemit=%s; walstream reemit --list shows its progress, walstream reemit --cancel %s ends it\n", a.ID, a.ID)
	return nil
}

// reemitTable is the table --table names: one of the stream's.
func reemitTable(cfg *config.Config) (string, error) {
	if len(cfg.Names.Tables) != 1 {
		var names []string
		for _, t := range cfg.Names.Tables {
			names = append(names, t.String())
		}
		return "", fmt.Errorf("the stream has %d outbox tables (%s): name the one to re-emit from with --table", len(names), strings.Join(names, ", "))
	}
	return cfg.Names.Tables[0].String(), nil
}

// splitList splits a comma-separated list; nil for an empty one.
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

func listReemits(ctx context.Context, cfg *config.Config, asJSON bool, w io.Writer) error {
	rs, found, err := pipeline.ListReemits(ctx, cfg.Config)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rs)
	}
	switch {
	case !found:
		fmt.Fprintf(w, "stream %s has no checkpoint in Kafka yet, so no re-emit request\n", cfg.Stream)
	case len(rs) == 0:
		fmt.Fprintf(w, "stream %s has no re-emit request\n", cfg.Stream)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	printReemits(tw, rs)
	return nil
}

// printReemits writes each request on lines of name, tab, text.
func printReemits(w io.Writer, rs []pipeline.ReemitReport) {
	for _, r := range rs {
		fmt.Fprintf(w, "re-emit %s\t%s of %s, requested by %s at %s (LSN %s)\n", r.ID, r.State, r.Table, r.Origin, r.Accepted.Format(time.RFC3339), r.LSN)
		where := r.Where
		if where == "" {
			where = "every row"
		}
		fmt.Fprintf(w, "  where\t%s\n", strings.ReplaceAll(where, "\n", " "))
		switch {
		case r.State == "queued":
			fmt.Fprintf(w, "  rows\tnone yet: it runs after the requests before it\n")
		case r.Remaining > 0:
			fmt.Fprintf(w, "  rows\t%d published, about %d remaining\n", r.Rows, r.Remaining)
		default:
			fmt.Fprintf(w, "  rows\t%d published\n", r.Rows)
		}
		if r.RowsPerSecond > 0 {
			eta := ""
			if r.ETASeconds > 0 {
				eta = fmt.Sprintf(", %s left", (time.Duration(r.ETASeconds) * time.Second).Round(time.Second))
			}
			fmt.Fprintf(w, "  rate\t%.0f rows/s%s\n", r.RowsPerSecond, eta)
		}
		if len(r.LastKey) > 0 {
			fmt.Fprintf(w, "  last key\t%s (of %s, up to %s)\n", strings.Join(r.LastKey, ","), strings.Join(r.Key, ","), strings.Join(r.UpperKey, ","))
		}
		if r.Ended != nil {
			fmt.Fprintf(w, "  ended\t%s\n", r.Ended.Format(time.RFC3339))
		}
		if r.Error != "" {
			fmt.Fprintf(w, "  error\t%s\n", r.Error)
		}
	}
}
