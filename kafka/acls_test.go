package kafka

import (
	"slices"
	"strings"
	"testing"

	"github.com/walstream/walstream/decode"
)

// The ACLs of a stream cover every topic its events can go to: each
// table's topics by the fixed prefix of its route, the logical messages'
// too when their route differs, the dead-letter and skip topics, and the
// checkpoint topic; with topic configs to compare, DescribeConfigs on each
// as an optional grant.
func TestACLs(t *testing.T) {
	outbox := func(schema, table string, settings map[string]string) *decode.Outbox {
		t.Helper()
		o, err := decode.NewOutbox(schema, table, settings)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	orders := outbox("public", "orders_outbox", map[string]string{"route.topic.replacement": "orders.${routedByValue}"})
	shared := outbox("public", "outbox", nil)
	anyTopic := outbox("public", "any_outbox", map[string]string{"route.topic.replacement": "${routedByValue}"})
	messages := outbox("", "logical message walstream", nil)
	cfg := Access{TransactionalID: "walstream-orders", CheckpointTopic: "walstream.checkpoints", DeadLetterTopic: "orders.dlq",
		SkipEvent: decode.Ref{CommitLSN: 0x10, Ordinal: 1}, SkipTopic: "walstream.skipped", Group: "walstream-fleet-walstream.checkpoints",
		Outboxes:      []*decode.Outbox{orders, shared, anyTopic, messages, nil},
		TopicCreation: &TopicCreation{Default: TopicGroup{Configs: map[string]string{"retention.ms": "604800000"}}}}
	type grant struct {
		resource, pattern, name, ops string
		optional                     bool
	}
	var got []grant
	for _, a := range ACLs(cfg) {
		if a.Why == "" {
			t.Errorf("%s %s: no reason given", a.Resource, a.Name)
		}
		got = append(got, grant{a.Resource, a.Pattern, a.Name, strings.Join(a.Ops, ","), a.Optional})
	}
	want := []grant{
		{"transactional-id", "literal", "walstream-orders", "Write", false},
		{"topic", "prefixed", "orders.", "Write,Create", false},
		{"topic", "prefixed", "outbox.event.", "Write,Create", false}, // the shared route: the table's and the messages'
		{"topic", "literal", "*", "Write,Create", false},
		// orders.dlq is under the prefix orders. only by accident of its
		// name: it is listed as the literal topic it is.
		{"topic", "literal", "orders.dlq", "Write,Create", false},
		{"topic", "literal", "walstream.skipped", "Write,Create", false},
		{"topic", "literal", "walstream.checkpoints", "Read,Write,Create", false},
		{"topic", "literal", "walstream.checkpoints", "DescribeConfigs", true},
		{"group", "literal", "walstream-fleet-walstream.checkpoints", "Read", false}, // a fleet's membership
		{"topic", "prefixed", "orders.", "DescribeConfigs", true},
		{"topic", "prefixed", "outbox.event.", "DescribeConfigs", true},
		{"topic", "literal", "*", "DescribeConfigs", true},
		{"topic", "literal", "orders.dlq", "DescribeConfigs", true},
		{"topic", "literal", "walstream.skipped", "DescribeConfigs", true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ACLs:\n got %v\nwant %v", got, want)
	}

	// The logical messages' own route, when no table shares it, is
	// granted too; without topic configs nothing asks for DescribeConfigs
	// but the checkpoint topic's check; without a fleet's group, no group.
	cfg = Access{TransactionalID: "t", CheckpointTopic: "cp", Outboxes: []*decode.Outbox{orders, messages}}
	var names []string
	for _, a := range ACLs(cfg) {
		if a.Resource == "topic" && a.Name != "cp" {
			names = append(names, a.Pattern+" "+a.Name)
		}
		if a.Name != "cp" && slices.Contains(a.Ops, "DescribeConfigs") {
			t.Errorf("DescribeConfigs on %s without topic configs", a.Name)
		}
		if a.Resource == "group" {
			t.Errorf("group %s granted without a fleet", a.Name)
		}
	}
	if want := []string{"prefixed orders.", "prefixed outbox.event."}; !slices.Equal(names, want) {
		t.Errorf("topics granted: %v, want %v", names, want)
	}
}

// iamRequires is the "Required actions" column of AWS's table of MSK IAM
// actions (Amazon MSK developer guide, Semantics of IAM authorization
// policy actions and resources): a policy that allows an action must allow
// these too.
var iamRequires = map[string][]string{
	"DescribeCluster":                     {"Connect"},
	"AlterCluster":                        {"Connect", "DescribeCluster"},
	"DescribeClusterDynamicConfiguration": {"Connect"},
	"AlterClusterDynamicConfiguration":    {"Connect", "DescribeClusterDynamicConfiguration"},
	"WriteDataIdempotently":               {"Connect", "WriteData"},
	"CreateTopic":                         {"Connect"},
	"DescribeTopic":                       {"Connect"},
	"AlterTopic":                          {"Connect", "DescribeTopic"},
	"DeleteTopic":                         {"Connect", "DescribeTopic"},
	"DescribeTopicDynamicConfiguration":   {"Connect"},
	"AlterTopicDynamicConfiguration":      {"Connect", "DescribeTopicDynamicConfiguration"},
	"ReadData":                            {"Connect", "DescribeTopic"}, // and AlterGroup for a consumer in a group
	"WriteData":                           {"Connect", "DescribeTopic"},
	"DescribeGroup":                       {"Connect"},
	"AlterGroup":                          {"Connect", "DescribeGroup"},
	"DeleteGroup":                         {"Connect", "DescribeGroup"},
	"DescribeTransactionalId":             {"Connect"},
	"AlterTransactionalId":                {"Connect", "DescribeTransactionalId", "WriteData"},
}

// TestIAMPolicy: the MSK IAM policy allows, on each resource, the actions
// of every operation the ACLs grant there (a fleet's group's included),
// with the actions AWS requires beside each; an operation without a known
// action fails instead of leaving a gap.
func TestIAMPolicy(t *testing.T) {
	o, err := decode.NewOutbox("public", "outbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	acls := ACLs(Access{TransactionalID: "walstream-orders", CheckpointTopic: "walstream.checkpoints", DeadLetterTopic: "walstream.dlq",
		Outboxes: []*decode.Outbox{o}, TopicCreation: &TopicCreation{Default: TopicGroup{Configs: map[string]string{"retention.ms": "1"}}},
		Group: "walstream-fleet"})
	policy, err := IAMPolicy(acls)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{} // action on resource ARN
	var all []string
	for _, s := range policy.Statement {
		for _, a := range s.Action {
			act, ok := strings.CutPrefix(a, "kafka-cluster:")
			if !ok {
				t.Errorf("action %s is not a kafka-cluster action", a)
			}
			all = append(all, act)
			for _, r := range s.Resource {
				allowed[act+" "+r] = true
			}
		}
	}
	arn := func(a ACL) string {
		name := a.Name
		if a.Pattern == "prefixed" {
			name += "*"
		}
		return "arn:aws:kafka:REGION:ACCOUNT:" + a.Resource + "/CLUSTER/CLUSTER-UUID/" + name
	}
	// What each operation walstream's ACLs grant is, in IAM's terms.
	want := map[string]string{"topic Write": "WriteData", "topic Read": "ReadData", "topic Create": "CreateTopic",
		"topic DescribeConfigs": "DescribeTopicDynamicConfiguration", "transactional-id Write": "AlterTransactionalId",
		"group Read": "AlterGroup", "group Describe": "DescribeGroup"}
	for _, a := range acls {
		for _, op := range a.Ops {
			act, ok := want[a.Resource+" "+op]
			if !ok {
				t.Errorf("%s on %s %s: no expectation; add its MSK IAM action here", op, a.Resource, a.Name)
				continue
			}
			if !allowed[act+" "+arn(a)] {
				t.Errorf("%s on %s %s: the policy does not allow %s on %s", op, a.Resource, a.Name, act, arn(a))
			}
		}
	}
	for _, act := range all {
		for _, req := range iamRequires[act] {
			if !slices.Contains(all, req) {
				t.Errorf("the policy allows %s without %s, which AWS requires beside it", act, req)
			}
		}
	}
	if !allowed["Connect arn:aws:kafka:REGION:ACCOUNT:cluster/CLUSTER/CLUSTER-UUID"] {
		t.Error("the policy does not allow connecting to the cluster")
	}
	if _, err := IAMPolicy([]ACL{{Resource: "topic", Name: "x", Ops: []string{"Frobnicate"}}}); err == nil {
		t.Error("an operation without an IAM action: no error")
	}
}
