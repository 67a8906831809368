package kafka

import (
	"fmt"
	"strings"

	"github.com/walstream/walstream/decode"
)

// ACL is one Kafka ACL a producer's principal needs: operations allowed on
// one resource. An optional one only lets the producer check settings:
// without it, it warns and goes on.
type ACL struct {
	Resource string // topic, transactional-id, cluster
	Pattern  string // literal or prefixed
	Name     string
	Ops      []string
	Optional bool
	Why      string
}

// Access is what a stream's producer writes and reads in Kafka, from which
// its ACLs follow.
type Access struct {
	TransactionalID string
	CheckpointTopic string
	// Outboxes are the outbox tables and the logical messages, whose
	// routes name the topics their events go to.
	Outboxes []*decode.Outbox
	// DeadLetterTopic, when set, receives the events that cannot be
	// published; SkipTopic the one event SkipEvent names, when set.
	DeadLetterTopic string
	SkipEvent       decode.Ref
	SkipTopic       string
	// TopicCreation, when set, creates missing topics and compares
	// existing ones with its configs.
	TopicCreation *TopicCreation
}

// ACLs are the least-privilege ACLs of a producer of cfg. Kafka implies
// Describe from Read and Write, and since 3.0 a transactional producer
// needs no IdempotentWrite on the cluster, so neither is listed.
func ACLs(cfg Access) []ACL {
	create := func(ops ...string) []string {
		// Without TopicCreation the broker's auto-creation makes a topic
		// for a client only if it may Create it.
		return append(ops, "Create")
	}
	acls := []ACL{{Resource: "transactional-id", Pattern: "literal", Name: cfg.TransactionalID, Ops: []string{"Write"},
		Why: "the transactional producer: one Kafka transaction per batch of events and its checkpoint"}}
	seen := map[string]bool{}
	for _, o := range cfg.Outboxes {
		if o == nil {
			continue
		}
		prefix, _, _ := strings.Cut(o.TopicReplacement, "$")
		if seen[prefix] {
			continue
		}
		seen[prefix] = true
		a := ACL{Resource: "topic", Pattern: "prefixed", Name: prefix, Ops: create("Write"),
			Why: fmt.Sprintf("the outbox topics of %s (%s); Create makes the missing ones", o.Name(), o.TopicReplacement)}
		if prefix == "" {
			a.Pattern, a.Name = "literal", "*"
			a.Why = fmt.Sprintf("the outbox topics of %s, whose names (%s) have no fixed prefix: every topic", o.Name(), o.TopicReplacement)
		}
		acls = append(acls, a)
	}
	dlq := []string{cfg.DeadLetterTopic}
	if !cfg.SkipEvent.IsZero() {
		dlq = append(dlq, cfg.SkipTopic)
	}
	for _, topic := range dlq {
		if topic == "" || seen[topic] {
			continue
		}
		seen[topic] = true
		acls = append(acls, ACL{Resource: "topic", Pattern: "literal", Name: topic, Ops: create("Write"), Why: "the dead-letter topic"})
	}
	acls = append(acls,
		ACL{Resource: "topic", Pattern: "literal", Name: cfg.CheckpointTopic, Ops: []string{"Read", "Write", "Create"},
			Why: "checkpoints: read at each start, written in every transaction; created when missing"},
		ACL{Resource: "topic", Pattern: "literal", Name: cfg.CheckpointTopic, Ops: []string{"DescribeConfigs"}, Optional: true,
			Why: "checking the checkpoint topic's cleanup.policy and min.insync.replicas (without it walstream warns that it cannot)"})
	if cfg.TopicCreation.SetsConfigs() {
		for _, a := range acls {
			if a.Resource == "topic" && a.Name != cfg.CheckpointTopic {
				acls = append(acls, ACL{Resource: "topic", Pattern: a.Pattern, Name: a.Name, Ops: []string{"DescribeConfigs"}, Optional: true,
					Why: "comparing existing topics with the configs topic creation sets (without it walstream warns that it cannot)"})
			}
		}
	}
	return acls
}
