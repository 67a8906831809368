package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// brokerCommand is the hidden subcommand that runs the broker: walbench
// starts itself as a separate process, so that the broker's CPU time and
// profile are its own, as with cmd/devbroker.
const brokerCommand = "broker"

// Lines the broker prints, which the launcher waits for.
const (
	brokerListening      = "walbench broker listening on "
	brokerProfileStarted = "walbench broker profile started "
	brokerProfileWritten = "walbench broker profile written "
)

// runBroker is cmd/devbroker's kfake cluster (one broker, auto-created
// topics, state in a data directory) plus CPU profiles on request: SIGUSR1
// starts one, SIGUSR2 writes it.
func runBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("walbench broker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9092", "listen address")
	dataDir := fs.String("data-dir", "", "persist topics, offsets and transactions here (empty: memory only)")
	partitions := fs.Int("partitions", DefaultPartitions, "partitions of auto-created topics")
	profileDir := fs.String("profile-dir", "", "directory for CPU profiles taken between SIGUSR1 and SIGUSR2")
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", *addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("-addr %q: port: %w", *addr, err)
	}
	c, err := kfake.NewCluster(testenv.KfakeOpts(p, *partitions, *dataDir)...)
	if err != nil {
		return fmt.Errorf("starting kfake: %w", err)
	}
	defer c.Close()
	fmt.Fprintf(stdout, "%s%s (data dir %q)\n", brokerListening, c.ListenAddrs()[0], *dataDir)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	var prof *os.File
	seq := 0
	stopProfile := func() error {
		if prof == nil {
			return nil
		}
		pprof.StopCPUProfile()
		err := prof.Close()
		fmt.Fprintf(stdout, "%s%s\n", brokerProfileWritten, prof.Name())
		prof = nil
		return err
	}
	defer stopProfile()
	for {
		select {
		case <-ctx.Done():
			return stopProfile()
		case s := <-sigs:
			if s == syscall.SIGUSR2 {
				if err := stopProfile(); err != nil {
					return fmt.Errorf("writing CPU profile: %w", err)
				}
				continue
			}
			if prof != nil || *profileDir == "" {
				continue
			}
			seq++
			f, err := os.Create(filepath.Join(*profileDir, fmt.Sprintf("broker-cpu-%d.pprof", seq)))
			if err != nil {
				return fmt.Errorf("creating CPU profile: %w", err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				return fmt.Errorf("starting CPU profile: %w", err)
			}
			prof = f
			fmt.Fprintf(stdout, "%s%s\n", brokerProfileStarted, f.Name())
		}
	}
}

// Brokers walbench publishes to (-broker).
const (
	// BrokerKafka is Apache Kafka (scripts/deps.sh installs it), one node,
	// as kafka-server-start.sh runs it.
	BrokerKafka = "kafka"
	// BrokerKfake is kfake, this program started again as its broker.
	BrokerKfake = "kfake"
)

// kafkaJVM are the JVM flags kafka-server-start.sh and kafka-run-class.sh
// give a broker (heap -Xmx1G -Xms1G), so that the broker is measured as
// users run it.
var kafkaJVM = []string{"-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15"}

// brokerProc is a running broker: Apache Kafka (kafka) or walbench's kfake
// child process (p, with its output line by line).
type brokerProc struct {
	addr    string
	dataDir string // kfake's; a Kafka keeps its data in a directory of its own
	kafka   *testenv.Kafka
	p       *testenv.Process
	lines   chan string
}

