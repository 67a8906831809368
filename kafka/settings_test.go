package kafka

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckBrokers(t *testing.T) {
	ok := Settings{Brokers: []string{"k", "k:9092", "10.0.0.1:19092", "[::1]:9092"}}
	if err := ok.CheckBrokers(); err != nil {
		t.Fatal(err)
	}
	for b, want := range map[string]string{"k:0": `port "0" is not from 1 to 65535`, "k:65536": `port "65536"`, "k:kafka": `port "kafka"`,
		":9092": "no host", "k:1:2": "want host:port"} {
		if err := (Settings{Brokers: []string{"k:9092", b}}).CheckBrokers(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", b, err, want)
		}
	}
}

// A cluster is named by its brokers as dialed: the host in lower case,
// Kafka's port where none is given; settings with a broker in common,
// directly or through others, reach one cluster.
func TestClusters(t *testing.T) {
	if got := (Settings{Brokers: []string{"K2", "k1:9092", "k2:9092"}}).Cluster(); got != "k1:9092,k2:9092" {
		t.Errorf("Cluster() = %q, want k1:9092,k2:9092", got)
	}
	got := Clusters([]Settings{{Brokers: []string{"k1"}}, {Brokers: []string{"k2"}}, {Brokers: []string{"k3:9093"}},
		{Brokers: []string{"K2:9092", "k1:9092"}}, {Brokers: []string{"k3"}}})
	want := []string{"k1:9092", "k1:9092", "k3:9093", "k1:9092", "k3:9092"}
	if !slices.Equal(got, want) {
		t.Errorf("Clusters = %v, want %v", got, want)
	}
}
