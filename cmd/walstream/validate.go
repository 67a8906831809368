package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

// runValidate reads run's settings exactly as run does (flags, the
// environment, --config) and checks them without connecting to anything,
// so that a manifest or a chart's values can be checked before a rollout.
// It prints the memory limit run would have: the runtime's, parsed from
// GOMEMLIMIT, or walstream's own.
func runValidate(args []string, stdout io.Writer) error {
	cfg, err := parseConfig(args, stdout)
	if err != nil {
		return err
	}
	limit, from := debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	if os.Getenv("GOMEMLIMIT") == "" {
		limit, from = memoryLimit(cfg), "the queue and three batches"
	}
	pg := cfg.Postgres
	fmt.Fprintf(stdout, "settings valid: stream %q, slot %q, Postgres %s:%d database %q as %q, %d Kafka brokers; memory limit %d bytes (%s)\n",
		cfg.Stream, cfg.Slot, pg.Host, pg.Port, pg.Database, pg.User, len(cfg.Kafka.Brokers), limit, from)
	return nil
}
