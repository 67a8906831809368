package kafka

import (
	"fmt"
	"slices"
	"strings"

	"github.com/walstream/walstream/decode"
)

// ACL is one Kafka ACL a producer's principal needs: operations allowed on
// one resource. An optional one only lets the producer check settings:
// without it, it warns and goes on.
type ACL struct {
	Resource string // topic, transactional-id, group, cluster, as kafka-acls.sh names them
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
	// Group, when set, is the group of the stream's fleet, which its
	// process joins.
	Group string
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
	if cfg.Group != "" {
		acls = append(acls, ACL{Resource: "group", Pattern: "literal", Name: cfg.Group, Ops: []string{"Read"},
			Why: "the fleet's membership: joining the group, heartbeats, leaving; Read implies the Describe walstream status needs"})
	}
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

// iamActions maps a Kafka ACL, by resource type and operation, to the
// Amazon MSK IAM access control actions that allow the same, each with
// the actions AWS lists as required beside it on the same resource
// ("Semantics of IAM authorization policy actions and resources" in the
// MSK developer guide): Write on a topic is kafka-cluster:WriteData with
// DescribeTopic, Write on a transactional id AlterTransactionalId with
// DescribeTransactionalId, Read on a group AlterGroup with DescribeGroup.
// Every action needs kafka-cluster:Connect on the cluster, which
// IAMPolicy grants once.
var iamActions = map[[2]string][]string{
	{"topic", "Read"}:                {"ReadData", "DescribeTopic"},
	{"topic", "Write"}:               {"WriteData", "DescribeTopic"},
	{"topic", "Create"}:              {"CreateTopic"},
	{"topic", "Describe"}:            {"DescribeTopic"},
	{"topic", "DescribeConfigs"}:     {"DescribeTopicDynamicConfiguration"},
	{"topic", "AlterConfigs"}:        {"AlterTopicDynamicConfiguration", "DescribeTopicDynamicConfiguration"},
	{"topic", "Alter"}:               {"AlterTopic", "DescribeTopic"},
	{"topic", "Delete"}:              {"DeleteTopic", "DescribeTopic"},
	{"transactional-id", "Write"}:    {"AlterTransactionalId", "DescribeTransactionalId"},
	{"transactional-id", "Describe"}: {"DescribeTransactionalId"},
	{"group", "Read"}:                {"AlterGroup", "DescribeGroup"},
	{"group", "Describe"}:            {"DescribeGroup"},
	{"group", "Delete"}:              {"DeleteGroup", "DescribeGroup"},
	{"cluster", "Describe"}:          {"DescribeCluster"},
	{"cluster", "Alter"}:             {"AlterCluster", "DescribeCluster"},
	{"cluster", "DescribeConfigs"}:   {"DescribeClusterDynamicConfiguration"},
	{"cluster", "AlterConfigs"}:      {"AlterClusterDynamicConfiguration", "DescribeClusterDynamicConfiguration"},
	{"cluster", "IdempotentWrite"}:   {"WriteDataIdempotently"},
	{"cluster", "Create"}:            {"CreateTopic"},
}

// IAMStatement is one statement of an MSK IAM policy: actions allowed on
// resources.
type IAMStatement struct {
	Effect   string   `json:"Effect"`
	Action   []string `json:"Action"`
	Resource []string `json:"Resource"`
}

// IAMPolicyDocument is an IAM policy document.
type IAMPolicyDocument struct {
	Version   string         `json:"Version"`
	Statement []IAMStatement `json:"Statement"`
}

// IAMPolicy is the Amazon MSK IAM policy that allows what acls allow, for
// a cluster named by ARN placeholders (REGION, ACCOUNT, CLUSTER and
// CLUSTER-UUID): kafka-cluster:Connect and DescribeCluster on the cluster,
// then one statement per resource type and set of actions, prefixed
// patterns as ARNs ending in *. An operation without a known IAM action is
// an error, so that a new ACL cannot go missing from the policy.
func IAMPolicy(acls []ACL) (IAMPolicyDocument, error) {
	const cluster = "CLUSTER/CLUSTER-UUID"
	arn := func(kind, name string) string {
		return "arn:aws:kafka:REGION:ACCOUNT:" + kind + "/" + cluster + "/" + name
	}
	stmts := []IAMStatement{{Effect: "Allow", Action: []string{"kafka-cluster:Connect", "kafka-cluster:DescribeCluster"},
		Resource: []string{"arn:aws:kafka:REGION:ACCOUNT:cluster/" + cluster}}}
	byActions := map[string]int{} // statement index by resource type and actions
	for _, a := range acls {
		var actions []string
		for _, op := range a.Ops {
			acts, ok := iamActions[[2]string{a.Resource, op}]
			if !ok {
				return IAMPolicyDocument{}, fmt.Errorf("no MSK IAM action is known for %s on %s %s", op, a.Resource, a.Name)
			}
			for _, act := range acts {
				if act = "kafka-cluster:" + act; !slices.Contains(actions, act) {
					actions = append(actions, act)
				}
			}
		}
		if len(actions) == 0 {
			continue
		}
		slices.Sort(actions)
		name := a.Name
		if a.Pattern == "prefixed" {
			name += "*"
		}
		var res string
		switch a.Resource {
		case "cluster":
			res = "arn:aws:kafka:REGION:ACCOUNT:cluster/" + cluster
		case "transactional-id":
			res = arn("transactional-id", name)
		default:
			res = arn(a.Resource, name)
		}
		key := a.Resource + " " + strings.Join(actions, ",")
		if i, ok := byActions[key]; ok {
			if !slices.Contains(stmts[i].Resource, res) {
				stmts[i].Resource = append(stmts[i].Resource, res)
			}
			continue
		}
		byActions[key] = len(stmts)
		stmts = append(stmts, IAMStatement{Effect: "Allow", Action: actions, Resource: []string{res}})
	}
	return IAMPolicyDocument{Version: "2012-10-17", Statement: stmts}, nil
}
