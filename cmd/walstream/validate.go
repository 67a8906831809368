package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/debezium"
)

// runValidate reads run's settings exactly as run does (flags, the
// environment, --config with its streams) and checks them without
// connecting to anything, so that a manifest or a chart's values can be
// checked before a rollout, in a CI pipeline too. It prints a line for
// each stream, the config provider references of a Debezium connector
// config it left unresolved, then the memory limit run would have: the
// runtime's, parsed from GOMEMLIMIT, or walstream's own.
func runValidate(args []string, stdout io.Writer) error {
	var resolve bool
	cmd := config.Run
	cmd.Name = "validate"
	cmd.About = "Checks run's settings (flags, the environment, --config) without connecting to Postgres or Kafka; " +
		"a Debezium connector config's config provider references are checked but not read unless --resolve-secrets says so " +
		"(see docs/debezium.md, Config providers)."
	cmd.Flags = func(fs *flag.FlagSet) {
		fs.BoolVar(&resolve, "resolve-secrets", false, "read the config provider references of a Debezium connector config as walstream run does "+
			"(environment variables, files, Kubernetes Secrets and ConfigMaps, AWS Secrets Manager and Parameter Store), failing on one that cannot be read; "+
			"without it none is read, and each is listed")
	}
	cmd.Secrets = func() debezium.Resolving {
		if resolve {
			return debezium.ResolveAll
		}
		return debezium.ResolveNone
	}
	cfgs, err := config.ParseStreams(cmd, args, stdout)
	if err != nil {
		return err
	}
	for _, cfg := range cfgs {
		pg := cfg.Postgres
		fmt.Fprintf(stdout, "settings valid: stream %q, slot %q, Postgres %s:%d database %q as %q, %d Kafka brokers\n",
			cfg.Stream, cfg.Slot, pg.Host, pg.Port, pg.Database, pg.User, len(cfg.Kafka.Brokers))
		if len(cfg.Unresolved) > 0 {
			fmt.Fprintf(stdout, "  %d config provider references not read (walstream run reads them; validate --resolve-secrets reads them now):\n", len(cfg.Unresolved))
		}
		for _, u := range cfg.Unresolved {
			fmt.Fprintf(stdout, "    %s: %s, %s\n", u.At, u.Ref, u.Store)
		}
	}
	limit, from := debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	if os.Getenv("GOMEMLIMIT") == "" {
		limit, from = streamsMemoryLimit(cfgs), "the streams' queues and batches"
	}
	fmt.Fprintf(stdout, "memory limit %d bytes (%s)\n", limit, from)
	return nil
}
