package kafka

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// transactionLog is Kafka's transaction state topic: the partition a
// transactional id hashes to holds its transactions, and the leader of that
// partition is its transaction coordinator.
const transactionLog = "__transaction_state"

// TransactionLogPartition is the partition of the transaction state topic,
// of n partitions, that holds transactionalID's transactions, as Kafka
// picks it: Utils.abs(transactionalID.hashCode()) % n.
func TransactionLogPartition(transactionalID string, n int) int32 {
	var h int32
	for _, c := range utf16Units(transactionalID) {
		h = 31*h + int32(c)
	}
	switch {
	case h == math.MinInt32:
		h = 0 // Kafka's Utils.abs
	case h < 0:
		h = -h
	}
	return h % int32(n)
}

// utf16Units are s's UTF-16 code units, which Java's String.hashCode sums.
func utf16Units(s string) []uint16 {
	var units []uint16
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			units = append(units, uint16(0xD800+(r>>10)), uint16(0xDC00+(r&0x3FF)))
			continue
		}
		units = append(units, uint16(r))
	}
	return units
}

// Writability tells which partitions walstream writes cannot take writes
// now: those without a leader, and those with fewer in-sync replicas than
// min.insync.replicas, whose acks=all writes Kafka refuses with
// NOT_ENOUGH_REPLICAS. Transactions write to the outbox topics, the
// checkpoint topic and the transaction state partition of walstream's
// transactional id; when any of them cannot be written, no transaction
// commits. It keeps each topic's min.insync.replicas for a while: configs
// change rarely, metadata often.
type Writability struct {
	cl              *kgo.Client
	transactionalID string

	mu     sync.Mutex
	minISR map[string]minISR
}

type minISR struct {
	n  int // -1: unknown (the configs could not be read)
	at time.Time
}

// minISRFor is how long a topic's min.insync.replicas is kept.
const minISRFor = time.Minute

// NewWritability watches the partitions the transactions of
// transactionalID write to, with cl.
func NewWritability(cl *kgo.Client, transactionalID string) *Writability {
	return &Writability{cl: cl, transactionalID: transactionalID, minISR: make(map[string]minISR)}
}

// Check returns, in words, each partition of topics (and the transaction
// state partition of the transactional id) that cannot take writes now;
// none when all can.
func (w *Writability) Check(ctx context.Context, topics ...string) ([]string, error) {
	resp, err := w.metadata(ctx, topics...)
	if err != nil {
		return nil, err
	}
	return w.judge(ctx, resp, w.transactionalID), nil
}

// metadata reads the metadata of topics and of the transaction state
// topic.
func (w *Writability) metadata(ctx context.Context, topics ...string) (*kmsg.MetadataResponse, error) {
	topics = append(slices.Clip(topics), transactionLog)
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, w.cl)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %s: %w", strings.Join(topics, ", "), err)
	}
	return resp, nil
}

// judge is unwritable with the topics' min.insync.replicas read as needed.
func (w *Writability) judge(ctx context.Context, resp *kmsg.MetadataResponse, transactionalID string) []string {
	return unwritable(resp, transactionalID, func(topic string) int { return w.minInSync(ctx, topic) })
}

