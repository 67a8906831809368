package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/replication"
)

// ErrCheckFailed is what `walstream init --check` exits non-zero with.
var ErrCheckFailed = errors.New("setup check failed")

// initStep is one statement of the setup, with why it is there.
type initStep struct {
	why, sql string
}

// initSteps is the idempotent SQL that prepares a database for walstream.
// The publication comes before the slot: pgoutput cannot decode changes
// older than the publication it is asked for.
func initSteps(c *Config, role string) []initStep {
	n := c.names()
	outboxes, _, _ := c.outboxes() // validated
	pub := pgx.Identifier{n.Publication}.Sanitize()
	var steps []initStep
	var tables []string
	for _, o := range outboxes {
		t := pgx.Identifier{o.Schema, o.Table}.Sanitize()
		tables = append(tables, t)
		col := func(name string) string { return pgx.Identifier{name}.Sanitize() }
		steps = append(steps, initStep{"The outbox table " + o.Name() + ", in Debezium's layout: applications insert a row here in the transaction that changes their data.",
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    %-13s uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    %-13s text        NOT NULL,
    %-13s text        NOT NULL,
    type          text        NOT NULL,
    %-13s jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
)`, t, col(o.Columns.ID), col(o.Columns.AggregateType), col(o.Columns.AggregateID), col(o.Columns.Payload))})
	}
	list := strings.Join(tables, ", ")
	steps = append(steps,
		initStep{"The publication: inserts into the outbox are decoded and sent to walstream; updates too, so that table.op.invalid.behavior sees them.",
			fmt.Sprintf(`DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = %s) THEN
        CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update');
    END IF;
END $$`, quoteLiteral(n.Publication), pub, list)},
		initStep{"The replication slot: Postgres keeps the WAL walstream has not confirmed. Created after the publication.",
			fmt.Sprintf(`SELECT pg_create_logical_replication_slot(%s, 'pgoutput')
WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %s)`, quoteLiteral(n.Slot), quoteLiteral(n.Slot))})
	if role != "" {
		r := pgx.Identifier{role}.Sanitize()
		steps = append(steps,
			initStep{"A role for walstream with the least it needs: to log in and replicate (set its password with ALTER ROLE ... PASSWORD, or use a client certificate).",
				fmt.Sprintf(`DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) THEN
        CREATE ROLE %s LOGIN REPLICATION;
    END IF;
