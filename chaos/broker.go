package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/walstream/walstream/internal/testenv"
)

// The brokers the suite runs on (-chaos.broker).
const (
	brokerKafka     = "kafka"
	brokerDevbroker = "devbroker"
)

// abortCleanup is how often Kafka looks for transactions past their
// timeout in the suite: transaction.abort.timed.out.transaction.cleanup.interval.ms,
// lowered from 10 s so that a paused walstream's transaction is aborted
// within a second of its timeout.
const abortCleanup = time.Second

// brokerRig is the broker under test and how clients reach it: walstream
// through one toxiproxy per broker, which each broker advertises, and the
// harness's own clients directly.
type brokerRig struct {
	testenv.Broker
	kafka  *testenv.Kafka       // nil for the devbroker
	direct string               // the brokers' own addresses, comma-separated
	remap  map[string]string    // each proxy's address to its broker's
	adm    *kadm.Client         // direct, for the cluster's state
	cl     *kgo.Client          // adm's client
	out    io.WriteCloser       // the brokers' log
	topics []string             // the outbox topics and the checkpoint topic
	nodes  []*testenv.KafkaNode // the brokers, node 1 first; nil for the devbroker
}

// startBroker starts the broker of kind, with nodes brokers when it is
// Kafka (3 adds two controller-only nodes, so that the quorum outlives two
// brokers down), behind proxies added to px, for the streams' topics. Its
// log goes to dir.
func startBroker(t testing.TB, ctx context.Context, kind string, nodes int, dir string, px *proxies, streams []*stream) (*brokerRig, error) {
	out, err := os.Create(filepath.Join(dir, kind+".log"))
	if err != nil {
		return nil, err
	}
	r := &brokerRig{out: out, remap: make(map[string]string), topics: append(outboxTopics(streams), checkpointTopic)}
	switch kind {
	case brokerDevbroker:
		bin := testenv.Binary(t, testenv.Build{Pkg: "cmd/devbroker"})
		port, err := testenv.PickPort()
		if err != nil {
			return nil, err
		}
		r.direct = fmt.Sprintf("127.0.0.1:%d", port)
		listen, err := px.addKafka("127.0.0.1:0", r.direct)
		if err != nil {
			return nil, err
		}
		r.remap[listen] = r.direct
		br := &testenv.Devbroker{Bin: bin, DataDir: filepath.Join(dir, "devbroker"), Listen: r.direct, Advertise: listen, Output: out}
		if err := br.Start(); err != nil {
			return nil, fmt.Errorf("the devbroker cannot start: %w", err)
		}
		r.Broker = br
	case brokerKafka:
		if nodes != 1 && nodes != 3 {
			return nil, fmt.Errorf("-chaos.kafka-nodes=%d: 1 or 3", nodes)
		}
		// The proxies' addresses are known before the brokers start, so
		// that each can advertise its own; the proxies start after.
		listen := make([]string, nodes)
		for i := range listen {
			port, err := testenv.PickPort()
			if err != nil {
				return nil, err
			}
			listen[i] = fmt.Sprintf("127.0.0.1:%d", port)
		}
		cfg := testenv.KafkaConfig{Nodes: nodes, Output: out,
			Advertise: func(id int) string { return listen[id-1] },
			Props: map[string]string{
				"transaction.abort.timed.out.transaction.cleanup.interval.ms": fmt.Sprint(abortCleanup.Milliseconds())}}
		if nodes == 3 {
			cfg.Controllers = 2
		}
		k, err := testenv.LaunchKafka(ctx, cfg)
		if err != nil {
			return nil, err
		}
		r.Broker, r.kafka, r.direct, r.nodes = k, k, k.Addr(), k.Nodes()
		for i, n := range k.Nodes() {
			if _, err := px.addKafka(listen[i], n.Addr()); err != nil {
				k.Close()
				return nil, err
			}
			r.remap[listen[i]] = n.Addr()
		}
	default:
		return nil, fmt.Errorf("-chaos.broker=%s: kafka or devbroker", kind)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(r.direct, ",")...), kgo.Dialer(r.dialer()))
	if err != nil {
		r.close()
		return nil, fmt.Errorf("creating the harness's Kafka client: %w", err)
	}
	r.cl, r.adm = cl, kadm.NewClient(cl)
	return r, nil
}

