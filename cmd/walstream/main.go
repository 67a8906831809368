package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/walstream/walstream/config"
)

// version and commit are stamped at build time with -ldflags
// "-X main.version=... -X main.commit=...".
var version, commit = "dev", ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "walstream:", err)
		os.Exit(1)
	}
}

const usage = `Usage: walstream <command> [flags]

Commands:
  run       stream the outbox into Kafka (walstream run --help lists the settings)
  status    print the slot's state and the checkpoint in Kafka (--json for JSON)
  init      print, apply (--apply) or check (--check) the Postgres setup
  diff      compare Debezium's topics with walstream's shadow topics, event by event
  reemit    publish outbox rows again, exactly once per request (--list, --cancel ID)
  validate  check run's settings (flags, environment, --config) without connecting
  version   print the version (also --version)

walstream <command> --help lists the flags of a command.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "run":
		cfgs, err := config.ParseStreams(config.Run, args[1:], stdout)
		if err != nil {
			return err
		}
		return runStream(ctx, cfgs, stderr)
	case "init":
		return runInit(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "diff":
		return runDiff(ctx, args[1:], stdout, stderr)
	case "reemit":
		return runReemit(ctx, args[1:], stdout, stderr)
	case "validate":
		return runValidate(args[1:], stdout)
	case "version", "-version", "--version":
		if commit != "" {
			fmt.Fprintf(stdout, "walstream %s (commit %s)\n", version, commit)
			return nil
		}
		fmt.Fprintln(stdout, "walstream", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q; walstream --help lists the commands", args[0])
}
