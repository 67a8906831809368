package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
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
		// Answer as Kafka 3.9, without transaction version 2 (KIP-890
		// part 2). With it, a broker killed while a transaction is open
		// aborts the transaction on restart yet acknowledges the
		// producer's retried EndTxn as a commit, because it takes the
		// epoch it bumped in recovery for a completed EndTxn
		// (TestCommitAcknowledgedAfterCrashIsVisible). Without it, that
		// EndTxn is fenced and the producer starts over from its
		// checkpoint. (Kafka itself keeps an open transaction across a
		// restart, so the retried EndTxn commits it.)
		kfake.MaxVersions(kversion.V3_9_0()),
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
		running := filepath.Join(*dataDir, "devbroker.running")
		if _, err := os.Stat(running); err == nil {
			if err := abortCrashed(*dataDir); err != nil {
				return fmt.Errorf("recovering %s after an unclean stop: %w", *dataDir, err)
			}
		}
		if err := os.MkdirAll(*dataDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(running, nil, 0o644); err != nil {
			return err
		}
		// Removed only after a clean stop, so that the next start knows.
		defer os.Remove(running)
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

// abortCrashed makes the aborts of a crash durable. kfake aborts every
// transaction open when it was killed, but only in memory: the aborted
// records stay on disk without an abort marker. Its next recovery from the
// segments then takes them for part of the producer's next committed
// transaction, and a read_committed consumer sees rows that were aborted and
// published again (TestAbortedByCrashStaysAborted). So, before any client
// can connect, the data directory is opened on a private port and an abort
// marker is written for every transactional producer on every partition (a
// marker where the producer had nothing open changes nothing), then closed
// cleanly.
func abortCrashed(dataDir string) error {
	c, err := kfake.NewCluster(kfake.DataDir(dataDir), kfake.Ports(0))
	if err != nil {
		return err
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("listing topics: %w", err)
	}
	txns, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		return fmt.Errorf("listing transactions: %w", err)
	}
	for _, txn := range txns.Sorted() {
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.Committed = txn.ProducerID, false
		for _, td := range topics.Sorted() {
			mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			mt.Topic = td.Topic
			for _, pd := range td.Partitions.Sorted() {
				mt.Partitions = append(mt.Partitions, pd.Partition)
			}
			m.Topics = append(m.Topics, mt)
		}
		req.Markers = append(req.Markers, m)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("writing abort markers for producer %d: %w", txn.ProducerID, err)
		}
		for _, rm := range resp.Markers {
			for _, rt := range rm.Topics {
				for _, rp := range rt.Partitions {
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
						return fmt.Errorf("writing an abort marker for producer %d to %s/%d: %w", txn.ProducerID, rt.Topic, rp.Partition, err)
					}
				}
			}
		}
	}
	return nil
}
