package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/walstream/walstream/config"
)

// The fleet's walstream reads its streams as walstream run does: each its
// own slot, publication and table, the connections for all of them.
func TestFleetArgsParse(t *testing.T) {
	b := &bench{cfg: &Config{WalstreamArgs: []string{"--linger", "2ms"}}, pg: &postgres{url: "postgres://postgres@127.0.0.1:5432/postgres"}}
	args, err := b.fleetArgs(t.TempDir(), "127.0.0.1:9092", "127.0.0.1:0", 3)
	if err != nil {
		t.Fatal(err)
	}
	if args[0] != "run" {
		t.Fatalf("args = %q, want walstream run", args)
	}
	cfgs, err := config.ParseStreams(config.Run, args[1:], io.Discard)
	if err != nil {
		t.Fatalf("walstream does not take the fleet's arguments %q: %v", args, err)
	}
	if len(cfgs) != 3 {
		t.Fatalf("%d streams, want 3", len(cfgs))
	}
	for i, c := range cfgs {
		s := fleetStream(i + 1)
		if c.Slot != s.slot() || c.Postgres.Database != s.database() || c.Publication != benchPublication || c.Table != benchTable || c.Linger.String() != "2ms" {
			t.Errorf("stream %d: slot %s, database %s, publication %s, table %s, linger %s; want %s, %s, %s, %s, 2ms",
				i+1, c.Slot, c.Postgres.Database, c.Publication, c.Table, c.Linger, s.slot(), s.database(), benchPublication, benchTable)
		}
	}
}

// committedTxns sums every stream's committed transactions and nothing
// else.
func TestCommittedTxns(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP walstream_kafka_transactions_total Kafka transactions ended, by result.
walstream_kafka_transactions_total{database="d",result="aborted",slot="a",stream="d/a"} 5
walstream_kafka_transactions_total{database="d",result="committed",slot="a",stream="d/a"} 120
walstream_kafka_transactions_total{database="d",result="committed",slot="b",stream="d/b"} 3.5e+02
walstream_kafka_transaction_failures_total{cause="other",database="d",slot="a",stream="d/a"} 7
`)
	}))
	defer srv.Close()
	n, err := committedTxns(srv.Listener.Addr().String())
	if err != nil || n != 470 {
		t.Fatalf("committedTxns = %d, %v; want 470", n, err)
	}
}
