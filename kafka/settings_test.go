package kafka

import (
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

// A cluster is named and compared by its brokers as dialed: the host in
// lower case, Kafka's port where none is given; two lists with a broker in
// common reach one cluster.
func TestCluster(t *testing.T) {
	a := Settings{Brokers: []string{"K2", "k1:9092", "k2:9092"}}
	if got := a.Cluster(); got != "k1:9092,k2:9092" {
		t.Errorf("Cluster() = %q, want k1:9092,k2:9092", got)
	}
	for _, c := range []struct {
		brokers []string
		same    bool
	}{{[]string{"k2"}, true}, {[]string{"K1:9092", "k9:9092"}, true}, {[]string{"k1:9093"}, false}, {[]string{"k3"}, false}} {
		if got := a.SameCluster(Settings{Brokers: c.brokers}); got != c.same {
			t.Errorf("SameCluster(%v) = %v, want %v", c.brokers, got, c.same)
		}
	}
}
