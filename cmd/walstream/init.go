package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/replication"
)

// ErrCheckFailed is what `walstream init --check` exits non-zero with.
var ErrCheckFailed = errors.New("setup check failed")

// initSteps is the idempotent SQL that prepares a database for walstream:
// the outbox tables in their mappings' layout, then replication's own
// setup (publication, slot and, unless role is empty, a least-privilege
// role).
func initSteps(c *Config, role string) []replication.Step {
	outboxes, _, _ := c.outboxes() // validated
	var steps []replication.Step
	for _, o := range outboxes {
		t := pgx.Identifier{o.Schema, o.Table}.Sanitize()
		col := func(name string) string { return pgx.Identifier{name}.Sanitize() }
		steps = append(steps, replication.Step{Name: "table " + t, Why: "The outbox table " + o.Name() + ", in Debezium's layout: applications insert a row here in the transaction that changes their data.",
			SQL: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    %-13s uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    %-13s text        NOT NULL,
    %-13s text        NOT NULL,
    type          text        NOT NULL,
    %-13s jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
)`, t, col(o.Columns.ID), col(o.Columns.AggregateType), col(o.Columns.AggregateID), col(o.Columns.Payload))})
	}
	return append(steps, c.names().SetupSteps(role, c.FailoverSlot)...)
}

// runInit prints, applies or checks the setup.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var apply, check bool
	var role string
	cfg, err := parseCommand(command{name: "init",
		about: "Prints the SQL that prepares Postgres for walstream: the outbox table, the publication, the slot and a least-privilege role.\n--apply runs it (idempotent); --check validates an existing setup and reports what is wrong, line by line.",
		extra: func(fs *flag.FlagSet) {
			fs.BoolVar(&apply, "apply", false, "run the SQL (as a role that may create them)")
			fs.BoolVar(&check, "check", false, "check the setup instead, as the role walstream runs as")
			fs.StringVar(&role, "role", "walstream", "least-privilege role to create; empty: none")
		},
		uses:  initSettings,
		needs: func() (pg, kafka bool) { return apply || check, false },
	}, args, stdout)
	if err != nil {
		return err
	}
	if !apply && !check {
		for _, s := range initSteps(cfg, role) {
			fmt.Fprintf(stdout, "-- %s\n%s;\n\n", s.Why, s.SQL)
		}
		if cfg.FailoverSlot {
			db := "app"
			if pg, err := cfg.pgConfig(); err == nil && pg.Database != "" {
				db = pg.Database
			}
			fmt.Fprintln(stdout, cfg.names().FailoverSetup(db))
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pgCfg, err := cfg.pgConfig()
	if err != nil {
		return err
	}
	conn, err := replication.Connect(ctx, pgCfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if check {
		return runCheck(ctx, conn, cfg, stdout)
	}
	// Nothing walstream creates is of use without logical decoding, and
	// the slot cannot be created: fail before creating anything.
	if err := replication.CheckWALLevel(ctx, conn); err != nil {
		return err
	}
	for _, s := range initSteps(cfg, role) {
		if _, err := conn.Exec(ctx, s.SQL); err != nil {
			return fmt.Errorf("creating %s: %w", s.Name, err)
		}
		fmt.Fprintf(stdout, "ok    %s\n", s.Name)
	}
	return nil
}

// runCheck prints replication.Check's findings as ok, WARN or FAIL, and
// fails when any requirement is not met.
func runCheck(ctx context.Context, conn *pgx.Conn, cfg *Config, out io.Writer) error {
	outboxes, _, _ := cfg.outboxes() // validated
	var tables []replication.TableColumns
	for _, o := range outboxes {
		want := []string{o.Columns.ID, o.Columns.AggregateType, o.Columns.AggregateID, o.Columns.Payload}
		if o.Columns.Timestamp != "" {
			want = append(want, o.Columns.Timestamp)
		}
		for _, a := range o.Additional {
			if !o.AdditionalOptional {
				want = append(want, a.Column)
			}
		}
		tables = append(tables, replication.TableColumns{Table: replication.Table{Schema: o.Schema, Name: o.Table}, Columns: want})
	}
	findings, err := replication.Check(ctx, conn, cfg.names(), tables)
	if err != nil {
		return err
	}
	failed := 0
	for _, f := range findings {
		if f.Status == replication.Fail {
			failed++
		}
		fmt.Fprintf(out, "%-5s %s\n", f.Status, f.Text)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d requirement(s) not met", ErrCheckFailed, failed)
	}
	return nil
}
