package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// kafkaTxnCommand is the hidden subcommand that commits Kafka transactions
// with franz-go alone, as walstream's producer does (its records, one
// checkpoint record, Flush, EndTransaction), at a given rate and size, and
// prints its own CPU time per transaction. It is the floor under
// walstream's CPU at a low rate: what the Kafka client costs for the same
// transactions on the same machine and broker, with no Postgres and no
// decoding. With -client minimal it commits them with minimalClient, the
// floor under any Kafka client's. With -plan it commits the transactions
// of a plan instead, for Kafka's latency floor (floor.go).
const kafkaTxnCommand = "kafka-txn"

// Topics of kafka-txn, apart from walstream's.
const (
	floorTopic           = "walbench.floor"
	floorCheckpointTopic = "walbench.floor.checkpoints"
)

func runKafkaTxn(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("walbench "+kafkaTxnCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	broker := fs.String("broker", "", "broker address")
	rate := fs.Float64("rate", 100, "transactions a second")
	records := fs.Int("records", 1, "records per transaction, besides the checkpoint record")
	size := fs.Int("value-bytes", 430, "bytes of each record's value")
	dur := fs.Duration("for", 10*time.Second, "measured time")
	client := fs.String("client", "franz-go", "franz-go, as walstream; or minimal, the least a transaction costs (see minimalClient)")
	plans := fs.String("plan", "", "instead of committing at -rate, commit the transactions of this plan (JSON, written by walbench: see floor.go), or of several, comma-separated, each by a client of its own at once, and print for each plan, a line each, when each transaction was sent and committed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *plans != "" {
		return replayPlans(ctx, *client, *broker, commaList(*plans), stdout)
	}
	if *rate <= 0 || *records < 1 {
		return fmt.Errorf("-rate %v and -records %d must be positive", *rate, *records)
	}
	commit, closeClient, err := newCommitter(ctx, *client, *broker, "walbench-kafka-txn", []string{floorTopic, floorCheckpointTopic})
	if err != nil {
		return err
	}
	defer closeClient()

	value := bytes.Repeat([]byte{'x'}, *size)
	seq := 0
	recs := make([]txnRecord, *records+1)
	next := func() error {
		for i := range *records {
			seq++
			recs[i] = txnRecord{floorTopic, strconv.AppendInt(nil, int64(seq), 10), value}
		}
		recs[*records] = txnRecord{floorCheckpointTopic, []byte("floor"), value[:min(len(value), 200)]}
		_, err := commit(recs)
		return err
	}
	// Warm up: the producer id, the coordinator and the partitions' leaders.
	for range 20 {
		if err := next(); err != nil {
			return fmt.Errorf("committing a warm-up transaction: %w", err)
		}
	}
	// The same utime + stime from /proc as every other client's figure.
	before, err := readProc(os.Getpid())
	if err != nil {
		return err
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / *rate))
	defer tick.Stop()
	n := 0
	for end := time.Now().Add(*dur); time.Now().Before(end); n++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := next(); err != nil {
			return fmt.Errorf("committing transaction %d: %w", n, err)
		}
	}
	after, err := readProc(os.Getpid())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "transactions %d cpu_ns %d\n", n, (after.CPU - before.CPU).Nanoseconds())
	return err
}

// newCommitter is a transactional producer of kind client on broker, with
// transactional id txnID, for records of topics; and what closes it. The
// minimal client holds the goroutine's thread until closed.
func newCommitter(ctx context.Context, client, broker, txnID string, topics []string) (committer, func(), error) {
	switch client {
	case "franz-go":
		// Keys placed as walstream's producer places them: Kafka's murmur2.
		cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.TransactionalID(txnID), kgo.AllowAutoTopicCreation(),
			kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
		if err != nil {
			return nil, nil, fmt.Errorf("creating the transactional client: %w", err)
		}
		return franzGoCommitter(ctx, cl), cl.Close, nil
	case "minimal":
		mc, err := dialMinimal(ctx, broker, txnID+"-minimal", topics...)
		if err != nil {
			return nil, nil, fmt.Errorf("starting the minimal client: %w", err)
		}
		return func(recs []txnRecord) (time.Time, error) { return mc.commit(ctx, recs) }, mc.Close, nil
	}
	return nil, nil, fmt.Errorf("-client %q is neither franz-go nor minimal", client)
}

