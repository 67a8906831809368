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
)

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
		fmt.Fprintln(os.Stderr, "walbench:", err)
		os.Exit(1)
	}
}

// run dispatches: "broker" is the kfake broker, "recv" the Go receive-only
// client and "kafka-txn" the Kafka client alone, which walbench starts as
// child processes of itself; anything else is the benchmark.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case brokerCommand:
			return runBroker(ctx, args[1:], stdout, stderr)
		case recvCommand:
			return runRecv(ctx, args[1:], stdout, stderr)
		case kafkaTxnCommand:
			return runKafkaTxn(ctx, args[1:], stdout, stderr)
		}
	}
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	return runBench(ctx, cfg, stdout, stderr)
}