END $$`, quoteLiteral(role), r)},
			initStep{"It reads the outbox tables and nothing else; run walstream as this role with --create=false.",
				fmt.Sprintf("GRANT SELECT ON %s TO %s", list, r)})
	}
	return steps
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// runInit prints, applies or checks the setup.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var apply, check bool
	var role string
	cfg, err := parseCommand("init", "Prints the SQL that prepares Postgres for walstream: the outbox table, the publication, the slot and a least-privilege role.\n--apply runs it (idempotent); --check validates an existing setup and reports what is wrong, line by line.",
		args, stderr, func(fs *flag.FlagSet) {
			fs.BoolVar(&apply, "apply", false, "run the SQL (as a role that may create them)")
			fs.BoolVar(&check, "check", false, "check the setup instead, as the role walstream runs as")
			fs.StringVar(&role, "role", "walstream", "least-privilege role to create; empty: none")
		}, false)
	if err != nil {
		return err
	}
	if !apply && !check {
		for _, s := range initSteps(cfg, role) {
			fmt.Fprintf(stdout, "-- %s\n%s;\n\n", s.why, s.sql)
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
	for _, s := range initSteps(cfg, role) {
		if _, err := conn.Exec(ctx, s.sql); err != nil {
			return fmt.Errorf("applying %q: %w", firstLine(s.sql), err)
		}
		fmt.Fprintf(stdout, "ok    %s\n", firstLine(s.sql))
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// runCheck reports each requirement as ok, WARN or FAIL, and fails when
// any requirement is not met.
func runCheck(ctx context.Context, conn *pgx.Conn, cfg *Config, out io.Writer) error {
	n := cfg.names()
	failed := 0
	report := func(status, format string, a ...any) {
		if status == "FAIL" {
			failed++
		}
		fmt.Fprintf(out, "%-5s %s\n", status, fmt.Sprintf(format, a...))
	}
	var walLevel, user string
	var super, canReplicate bool
	err := conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_user, r.rolsuper, r.rolreplication
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&walLevel, &user, &super, &canReplicate)
	if err != nil {
		return fmt.Errorf("checking the setup: %w", err)
	}
	if walLevel == "logical" {
		report("ok", "wal_level is logical")
	} else {
		report("FAIL", "wal_level is %s: set wal_level = logical and restart Postgres", walLevel)
	}
	switch {
	case super:
		report("WARN", "role %s is a superuser: over-privileged; walstream needs only LOGIN REPLICATION and SELECT on the outbox tables (walstream init prints it)", user)
	case canReplicate:
		report("ok", "role %s has REPLICATION and is not a superuser", user)
	default:
		report("FAIL", "role %s lacks REPLICATION: ALTER ROLE %s WITH REPLICATION", user, pgx.Identifier{user}.Sanitize())
	}
	outboxes, _, _ := cfg.outboxes() // validated
	for _, o := range outboxes {
		if err := checkTable(ctx, conn, o, user, report); err != nil {
			return err
		}
	}
	st, err := replication.PollSlot(ctx, conn, n)
	if err != nil {
		return err
	}
	switch {
	case !st.PublicationOK:
		report("FAIL", "publication %s does not exist", n.Publication)
	default:
		for _, t := range n.Tables {
			if slices.Contains(st.Missing, t) {
				report("FAIL", "publication %s does not include %s: ALTER PUBLICATION %s ADD TABLE %s", n.Publication, t,
					pgx.Identifier{n.Publication}.Sanitize(), t.SQL())
			} else {
				report("ok", "publication %s includes %s", n.Publication, t)
			}
		}
	}
	if !st.Exists {
		report("FAIL", "slot %s does not exist", n.Slot)
	} else if err := replication.CheckSlot(n.Slot, st.Slot, conn.Config().Database); err != nil {
		report("FAIL", "%v", err)
	} else {
		report("ok", "slot %s is a pgoutput slot, wal_status %s", n.Slot, st.WALStatus)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d requirement(s) not met", ErrCheckFailed, failed)
	}
	return nil
}

// checkTable reports whether an outbox table exists with the columns its
// mapping names, and whether user may read it.
func checkTable(ctx context.Context, conn *pgx.Conn, o *decode.Outbox, user string, report func(status, format string, a ...any)) error {
	var exists, canSelect bool
	var columns []string
	err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
			to_regclass($1) IS NOT NULL AND has_table_privilege(to_regclass($1), 'SELECT'),
			coalesce((SELECT array_agg(attname::text) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped), '{}')`,
		pgx.Identifier{o.Schema, o.Table}.Sanitize()).Scan(&exists, &canSelect, &columns)
	if err != nil {
		return fmt.Errorf("checking table %s: %w", o.Name(), err)
	}
	if !exists {
		report("FAIL", "table %s does not exist", o.Name())
		return nil
	}
	report("ok", "table %s exists", o.Name())
	want := []string{o.Columns.ID, o.Columns.AggregateType, o.Columns.AggregateID, o.Columns.Payload}
	if o.Columns.Timestamp != "" {
		want = append(want, o.Columns.Timestamp)
	}
	for _, a := range o.Additional {
		if !o.AdditionalOptional {
			want = append(want, a.Column)
		}
	}
	for _, c := range want {
		if !slices.Contains(columns, c) {
			report("FAIL", "table %s has no column %s", o.Name(), c)
		}
	}
	if canSelect {
		report("ok", "role %s may SELECT from %s", user, o.Name())
	} else {
		report("FAIL", "role %s may not SELECT from %s: GRANT SELECT ON %s TO %s", user, o.Name(),
			pgx.Identifier{o.Schema, o.Table}.Sanitize(), pgx.Identifier{user}.Sanitize())
	}
	return nil
}
