package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaCluster adds the three-node cluster to TestKafka; make
// chaos-cluster, which runs on one, runs TestKafka with it first.
var kafkaCluster = flag.Bool("testenv.kafka-cluster", false, "TestKafka also starts a three-node cluster")

// TestKafka: a one-node cluster of the newest release and of 3.9, and with
// -testenv.kafka-cluster a three-node one, start, serve a transactional
// producer, keep their data across SIGTERM and SIGKILL restarts, and
// report how long they took to start and how much memory they hold.
func TestKafka(t *testing.T) {
	type kafkaCase struct {
		name string
		cfg  KafkaConfig
	}
	cases := []kafkaCase{{"one node", KafkaConfig{}}, {"3.9", KafkaConfig{Classic: true}}}
	if *kafkaCluster {
		cases = append(cases, kafkaCase{"three nodes", KafkaConfig{Nodes: 3}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A restart after SIGKILL mostly waits for the controller
			// (broker.session.timeout.ms): the clusters wait together.
			t.Parallel()
			start := time.Now()
			k := StartKafka(t, tc.cfg)
			t.Logf("%s: started in %s, RSS %s", k, time.Since(start).Round(10*time.Millisecond), k.rss(t))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			commit(ctx, t, k, "one")
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
				start = time.Now()
				if err := k.Restart(sig); err != nil {
					t.Fatal(err)
				}
				t.Logf("restart after %s: %s", sig, time.Since(start).Round(10*time.Millisecond))
			}
			commit(ctx, t, k, "two")
			recs, err := ReadRecords(ctx, k.Addr(), "harness")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.Value)
			}
			if strings.Join(got, ",") != "one,two" {
				t.Fatalf("records after restarts: %q, want one and two", got)
			}
		})
	}
}

// commit writes value in a Kafka transaction of its own.
func commit(ctx context.Context, t *testing.T, k *Kafka, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(k.Addr(), ",")...), kgo.TransactionalID("harness-test"), kgo.DefaultProduceTopic("harness"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, "harness"); err != nil && !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// rss is the resident memory of every node, from /proc.
func (k *Kafka) rss(t *testing.T) string {
	var parts []string
	for _, n := range k.all() {
		rss, err := n.proc().RSS()
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf("%d MiB", rss>>20))
	}
	return strings.Join(parts, ", ")
}

// TestComposeRunsATestedKafka: docker-compose.yml's Kafka image is a
// release the tests run, so that what users start is what was tested.
func TestComposeRunsATestedKafka(t *testing.T) {
	versions, err := JavaVersions()
	if err != nil {
		t.Fatal(err)
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*image:\s*apache/kafka:(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("docker-compose.yml has no apache/kafka image")
	}
	if got := string(m[1]); got != versions["KAFKA_VERSION"] && got != versions["KAFKA_CLASSIC_VERSION"] {
		t.Fatalf("docker-compose.yml runs apache/kafka:%s; the tests run %s and %s (scripts/java/versions.env)",
			got, versions["KAFKA_VERSION"], versions["KAFKA_CLASSIC_VERSION"])
	}
}