// unwritable reads a metadata response: the partitions without a leader
// among the live brokers, and those whose in-sync replicas shrank below
// the topic's min.insync.replicas (minISR, -1 when unknown). Of the
// transaction state topic only the partition of transactionalID counts.
// Topics that do not exist, or that the client may not describe, are left
// out: they are no evidence of a broker problem. A min.insync.replicas
// above the replication factor is a setting walstream warns about at
// start (Kafka 4 with eligible leader replicas caps it), not a shrink.
func unwritable(resp *kmsg.MetadataResponse, transactionalID string, minISR func(topic string) int) []string {
	live := make(map[int32]bool, len(resp.Brokers))
	for _, b := range resp.Brokers {
		live[b.NodeID] = true
	}
	var problems []string
	for _, t := range resp.Topics {
		if t.Topic == nil || kerr.ErrorForCode(t.ErrorCode) != nil {
			continue
		}
		parts := slices.Clone(t.Partitions)
		name := *t.Topic
		if name == transactionLog {
			n := TransactionLogPartition(transactionalID, len(parts))
			parts = slices.DeleteFunc(parts, func(p kmsg.MetadataResponseTopicPartition) bool { return p.Partition != n })
		}
		slices.SortFunc(parts, func(a, b kmsg.MetadataResponseTopicPartition) int { return int(a.Partition - b.Partition) })
		min := 0 // not asked yet
		for _, p := range parts {
			var why string
			switch {
			case p.Leader < 0 || !live[p.Leader]:
				why = "no leader"
			case len(p.ISR) < len(p.Replicas):
				if min == 0 {
					min = minISR(name)
				}
				if len(p.ISR) < min {
					why = fmt.Sprintf("%d of %d replicas in sync, fewer than min.insync.replicas %d: Kafka refuses writes (NOT_ENOUGH_REPLICAS)", len(p.ISR), len(p.Replicas), min)
				}
			}
			if why == "" {
				continue
			}
			where := fmt.Sprintf("%s-%d", name, p.Partition)
			if name == transactionLog {
				where += fmt.Sprintf(" (the transaction coordinator's partition for transactional id %s)", transactionalID)
			}
			problems = append(problems, where+": "+why)
		}
	}
	return problems
}

// minInSync is the topic's min.insync.replicas, -1 when it cannot be read.
func (w *Writability) minInSync(ctx context.Context, topic string) int {
	w.mu.Lock()
	m, ok := w.minISR[topic]
	w.mu.Unlock()
	if ok && time.Since(m.at) < minISRFor {
		return m.n
	}
	m = minISR{n: -1, at: time.Now()}
	rcs, err := kadm.NewClient(w.cl).DescribeTopicConfigs(ctx, topic)
	var rc kadm.ResourceConfig
	if err == nil {
		rc, err = rcs.On(topic, nil)
	}
	if err == nil && rc.Err == nil {
		for _, c := range rc.Configs {
			if c.Key == "min.insync.replicas" {
				if n, err := strconv.Atoi(c.MaybeValue()); err == nil {
					m.n = n
				}
			}
		}
	}
	w.mu.Lock()
	w.minISR[topic] = m
	w.mu.Unlock()
	return m.n
}

// Diagnose adds to err, a Kafka operation that failed or timed out, the
// partitions among topics that cannot take writes, when any: Kafka's
// retries hide the reason (franz-go retries NOT_ENOUGH_REPLICAS until the
// commit times out).
func (w *Writability) Diagnose(ctx context.Context, err error, topics ...string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	problems, derr := w.Check(ctx, topics...)
	if derr != nil || len(problems) == 0 {
		return err
	}
	return &UnwritableError{Partitions: problems, Err: err}
}

// UnwritableError is a Kafka operation that failed while partitions it
// needs could not take writes.
type UnwritableError struct {
	Partitions []string
	Err        error
}

func (e *UnwritableError) Error() string {
	return fmt.Sprintf("%v; Kafka cannot take walstream's writes: %s", e.Err, strings.Join(e.Partitions, "; "))
}

func (e *UnwritableError) Unwrap() error { return e.Err }

// NotEnoughReplicas reports whether the partitions lack in-sync replicas
// rather than a leader.
func (e *UnwritableError) NotEnoughReplicas() bool {
	for _, p := range e.Partitions {
		if strings.Contains(p, "NOT_ENOUGH_REPLICAS") {
			return true
		}
	}
	return false
}

// Unwritable lists, in words, the partitions of topics, and the transaction
// state partition of transactionalID, that cannot take writes now, with a
// client of its own: for an operator's status, while walstream runs.
func Unwritable(ctx context.Context, conn Settings, transactionalID string, topics ...string) ([]string, error) {
	cl, err := kgo.NewClient(conn.Opts()...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	return NewWritability(cl, transactionalID).Check(ctx, topics...)
}
