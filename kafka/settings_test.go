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