// startBroker starts the broker -broker names on free loopback ports with
// its data in dataDir, logging to logPath, and warms its transactions.
func (b *bench) startBroker(ctx context.Context, dataDir, profileDir, logPath string) (*brokerProc, error) {
	bp, err := b.launchBroker(ctx, dataDir, profileDir, logPath)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := warmTransactions(ctx, bp.addr); err != nil {
		bp.stop()
		return nil, err
	}
	b.logf("broker at %s: its first transactional producer id took %s", bp.addr, time.Since(t0).Round(time.Millisecond))
	if bp.kafka != nil && b.cfg.BrokerWarmUp > 0 {
		w, err := warmBroker(ctx, bp, b.cfg.BrokerWarmUp, b.cfg.Partitions)
		if err != nil {
			bp.stop()
			return nil, err
		}
		b.logf("broker at %s: warmed up with %d transactions in %s; its CPU per transaction %d µs in the first fifth of that, %d µs in the last",
			bp.addr, w.txns, b.cfg.BrokerWarmUp, w.firstMicros, w.lastMicros)
	}
	return bp, nil
}

// launchBroker starts the broker and waits until it listens.
func (b *bench) launchBroker(ctx context.Context, dataDir, profileDir, logPath string) (*brokerProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating broker log: %w", err)
	}
	if b.cfg.Broker == BrokerKafka {
		k, err := testenv.LaunchKafka(ctx, testenv.KafkaConfig{Heap: "1G", JVM: kafkaJVM, Output: logf,
			Props: map[string]string{"num.partitions": strconv.Itoa(b.cfg.Partitions)}})
		if err != nil {
			logf.Close()
			return nil, err
		}
		return &brokerProc{addr: k.Addr(), dataDir: dataDir, kafka: k}, nil
	}
	port, err := testenv.PickPort()
	if err != nil {
		logf.Close()
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	bp := &brokerProc{addr: addr, dataDir: dataDir, lines: make(chan string, 16)}
	bp.p, err = testenv.StartProcess(testenv.ProcessConfig{Name: "broker", Path: b.exe, Output: logf,
		Args: []string{brokerCommand, "-addr", addr, "-data-dir", dataDir, "-partitions", strconv.Itoa(b.cfg.Partitions), "-profile-dir", profileDir},
		OnLine: func(l string) {
			select {
			case bp.lines <- l:
			default: // nobody waits for this line
			}
		}})
	if err != nil {
		logf.Close()
		return nil, err
	}
	go func() { <-bp.p.Done(); logf.Close() }()
	if _, err := bp.waitLine(ctx, brokerListening, 30*time.Second); err != nil {
		bp.stop()
		return nil, err
	}
	return bp, nil
}

// warmTransactions initializes a producer id for a transactional id of
// walbench's own, so that the broker has created __transaction_state
// before a measured phase: Kafka creates that topic (50 partitions) at
// the first transactional producer a cluster ever sees, 0.9 s on this
// machine, which a cluster in use has long paid and a fresh broker per
// phase would otherwise charge to each transactional tool's drain.
func warmTransactions(ctx context.Context, addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("walbench-warm-up"))
	if err != nil {
		return fmt.Errorf("creating the warm-up client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("initializing a transactional producer id on the broker at %s: %w", addr, err)
	}
	return nil
}

// warmUp is what warmBroker did: its transactions, and the broker's CPU
// per transaction in the first and the last fifth of the time.
type warmUp struct {
	txns                    int64
	firstMicros, lastMicros int64
}

