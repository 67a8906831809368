package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// acl is one Kafka ACL walstream's principal needs: operations allowed on
// one resource. Optional ones only let walstream check settings: without
// them it warns and goes on.
type acl struct {
	Resource string // topic, transactional-id, cluster
	Pattern  string // literal or prefixed
	Name     string
	Ops      []string
	Optional bool
	Why      string
}

// kafkaACLs are the least-privilege ACLs of the stream cfg describes. Kafka
// implies Describe from Read and Write, and since 3.0 a transactional
// producer needs no IdempotentWrite on the cluster, so neither is listed.
func (c *Config) kafkaACLs() []acl {
	create := func(ops ...string) []string {
		// Without --topic-creation the broker's auto-creation makes a
		// topic for a client only if it may Create it.
		return append(ops, "Create")
	}
	acls := []acl{{Resource: "transactional-id", Pattern: "literal", Name: c.TransactionalID, Ops: []string{"Write"},
		Why: "the transactional producer: one Kafka transaction per batch of events and its checkpoint"}}
	seen := map[string]bool{}
	for _, o := range c.Outboxes {
		prefix, _, _ := strings.Cut(o.TopicReplacement, "$")
		if seen[prefix] {
			continue
		}
		seen[prefix] = true
		a := acl{Resource: "topic", Pattern: "prefixed", Name: prefix, Ops: create("Write"),
			Why: fmt.Sprintf("the outbox topics of %s (%s); Create makes the missing ones", o.Name(), o.TopicReplacement)}
		if prefix == "" {
			a.Pattern, a.Name = "literal", "*"
			a.Why = fmt.Sprintf("the outbox topics of %s, whose names (%s) have no fixed prefix: every topic", o.Name(), o.TopicReplacement)
		}
		acls = append(acls, a)
	}
	dlq := []string{c.DeadLetterTopic}
	if !c.SkipEvent.IsZero() {
		dlq = append(dlq, c.SkipTopic)
	}
	for _, topic := range dlq {
		if topic == "" || seen[topic] {
			continue
		}
		seen[topic] = true
		acls = append(acls, acl{Resource: "topic", Pattern: "literal", Name: topic, Ops: create("Write"), Why: "the dead-letter topic"})
	}
	acls = append(acls,
		acl{Resource: "topic", Pattern: "literal", Name: c.CheckpointTopic, Ops: []string{"Read", "Write", "Create"},
			Why: "checkpoints: read at each start, written in every transaction; created when missing"},
		acl{Resource: "topic", Pattern: "literal", Name: c.CheckpointTopic, Ops: []string{"DescribeConfigs"}, Optional: true,
			Why: "checking the checkpoint topic's cleanup.policy and min.insync.replicas (without it walstream warns that it cannot)"})
	if c.TopicCreation.SetsConfigs() {
		for _, a := range acls {
			if a.Resource == "topic" && a.Name != c.CheckpointTopic {
				acls = append(acls, acl{Resource: "topic", Pattern: a.Pattern, Name: a.Name, Ops: []string{"DescribeConfigs"}, Optional: true,
					Why: "comparing existing topics with --topic-creation's configs (without it walstream warns that it cannot)"})
			}
		}
	}
	return acls
}

// printACLs writes the ACLs of principal as a table and as kafka-acls.sh
// commands.
func printACLs(w io.Writer, c *Config, principal string) {
	acls := c.kafkaACLs()
	fmt.Fprintf(w, "# Kafka ACLs for %s, stream %s: the least it needs (Kafka 3.0 and later; before 3.0, add IdempotentWrite on the cluster).\n\n", principal, c.Stream)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tPATTERN\tNAME\tOPERATIONS\tNEEDED\tWHY")
	for _, a := range acls {
		need := "yes"
		if a.Optional {
			need = "optional"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Resource, a.Pattern, a.Name, strings.Join(a.Ops, ","), need, a.Why)
	}
	tw.Flush()
	brokers := strings.Join(c.Kafka.Brokers, ",")
	if brokers == "" {
		brokers = "BROKER:9092"
	}
	fmt.Fprintln(w)
	for _, a := range acls {
		if a.Optional {
			fmt.Fprint(w, "# optional: ")
		}
		fmt.Fprintf(w, "kafka-acls.sh --bootstrap-server %s --add --allow-principal %s", brokers, shellQuote(principal))
		for _, op := range a.Ops {
			fmt.Fprintf(w, " --operation %s", op)
		}
		fmt.Fprintf(w, " --%s %s", a.Resource, shellQuote(a.Name))
		if a.Pattern != "literal" {
			fmt.Fprintf(w, " --resource-pattern-type %s", a.Pattern)
		}
		fmt.Fprintln(w)
	}
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe
// characters.
func shellQuote(s string) string {
	if s != "" && !slices.ContainsFunc([]rune(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@,", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