// dialer connects to a broker directly when it is told a proxy's address:
// the brokers advertise their proxies.
func (r *brokerRig) dialer() func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		if direct, ok := r.remap[host]; ok {
			host = direct
		}
		var d net.Dialer
		return d.DialContext(ctx, network, host)
	}
}

func (r *brokerRig) close() {
	if r.cl != nil {
		r.cl.Close()
	}
	if r.Broker != nil {
		r.Stop(syscall.SIGTERM)
		r.Close()
	}
	r.out.Close()
}

// coordinator is the broker that coordinates the transactions of txnID
// (FindCoordinator), and the partition of the transaction state topic
// that holds them, whose leader it is.
func (r *brokerRig) coordinator(ctx context.Context, txnID string) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 1 // transaction
	req.CoordinatorKey, req.CoordinatorKeys = txnID, []string{txnID}
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return -1, fmt.Errorf("finding the transaction coordinator of %s: %w", txnID, err)
	}
	node, code := resp.NodeID, resp.ErrorCode // FindCoordinator before v4
	if len(resp.Coordinators) > 0 {
		node, code = resp.Coordinators[0].NodeID, resp.Coordinators[0].ErrorCode
	}
	if err := kerr.ErrorForCode(code); err != nil {
		return -1, fmt.Errorf("finding the transaction coordinator of %s: %w", txnID, err)
	}
	return node, nil
}

// leader is the leader of a partition, from the metadata.
func (r *brokerRig) leader(ctx context.Context, topic string, partition int32) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := r.adm.Metadata(ctx, topic)
	if err != nil {
		return -1, fmt.Errorf("reading the metadata of %s: %w", topic, err)
	}
	p, ok := md.Topics[topic].Partitions[partition]
	if !ok || p.Leader < 0 {
		return -1, fmt.Errorf("%s-%d has no leader", topic, partition)
	}
	return p.Leader, nil
}

// activeController is the leader of the KRaft quorum (DescribeQuorum).
func (r *brokerRig) activeController(ctx context.Context) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = []kmsg.DescribeQuorumRequestTopicPartition{kmsg.NewDescribeQuorumRequestTopicPartition()}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil && (len(resp.Topics) == 0 || len(resp.Topics[0].Partitions) == 0) {
		err = errors.New("no quorum in the answer")
	}
	if err != nil {
		return -1, fmt.Errorf("describing the KRaft quorum: %w", err)
	}
	return resp.Topics[0].Partitions[0].LeaderID, nil
}

// healthy reports, in words, what keeps the cluster from full health for
// walstream: a broker not registered, or a partition of its topics (and
// the transaction state topic) without a leader or with a replica out of
// sync. Empty when healthy.
func (r *brokerRig) healthy(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	topics := append(slices.Clip(r.topics), "__transaction_state")
	md, err := r.adm.Metadata(ctx, topics...)
	if err != nil {
		return err.Error()
	}
	if len(md.Brokers) < len(r.nodes) {
		return fmt.Sprintf("%d of %d brokers registered", len(md.Brokers), len(r.nodes))
	}
	for _, topic := range topics {
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil {
			continue // not created yet
		}
		for _, p := range td.Partitions.Sorted() {
			if p.Leader < 0 || len(p.ISR) < len(p.Replicas) {
				return fmt.Sprintf("%s-%d: leader %d, in sync %v of %v", topic, p.Partition, p.Leader, p.ISR, p.Replicas)
			}
		}
	}
	return ""
}

// waitHealthy waits up to d for full health and returns what was still
// missing.
func (r *brokerRig) waitHealthy(ctx context.Context, d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		why := r.healthy(ctx)
		if why == "" || time.Now().After(deadline) || ctx.Err() != nil {
			return why
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// node is the Kafka node with id, a broker or a controller.
func (r *brokerRig) node(id int32) *testenv.KafkaNode { return r.kafka.Node(int(id)) }

// brokerIDs are the brokers' node ids.
func (r *brokerRig) brokerIDs() []int32 {
	var ids []int32
	for _, n := range r.nodes {
		ids = append(ids, int32(n.ID))
	}
	return slices.Clip(ids)
}
