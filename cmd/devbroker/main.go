// Command devbroker runs franz-go's kfake, an in-process Kafka-protocol
// broker with transactions and read_committed, for local development, the
// demo and tests. It is a stand-in, not a Kafka: run real Apache Kafka in
// production (docker-compose.yml shows one).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// advertised is a listener that reports another address: kfake tells
// clients to connect to its listener's Addr.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devbroker:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:9092", "listen address")
	dataDir := flag.String("data-dir", "", "persist topics, offsets and transactions here (empty: memory only)")
	partitions := flag.Int("partitions", 3, "partitions of auto-created topics")
	advertise := flag.String("advertise", "", "host:port clients are told to connect to (default: -addr); lets a proxy sit in front")
	flag.Parse()

	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", *addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("-addr %q: port: %w", *addr, err)
	}
	opts := []kfake.Opt{
		kfake.Ports(p),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			ln, err := net.Listen(network, net.JoinHostPort(host, port))
			if err != nil || *advertise == "" {
				return ln, err
			}
			adv, err := net.ResolveTCPAddr("tcp", *advertise)
			if err != nil {
				ln.Close()
				return nil, fmt.Errorf("-advertise %q: %w", *advertise, err)
			}
			return advertised{ln, adv}, nil
		}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	fmt.Printf("devbroker listening on %s (data dir %q)\n", c.ListenAddrs()[0], *dataDir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	c.Close()
	return nil
}