// warmBroker commits transactions shaped as walstream's (keyed records
// with headers on a topic of partitions partitions, and a checkpoint
// record on a compacted topic) for d, four producers at once, with a
// read_committed reader of both topics. A new JVM broker compiles the
// paths such a load takes as it first comes: on this machine the broker's
// JIT compiler spent 26 s of CPU in the first minute of walstream's 1,000
// rows a second (jstat -compiler), the broker's CPU falling from 0.98 to
// 0.46 cores over it, and a phase begun at once had Postgres and walstream
// wait for cores meanwhile, where the floor, replayed on the broker after
// it, did not. A cluster in use has long compiled them. After this
// warm-up walstream's own load still had about 10 s of compiling left,
// within its first 20 s: the live loads' warm-up (-latency-warmup) holds
// them before measuring.
func warmBroker(ctx context.Context, bp *brokerProc, d time.Duration, partitions int) (warmUp, error) {
	const topic, checkpoints, producers = "walbench.warm-up", "walbench.warm-up.checkpoints", 4
	if err := createTopics(ctx, bp.addr, partitions, topic); err != nil {
		return warmUp{}, err
	}
	if err := createCheckpointTopic(ctx, bp.addr, checkpoints); err != nil {
		return warmUp{}, err
	}
	reader, err := startPoller(bp.addr, "the warm-up's reader", []string{topic, checkpoints}, func(kgo.Fetches, int64) {})
	if err != nil {
		return warmUp{}, err
	}
	defer reader.close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var txns atomic.Int64
	errc := make(chan error, producers)
	for i := range producers {
		go func() {
			errc <- commitUntilDone(ctx, bp.addr, fmt.Sprintf("walbench-warm-up-%d", i), topic, checkpoints, &txns)
		}()
	}
	// The broker's CPU and the transactions at 0, 1/5, 4/5 and the end.
	type mark struct {
		cpu  time.Duration
		txns int64
	}
	s := newSampler()
	at := func() mark { s.sample(bp.pid()); return mark{s.get(bp.pid()).CPU, txns.Load()} }
	var marks []mark
	start := time.Now()
	for _, f := range []float64{0, 0.2, 0.8} {
		time.Sleep(time.Until(start.Add(time.Duration(f * float64(d)))))
		marks = append(marks, at())
	}
	<-ctx.Done()
	marks = append(marks, at())
	for range producers {
		if err := <-errc; err != nil {
			return warmUp{}, err
		}
	}
	per := func(a, b mark) int64 {
		if b.txns == a.txns {
			return 0
		}
		return (b.cpu - a.cpu).Microseconds() / (b.txns - a.txns)
	}
	return warmUp{txns: txns.Load(), firstMicros: per(marks[0], marks[1]), lastMicros: per(marks[2], marks[3])}, nil
}

// commitUntilDone commits transactions as txnID until ctx ends, each of
// one to three records on topic and a checkpoint record on checkpoints,
// counting them in n.
func commitUntilDone(ctx context.Context, addr, txnID, topic, checkpoints string, n *atomic.Int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(txnID), kgo.ProducerLinger(time.Minute))
	if err != nil {
		return fmt.Errorf("creating the warm-up's producer: %w", err)
	}
	defer cl.Close()
	value := stampedValue(DefaultPayloadBytes, 0)
	for i := 0; ctx.Err() == nil; i++ {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("warming the broker up: %w", err)
		}
		for j := range 1 + i%3 {
			key := []byte(fmt.Sprintf("aggregate-%d", (i+j)%64))
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: key, Value: value,
				Headers: []kgo.RecordHeader{{Key: "id", Value: key}, {Key: "eventType", Value: []byte("WarmedUp")}}}, nil)
		}
		cl.Produce(ctx, &kgo.Record{Topic: checkpoints, Key: []byte(txnID), Value: value}, nil)
		ferr := cl.Flush(ctx)
		commit := kgo.TryCommit
		if ferr != nil {
			commit = kgo.TryAbort
		}
		// The last commit gets its own time: ctx may end during it.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := cl.EndTransaction(ectx, commit)
		cancel()
		switch {
		case ferr != nil && ctx.Err() != nil:
			return nil // the time ended during the flush
		case ferr != nil:
			return fmt.Errorf("warming the broker up: producing: %w", ferr)
		case err != nil:
			return fmt.Errorf("warming the broker up: committing: %w", err)
		}
		n.Add(1)
	}
	return nil
}

// profiles reports whether the broker takes Go CPU profiles (kfake); the
// JVM broker is profiled by perf, with every other process.
func (b *brokerProc) profiles() bool { return b.kafka == nil }

