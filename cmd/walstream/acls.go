package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/kafka"
)

// printACLs writes the ACLs of principal as a table, as kafka-acls.sh
// commands, as a Strimzi KafkaUser and as an Amazon MSK IAM policy, each
// form made from the same kafka.ACLs.
func printACLs(w io.Writer, c *config.Config, principal string) error {
	acls := c.KafkaACLs()
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
	fmt.Fprintf(w, "\n# The same ACLs as a Strimzi KafkaUser (set its strimzi.io/cluster label; authentication: %s):\n---\n", strimziAuth(c))
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(kafkaUser(principal, c, acls)); err != nil {
		return err
	}
	fmt.Fprint(w, "---\n\n# The same as an Amazon MSK IAM policy, for the role walstream's pods assume with --kafka-sasl-mechanism AWS_MSK_IAM"+
		" (replace REGION, ACCOUNT, CLUSTER and CLUSTER-UUID with the cluster ARN's; see docs/kafka.md, ACLs):\n")
	policy, err := kafka.IAMPolicy(acls)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(policy, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// strimziUser is a Strimzi KafkaUser (kafka.strimzi.io/v1beta2), the
// fields walstream fills.
type strimziUser struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Authentication struct {
			Type string `yaml:"type"`
		} `yaml:"authentication"`
		Authorization struct {
			Type string       `yaml:"type"`
			ACLs []strimziACL `yaml:"acls"`
		} `yaml:"authorization"`
	} `yaml:"spec"`
}

type strimziACL struct {
	Resource struct {
		Type        string `yaml:"type"`
		Name        string `yaml:"name,omitempty"`
		PatternType string `yaml:"patternType,omitempty"`
	} `yaml:"resource"`
	Operations []string `yaml:"operations"`
	Host       string   `yaml:"host"`
}

// strimziTypes are Strimzi's names of kafka-acls.sh's resource types.
var strimziTypes = map[string]string{"topic": "topic", "group": "group", "cluster": "cluster", "transactional-id": "transactionalId"}

// kafkaUser is the KafkaUser of principal (User:<name>) with acls, the
// optional ones too: simple authorization, which the operator turns into
// the same Kafka ACLs.
func kafkaUser(principal string, c *config.Config, acls []kafka.ACL) strimziUser {
	var u strimziUser
	u.APIVersion, u.Kind = "kafka.strimzi.io/v1beta2", "KafkaUser"
	// A tls user's principal is User:CN=<name>.
	u.Metadata.Name = strings.TrimPrefix(strings.TrimPrefix(principal, "User:"), "CN=")
	u.Metadata.Labels = map[string]string{"strimzi.io/cluster": "my-cluster"}
	u.Spec.Authentication.Type = strimziAuth(c)
	u.Spec.Authorization.Type = "simple"
	for _, a := range acls {
		var s strimziACL
		s.Resource.Type = cmp.Or(strimziTypes[a.Resource], a.Resource)
		if a.Resource != "cluster" {
			s.Resource.Name, s.Resource.PatternType = a.Name, "literal"
			if a.Pattern == "prefixed" {
				s.Resource.PatternType = "prefix"
			}
		}
		s.Operations, s.Host = a.Ops, "*"
		u.Spec.Authorization.ACLs = append(u.Spec.Authorization.ACLs, s)
	}
	return u
}

// strimziAuth is the KafkaUser's authentication: tls for a client
// certificate without SASL, else scram-sha-512, the one SCRAM Strimzi
// makes users for.
func strimziAuth(c *config.Config) string {
	if c.KafkaTLSCertFile != "" && c.KafkaSASLMechanism == "" {
		return "tls"
	}
	return "scram-sha-512"
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
