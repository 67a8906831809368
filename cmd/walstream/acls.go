package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/walstream/walstream/config"
)

// printACLs writes the ACLs of principal as a table and as kafka-acls.sh
// commands.
func printACLs(w io.Writer, c *config.Config, principal string) {
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