// waitLine waits for an output line starting with prefix and returns the
// rest of it.
func (b *brokerProc) waitLine(ctx context.Context, prefix string, within time.Duration) (string, error) {
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		select {
		case l := <-b.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest, nil
			}
		case <-b.p.Done():
			return "", fmt.Errorf("broker exited (%v) before printing %q", b.p.Err(), prefix)
		case <-timeout.C:
			return "", fmt.Errorf("broker did not print %q within %s", prefix, within)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (b *brokerProc) pid() int {
	if b.kafka != nil {
		return b.kafka.Node(1).Pid()
	}
	return b.p.Pid()
}

// startProfile starts a CPU profile in the broker.
func (b *brokerProc) startProfile(ctx context.Context) error {
	if err := b.p.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return fmt.Errorf("signalling the broker to profile: %w", err)
	}
	_, err := b.waitLine(ctx, brokerProfileStarted, 10*time.Second)
	return err
}

// stopProfile ends the broker's CPU profile and returns its path.
func (b *brokerProc) stopProfile(ctx context.Context) (string, error) {
	if err := b.p.Cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return "", fmt.Errorf("signalling the broker to write its profile: %w", err)
	}
	return b.waitLine(ctx, brokerProfileWritten, 30*time.Second)
}

// startPhaseBroker starts a phase's broker (startBroker) with its topics
// made, or stops it again; the phase defers closeBroker(name, ...).
func (b *bench) startPhaseBroker(ctx context.Context, name, dataDir, profileDir, logPath string, topics ...string) (*brokerProc, error) {
	broker, err := b.startBroker(ctx, dataDir, profileDir, logPath)
	if err != nil {
		return nil, err
	}
	if err := createTopics(ctx, broker.addr, b.cfg.Partitions, topics...); err != nil {
		b.closeBroker(name, broker)
		return nil, err
	}
	return broker, nil
}

// seasonTopics writes each of the partitions of topics past its first
// index entry, as a topic in use has long been. Kafka preallocates a
// segment's offset and time indexes as sparse 10 MB files and maps them;
// the first entry, written once index.interval.bytes (4 KiB) of records
// follow the segment's start, faults the mapping in, and a kernel reading
// ahead far zeroes that much of each file at the fault (8 MB a file at
// read_ahead_kb 8192, where 128 is common). New topics written at one rate
// reach their first entries together: fifty streams' 150 partitions held
// the broker's request handlers for 2 s at once, every stream's p99. A
// phase seasons its topics just before its load, as a kernel's proactive
// reclaim may drop what was faulted in and left untouched a while. Each
// partition gets a record of more than 4 KiB and then a small one, in
// batches of their own: the second one's append writes the entries. Both
// carry ts_us 0, which the latency consumers take for an earlier phase's.
func seasonTopics(ctx context.Context, broker string, partitions int, topics ...string) error {
	// Uncompressed, as the record's size on the broker is what counts.
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return fmt.Errorf("creating the client that seasons topics: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, value := range [][]byte{seasonFill, []byte(`{"ts_us":0}`)} {
		var recs []*kgo.Record
		for _, t := range topics {
			for p := range int32(partitions) {
				recs = append(recs, &kgo.Record{Topic: t, Partition: p, Value: value})
			}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("seasoning topics %v: %w", topics, err)
		}
	}
	return nil
}

// seasonFill is a record of more than index.interval.bytes.
var seasonFill = []byte(`{"ts_us":0,"fill":"` + strings.Repeat("x", 4200) + `"}`)

// closeBroker stops the broker, logging a failure under name, and removes its
// data: what a phase defers once its broker has started.
func (b *bench) closeBroker(name string, bp *brokerProc) {
	if err := bp.stop(); err != nil {
		b.logf("%s: %v", name, err)
	}
	_ = os.RemoveAll(bp.dataDir)
}

// stop sends SIGTERM and waits; the broker is killed if it does not exit
// within 30s. An exit status of its own is no error: it has done its work.
func (b *brokerProc) stop() error {
	if b.kafka != nil {
		b.kafka.Close()
		return nil
	}
	err := b.p.Stop(syscall.SIGTERM, 30*time.Second)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return fmt.Errorf("stopping the broker: %w", err)
	}
	return nil
}