// replayPlans commits the transactions of the plans at paths, each with a
// client of its own (its transactional id named after the plan's topic),
// all at once, as a fleet's streams commit theirs, and prints what replay
// returns of each, a JSON line each, in the plans' order.
func replayPlans(ctx context.Context, client, broker string, paths []string, stdout io.Writer) error {
	res := make([]*floorResult, len(paths))
	g, gctx := errgroup.WithContext(ctx)
	for i, path := range paths {
		g.Go(func() error {
			js, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("reading -plan: %w", err)
			}
			var plan floorPlan
			if err := json.Unmarshal(js, &plan); err != nil {
				return fmt.Errorf("decoding -plan %s: %w", path, err)
			}
			topics := []string{plan.Topic, plan.CheckpointTopic}
			if plan.ReemitTopic != "" {
				topics = append(topics, plan.ReemitTopic)
			}
			commit, closeClient, err := newCommitter(gctx, client, broker, "walbench-latency-floor-"+plan.Topic, topics)
			if err != nil {
				return err
			}
			defer closeClient()
			if res[i], err = replay(gctx, commit, &plan); err != nil {
				return fmt.Errorf("plan %s: %w", path, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for _, r := range res {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// kafkaFloor runs kafka-txn with client (franz-go or minimal) against
// broker at rate transactions a second of records each, and returns its CPU
// time per transaction.
func (b *bench) kafkaFloor(ctx context.Context, client, broker string, rate float64, records int) (time.Duration, error) {
	// Every load of a run shares the broker; the topics of the first stay.
	if err := createTopics(ctx, broker, b.cfg.Partitions, floorTopic, floorCheckpointTopic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, b.kafkaTxnExe, kafkaTxnCommand, "-client", client, "-broker", broker,
		"-rate", strconv.FormatFloat(rate, 'f', 1, 64), "-records", strconv.Itoa(records),
		"-value-bytes", strconv.Itoa(b.cfg.PayloadBytes), "-for", "10s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("running %s -client %s: %w: %s", kafkaTxnCommand, client, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var n, ns int64
	if _, err := fmt.Sscanf(string(out), "transactions %d cpu_ns %d", &n, &ns); err != nil || n == 0 {
		return 0, fmt.Errorf("%s printed %q", kafkaTxnCommand, out)
	}
	return time.Duration(ns / n), nil
}

// txnRecord is a record of a transaction kafka-txn commits.
type txnRecord struct {
	topic      string
	key, value []byte
}

// committer commits records in one Kafka transaction and returns when it
// asked the broker to commit (EndTxn), the records written.
type committer func(records []txnRecord) (time.Time, error)

// franzGoCommitter commits with cl as walstream's producer does: the
// records, Flush, EndTransaction.
func franzGoCommitter(ctx context.Context, cl *kgo.Client) committer {
	var mu sync.Mutex
	var produceErr error
	done := func(_ *kgo.Record, err error) {
		mu.Lock()
		produceErr = cmp.Or(produceErr, err)
		mu.Unlock()
	}
	return func(records []txnRecord) (time.Time, error) {
		if err := cl.BeginTransaction(); err != nil {
			return time.Time{}, err
		}
		for _, r := range records {
			cl.Produce(ctx, &kgo.Record{Topic: r.topic, Key: r.key, Value: r.value}, done)
		}
		if err := cl.Flush(ctx); err != nil {
			return time.Time{}, err
		}
		mu.Lock()
		err := produceErr
		mu.Unlock()
		if err != nil {
			return time.Time{}, fmt.Errorf("producing: %w", err)
		}
		at := time.Now()
		return at, cl.EndTransaction(ctx, kgo.TryCommit)
	}
}
