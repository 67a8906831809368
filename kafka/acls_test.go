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
		SkipEvent: decode.Ref{CommitLSN: 0x10, Ordinal: 1}, SkipTopic: "walstream.skipped",
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
	// but the checkpoint topic's check.
	cfg = Access{TransactionalID: "t", CheckpointTopic: "cp", Outboxes: []*decode.Outbox{orders, messages}}
	var names []string
	for _, a := range ACLs(cfg) {
		if a.Resource == "topic" && a.Name != "cp" {
			names = append(names, a.Pattern+" "+a.Name)
		}
		if a.Name != "cp" && slices.Contains(a.Ops, "DescribeConfigs") {
			t.Errorf("DescribeConfigs on %s without topic configs", a.Name)
		}
	}
	if want := []string{"prefixed orders.", "prefixed outbox.event."}; !slices.Equal(names, want) {
		t.Errorf("topics granted: %v, want %v", names, want)
	}
}
