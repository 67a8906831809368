package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/replication"
)

// ErrCheckFailed is what `walstream init --check` exits non-zero with.
var ErrCheckFailed = errors.New("setup check failed")

// runInit prints the idempotent SQL that prepares a database for walstream
// (the outbox tables in their mappings' layout, then replication's own
// setup: publication, slot and, unless --role is empty, a least-privilege
// role), applies it, or checks the setup, each the way the server's
// provider lets a role replicate.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var apply, check, acls bool
	var role, principal, fromDebezium, providerName string
	cfg, err := config.Parse(config.Command{Name: "init",
		About: "Prints the SQL that prepares Postgres for walstream: the outbox table, the publication, the slot and a least-privilege role.\n--apply runs it (idempotent, checking first that it can run every statement, the slot last and the rest in one transaction); --check validates an existing setup and reports what is wrong, line by line.\n--from-debezium prints the walstream config equivalent to a Debezium connector config instead.",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&apply, "apply", false, "run the SQL (as a role that may create them)")
			fs.BoolVar(&check, "check", false, "check the setup instead, as the role walstream runs as")
			fs.StringVar(&role, "role", "walstream", "least-privilege role to create; empty: none")
			fs.StringVar(&providerName, "provider", "", "how the server lets a role replicate: postgres, rds (Amazon RDS and Aurora: GRANT rds_replication), cloudsql (Google Cloud SQL) or azure (Azure Database for PostgreSQL); default: recognised from the server's settings with --apply and --check, postgres for the printed SQL (see docs/postgres.md, Managed Postgres)")
			fs.BoolVar(&acls, "kafka-acls", false, "print the least-privilege Kafka ACLs of the stream instead, as a table and as kafka-acls.sh commands")
			fs.StringVar(&principal, "kafka-principal", "User:walstream", "the Kafka principal --kafka-acls grants to")
			fs.StringVar(&fromDebezium, "from-debezium", "", "print the walstream config equivalent to this Debezium Postgres connector config (.json, .properties or a Strimzi KafkaConnector) and exit")
		},
		Uses:  config.InitSettings,
		Needs: func() (pg, kafka bool) { return apply || check, false },
	}, args, stdout)
	if err != nil {
		return err
	}
	if fromDebezium != "" {
		return config.PrintFromDebezium(stdout, fromDebezium)
	}
	if acls {
		return printACLs(stdout, cfg, principal)
	}
	named, err := replication.ParseProvider(providerName)
	if err != nil {
		return fmt.Errorf("--provider: %w", err)
	}
	var tables []replication.TableColumns
	for _, o := range cfg.Outboxes {
		tables = append(tables, replication.TableColumns{Table: replication.Table{Schema: o.Schema, Name: o.Table}, Columns: o.RequiredColumns()})
	}
	if !apply && !check {
		printSetup(stdout, cfg, role, named)
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
		findings, err := replication.Check(ctx, conn, cfg.Names, tables, named)
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
	// Everything the setup needs is checked before anything is created:
	// wal_level (nothing walstream creates is of use without logical
	// decoding), and what the role may create under the server's
	// privilege model.
	model, err := replication.Preflight(cctx, conn, cfg.Names, role, named)
	if err != nil {
		return err
	}
	if model != replication.ProviderPostgres {
		fmt.Fprintf(stdout, "setup for %s\n", model)
	}
	// Creating the slot waits for the transactions open when it begins:
	// say which, as run does.
	watch := replication.Create{WatchInterval: initWaitInterval, Watch: func(w replication.SlotWait) {
		fmt.Fprintf(stdout, "wait  %s\n", w)
	}}
	return replication.Apply(ctx, conn, setupSteps(cfg, role, model), cfg.Names.Slot, watch, func(s replication.Step) {
		fmt.Fprintf(stdout, "ok    %s\n", s.Name)
	})
}

// setupSteps are the outbox tables in their mappings' layout, then
// replication's own setup: publication, slot and, unless role is empty,
// a least-privilege role let replicate as the privilege model does it.
func setupSteps(cfg *config.Config, role string, model replication.Provider) []replication.Step {
	var steps []replication.Step
	for _, o := range cfg.Outboxes {
		t := replication.Table{Schema: o.Schema, Name: o.Table}
		steps = append(steps, replication.OutboxTableStep(t, o.Columns.ID, o.Columns.AggregateType, o.Columns.AggregateID, o.Columns.Payload))
	}
	return append(steps, cfg.Names.SetupSteps(role, cfg.FailoverSlot, model)...)
}

// printSetup prints the setup's SQL, explained, for the privilege model
// named (Postgres's when none is).
func printSetup(w io.Writer, cfg *config.Config, role string, named replication.Provider) {
	model := named
	if model == "" {
		model = replication.ProviderPostgres
		if role != "" {
			fmt.Fprintf(w, "-- For Postgres as released. On Amazon RDS or Aurora, Google Cloud SQL or Azure, print it the service's way: walstream init --provider rds, cloudsql or azure.\n\n")
		}
	}
	for _, s := range setupSteps(cfg, role, model) {
		fmt.Fprintf(w, "-- %s\n%s;\n\n", s.Why, s.SQL)
	}
	if cfg.FailoverSlot {
		db := "app"
		if cfg.Postgres != nil && cfg.Postgres.Database != "" {
			db = cfg.Postgres.Database
		}
		fmt.Fprintln(w, cfg.Names.FailoverSetup(db))
	}
}

// initWaitInterval is how often init --apply says what the creation of
// the slot waits for.
const initWaitInterval = 5 * time.Second
