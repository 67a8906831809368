package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/walstream/walstream/config"
)

// runValidate reads run's settings exactly as run does (flags, the
// environment, --config with its streams) and checks them without
// connecting to anything, so that a manifest or a chart's values can be
// checked before a rollout. It prints a line for each stream, then the
// memory limit run would have: the runtime's, parsed from GOMEMLIMIT, or
// walstream's own.
func runValidate(args []string, stdout io.Writer) error {
	cfgs, err := config.ParseStreams(config.Run, args, stdout)
	if err != nil {
		return err
	}
	for _, cfg := range cfgs {
		pg := cfg.Postgres
		fmt.Fprintf(stdout, "settings valid: stream %q, slot %q, Postgres %s:%d database %q as %q, %d Kafka brokers\n",
			cfg.Stream, cfg.Slot, pg.Host, pg.Port, pg.Database, pg.User, len(cfg.Kafka.Brokers))
	}
	limit, from := debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	if os.Getenv("GOMEMLIMIT") == "" {
		limit, from = streamsMemoryLimit(cfgs), "the streams' queues and batches"
	}
	fmt.Fprintf(stdout, "memory limit %d bytes (%s)\n", limit, from)
	return nil
}
