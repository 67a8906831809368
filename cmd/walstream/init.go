package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/walstream/walstream/replication"
)

// ErrCheckFailed is what `walstream init --check` exits non-zero with.
var ErrCheckFailed = errors.New("setup check failed")

// runInit prints the idempotent SQL that prepares a database for walstream
// (the outbox tables in their mappings' layout, then replication's own
// setup: publication, slot and, unless --role is empty, a least-privilege
// role), applies it, or checks the setup.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var apply, check, acls bool
	var role, principal, fromDebezium string
	cfg, err := parseCommand(command{name: "init",
		about: "Prints the SQL that prepares Postgres for walstream: the outbox table, the publication, the slot and a least-privilege role.\n--apply runs it (idempotent); --check validates an existing setup and reports what is wrong, line by line.\n--from-debezium prints the walstream config equivalent to a Debezium connector config instead.",
		extra: func(fs *flag.FlagSet) {
			fs.BoolVar(&apply, "apply", false, "run the SQL (as a role that may create them)")
			fs.BoolVar(&check, "check", false, "check the setup instead, as the role walstream runs as")
			fs.StringVar(&role, "role", "walstream", "least-privilege role to create; empty: none")
			fs.BoolVar(&acls, "kafka-acls", false, "print the least-privilege Kafka ACLs of the stream instead, as a table and as kafka-acls.sh commands")
			fs.StringVar(&principal, "kafka-principal", "User:walstream", "the Kafka principal --kafka-acls grants to")
			fs.StringVar(&fromDebezium, "from-debezium", "", "print the walstream config equivalent to this Debezium Postgres connector config (.json, .properties or a Strimzi KafkaConnector) and exit")
		},
		uses:  initSettings,
		needs: func() (pg, kafka bool) { return apply || check, false },
	}, args, stdout)
	if err != nil {
		return err
	}
	if fromDebezium != "" {
		return printFromDebezium(stdout, fromDebezium)
	}
	if acls {
		printACLs(stdout, cfg, principal)
		return nil
	}
	var steps []replication.Step
	var tables []replication.TableColumns
	for _, o := range cfg.Outboxes {
		t := replication.Table{Schema: o.Schema, Name: o.Table}
		steps = append(steps, replication.OutboxTableStep(t, o.Columns.ID, o.Columns.AggregateType, o.Columns.AggregateID, o.Columns.Payload))
		tables = append(tables, replication.TableColumns{Table: t, Columns: o.RequiredColumns()})
	}
	steps = append(steps, cfg.Names.SetupSteps(role, cfg.FailoverSlot)...)
	if !apply && !check {
		for _, s := range steps {
			fmt.Fprintf(stdout, "-- %s\n%s;\n\n", s.Why, s.SQL)
		}
		if cfg.FailoverSlot {
			db := "app"
			if cfg.Postgres != nil && cfg.Postgres.Database != "" {
				db = cfg.Postgres.Database
			}
			fmt.Fprintln(stdout, cfg.Names.FailoverSetup(db))
		}
		return nil
	}
	// The check and the connection are bounded; applying is not: creating
	// the slot waits for the transactions open when it begins, as long as
	// they last, and says which (an interrupt ends it).
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := replication.Connect(cctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if check {
		ctx = cctx
		findings, err := replication.Check(ctx, conn, cfg.Names, tables)
		if err != nil {
			return err
		}
		failed := 0
		for _, f := range findings {
			if f.Status == replication.Fail {
				failed++
			}
			fmt.Fprintf(stdout, "%-5s %s\n", f.Status, f.Text)
		}
		if failed > 0 {
			return fmt.Errorf("%w: %d requirement(s) not met", ErrCheckFailed, failed)
		}
		return nil
	}
	// Nothing walstream creates is of use without logical decoding, and
	// the slot cannot be created: fail before creating anything.
	if err := replication.CheckWALLevel(ctx, conn); err != nil {
		return err
	}
	// Creating the slot waits for the transactions open when it begins:
	// say which, as run does.
	slotStep := fmt.Sprintf("slot %q", cfg.Names.Slot)
	watch := replication.Create{WatchInterval: initWaitInterval, Watch: func(w replication.SlotWait) {
		fmt.Fprintf(stdout, "wait  %s\n", w)
	}}
	for _, s := range steps {
		var err error
		if s.Name == slotStep {
			err = replication.ExecWatched(ctx, conn, cfg.Names.Slot, s.SQL, watch)
		} else {
			_, err = conn.Exec(ctx, s.SQL)
		}
		if err != nil {
			return fmt.Errorf("creating %s: %w", s.Name, err)
		}
		fmt.Fprintf(stdout, "ok    %s\n", s.Name)
	}
	return nil
}

// initWaitInterval is how often init --apply says what the creation of
// the slot waits for.
const initWaitInterval = 5 * time.Second
