package publish

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
)

// cluster starts a kfake cluster of n brokers, without topic
// auto-creation unless opts add it.
func cluster(t *testing.T, n int, opts ...kfake.Opt) (KafkaSettings, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(n)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	conn := KafkaSettings{Brokers: c.ListenAddrs()}
	cl, err := kgo.NewClient(conn.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return conn, kadm.NewClient(cl)
}

// logBuffer is a text slog logger whose output a test can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// topicSettings reads a topic's replication factor, partitions and one config.
func topicSettings(t *testing.T, adm *kadm.Client, topic, config string) (replicas, partitions int, value string) {
	t.Helper()
	ctx := context.Background()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil {
		t.Fatalf("topic %s: %v", topic, d.Err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == config {
			value = c.MaybeValue()
		}
	}
	return len(d.Partitions[0].Replicas), len(d.Partitions), value
}

func TestEnsureCheckpointTopicCreates(t *testing.T) {
	for _, tc := range []struct {
		brokers, wantReplicas int
		wantMinISR            string
	}{
		{1, 1, "1"}, // the broker's default: 2 of 1 cannot be
		{2, 2, "1"}, // the broker's default: 2 of 2 stops at every broker restart
		{3, 3, "2"},
		{5, 3, "2"},
	} {
		t.Run(strings.Repeat("b", tc.brokers), func(t *testing.T) {
			conn, adm := cluster(t, tc.brokers)
			var log logBuffer
			st, err := EnsureCheckpointTopic(context.Background(), conn, "walstream.checkpoints", log.logger())
			if err != nil {
				t.Fatal(err)
			}
			if !st.Exists || st.Brokers != tc.brokers || st.ReplicationFactor != tc.wantReplicas || len(st.Weaker) > 0 {
				t.Fatalf("state %+v, want %d replicas on %d brokers and nothing weaker", st, tc.wantReplicas, tc.brokers)
			}
			replicas, partitions, policy := topicSettings(t, adm, "walstream.checkpoints", "cleanup.policy")
			if replicas != tc.wantReplicas || partitions != 1 || policy != "compact" {
				t.Errorf("created with %d replicas, %d partitions, cleanup.policy %q; want %d, 1, compact", replicas, partitions, policy, tc.wantReplicas)
			}
			if _, _, minISR := topicSettings(t, adm, "walstream.checkpoints", "min.insync.replicas"); minISR != tc.wantMinISR {
				t.Errorf("min.insync.replicas %q, want %q", minISR, tc.wantMinISR)
			}
			if out := log.String(); !strings.Contains(out, "created checkpoint topic") || strings.Contains(out, "WARN") {
				t.Errorf("log:\n%s", out)
			}
			// A second start finds it and has nothing to say.
			var again logBuffer
			if _, err := EnsureCheckpointTopic(context.Background(), conn, "walstream.checkpoints", again.logger()); err != nil || again.String() != "" {
				t.Errorf("second call: err %v, log %q", err, again.String())
			}
		})
	}
}

func TestEnsureCheckpointTopicWarnsWhenWeaker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int16
		configs  map[string]string
		want     []string
	}{
		{"one replica, delete", 1, map[string]string{"cleanup.policy": "delete"},
			[]string{"replication factor 1, want 3 on 3 brokers", `cleanup.policy \"delete\", want compact`, "min.insync.replicas 1, want 2"}},
		{"compact,delete", 3, map[string]string{"cleanup.policy": "compact,delete", "min.insync.replicas": "2"},
			[]string{`cleanup.policy \"compact,delete\", want compact`}},
		{"min.insync.replicas over replicas", 3, map[string]string{"cleanup.policy": "compact", "min.insync.replicas": "4"},
			[]string{"min.insync.replicas 4 is over the replication factor 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, adm := cluster(t, 3)
			configs := make(map[string]*string)
			for k, v := range tc.configs {
				configs[k] = kadm.StringPtr(v)
			}
			if _, err := adm.CreateTopic(context.Background(), 1, tc.replicas, configs, "cp"); err != nil {
				t.Fatal(err)
			}
			var log logBuffer
			st, err := EnsureCheckpointTopic(context.Background(), conn, "cp", log.logger())
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(st.Weaker), len(tc.want); got != want {
				t.Errorf("weaker %q, want %d entries", st.Weaker, want)
			}
			out := log.String()
			for _, w := range append(tc.want, "level=WARN", "topic=cp", "brokers=3", "replication_factor=") {
				if !strings.Contains(out, w) {
					t.Errorf("log does not say %q:\n%s", w, out)
				}
			}
			// CheckCheckpointTopic judges the same, changing nothing.
			checked, err := CheckCheckpointTopic(context.Background(), conn, "cp")
			if err != nil || len(checked.Weaker) != len(st.Weaker) {
				t.Errorf("CheckCheckpointTopic = %+v, %v; want %q", checked, err, st.Weaker)
			}
		})
	}
}

func TestCheckCheckpointTopicMissing(t *testing.T) {
	conn, adm := cluster(t, 1)
	st, err := CheckCheckpointTopic(context.Background(), conn, "cp")
	if err != nil || st.Exists {
		t.Fatalf("CheckCheckpointTopic = %+v, %v; want a missing topic", st, err)
	}
	if td, _ := adm.ListTopics(context.Background(), "cp"); td.Has("cp") {
		t.Fatal("a check created the topic")
	}
}

func TestParseTopicCreation(t *testing.T) {
	tc, err := ParseTopicCreation(map[string]string{
		"topic.creation.default.replication.factor": "3",
		"topic.creation.default.partitions":         "6",
		"topic.creation.default.compression.type":   "lz4",
		"groups":                          "orders, dlq",
		"orders.include":                  `outbox\.event\.Order.*, outbox\.event\.Invoice`,
		"orders.exclude":                  `outbox\.event\.OrderAudit`,
		"orders.partitions":               "12",
		"orders.cleanup.policy":           "compact,delete",
		"topic.creation.dlq.include":      "walstream.dlq",
		"topic.creation.dlq.retention.ms": "-1",
		"topic.creation.enable":           "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		topic, group  string
		partitions    int32
		replicas      int16
		config, value string
	}{
		{"outbox.event.Order", "orders", 12, 3, "cleanup.policy", "compact,delete"},
		{"outbox.event.OrderShipped", "orders", 12, 3, "compression.type", ""}, // groups do not inherit configs
		{"outbox.event.OrderAudit", "default", 6, 3, "compression.type", "lz4"},
		{"outbox.event.Invoice", "orders", 12, 3, "cleanup.policy", "compact,delete"},
		{"outbox.event.InvoiceX", "default", 6, 3, "compression.type", "lz4"}, // anchored
		{"walstream.dlq", "dlq", 6, 3, "retention.ms", "-1"},
		{"x.walstream.dlq", "default", 6, 3, "compression.type", "lz4"},
	} {
		g := tc.For(c.topic)
		if g.Name != c.group || g.Partitions != c.partitions || g.ReplicationFactor != c.replicas || g.Configs[c.config] != c.value {
			t.Errorf("For(%s) = %s, %d partitions, %d replicas, %s=%q; want %s, %d, %d, %q",
				c.topic, g.Name, g.Partitions, g.ReplicationFactor, c.config, g.Configs[c.config], c.group, c.partitions, c.replicas, c.value)
		}
	}
	none, err := ParseTopicCreation(map[string]string{})
	if err != nil || none.Default.Partitions != -1 || none.Default.ReplicationFactor != -1 {
		t.Fatalf("no settings: %+v, %v; want the broker's defaults", none, err)
	}
	for name, bad := range map[string]map[string]string{
		"unknown group":       {"orders.partitions": "3"},
		"no include":          {"groups": "orders", "orders.partitions": "3"},
		"bad regex":           {"groups": "orders", "orders.include": "("},
		"zero partitions":     {"default.partitions": "0"},
		"bad replicas":        {"default.replication.factor": "three"},
		"include on default":  {"default.include": "x"},
		"default as a group":  {"groups": "default"},
		"group listed twice":  {"groups": "a,a", "a.include": "x"},
		"no config name":      {"default.": "x"},
		"not a group setting": {"default": "x"},
	} {
		if _, err := ParseTopicCreation(bad); err == nil {
			t.Errorf("%s: %v accepted", name, bad)
		}
	}
}

// With broker auto-creation off, a producer with TopicCreation creates the
// outbox and dead-letter topics it writes to with their group's settings,
// and leaves an existing topic as it is, warning how it differs.
func TestProducerCreatesTopics(t *testing.T) {
	conn, adm := cluster(t, 3)
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "outbox.event.Customer"); err != nil {
		t.Fatal(err)
	}
	tc, err := ParseTopicCreation(map[string]string{
		"default.replication.factor": "3", "default.partitions": "4", "default.retention.ms": "3600000",
		"groups": "dlq", "dlq.include": `walstream\.dlq`, "dlq.partitions": "1", "dlq.retention.ms": "-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	p := producerOn(t, conn, tc, "walstream.dlq", log.logger())
	bad := event(3, "c")
	bad.Bad = &decode.Error{Reason: "test"}
	customer := event(2, "b")
	customer.AggregateType = []byte("Customer")
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x2000}, &decode.Tx{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true,
		Events: []decode.Event{event(1, "a"), customer, bad}, Bytes: 10})
	for _, c := range []struct {
		topic                string
		replicas, partitions int
		retention            string
	}{
		{"outbox.event.Order", 3, 4, "3600000"},
		{"walstream.dlq", 3, 1, "-1"},
		{"outbox.event.Customer", 1, 2, "604800000"}, // existed: untouched
	} {
		replicas, partitions, retention := topicSettings(t, adm, c.topic, "retention.ms")
		if replicas != c.replicas || partitions != c.partitions || retention != c.retention {
			t.Errorf("%s: %d replicas, %d partitions, retention.ms %s; want %d, %d, %s", c.topic, replicas, partitions, retention, c.replicas, c.partitions, c.retention)
		}
	}
	if out := log.String(); !strings.Contains(out, "topic=outbox.event.Order topic_creation_group=default partitions=4 replication_factor=3") ||
		!strings.Contains(out, "topic=walstream.dlq topic_creation_group=dlq") || strings.Contains(out, `"created topic" topic=outbox.event.Customer`) ||
		!strings.Contains(out, `level=WARN msg="topic exists with other settings than its topic.creation group's: walstream leaves it as it is" topic=outbox.event.Customer topic_creation_group=default differences="2 partitions, the group says 4; replication factor 1, the group says 3; retention.ms \"604800000\", the group says \"3600000\""`) {
		t.Errorf("log:\n%s", out)
	}
}

// Without TopicCreation and with broker auto-creation off, a record to a
// missing topic stops the producer before it is produced, naming the topic
// and the event: nothing is committed or confirmed (docs/kafka.md).
func TestProducerWithoutAutoCreation(t *testing.T) {
	conn, _ := cluster(t, 1)
	p := producerOn(t, conn, nil, "", slog.New(slog.NewTextHandler(&logBuffer{}, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := NewQueue(1 << 20)
	p.Start(&fakePositions{at: time.Now(), committed: func(cp checkpoint.Checkpoint) {
		t.Errorf("committed %s", cp)
	}})
	if err := q.Put(ctx, &decode.Tx{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{event(1, "a")}, Bytes: 5}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := p.Run(ctx, q)
	var te *TopicError
	if !errors.As(err, &te) || !errors.Is(err, ErrTopicMissing) || te.Topic != "outbox.event.Order" || !strings.Contains(err.Error(), "event id a") {
		t.Fatalf("Run = %v, want the topic outbox.event.Order missing, naming event a", err)
	}
	if !Permanent(err) {
		t.Errorf("%v is not permanent", err)
	}
	t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// producerOn is a producer on conn whose checkpoint topic exists.
func producerOn(t *testing.T, conn KafkaSettings, tc *TopicCreation, dlq string, log *slog.Logger) *Producer {
	t.Helper()
	ctx := context.Background()
	if _, err := EnsureCheckpointTopic(ctx, conn, "walstream.checkpoints", log); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Outboxes: []*decode.Outbox{testOutbox},
		Kafka: conn, TransactionalID: "tx-topics", CheckpointTopic: "walstream.checkpoints", CheckpointKey: "slot-a",
		Slot: "slot-a", MaxBatchEvents: 100, MaxBatchBytes: 1 << 20, DeadLetterTopic: dlq, TopicCreation: tc,
		Linger: time.Millisecond, IdleInterval: 50 * time.Millisecond, CommitTimeout: 10 * time.Second, MaxRecordBytes: 1 << 20,
	}, log, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// Properties text: one a line or ;-separated, comments, values with commas.
func TestParseTopicCreationText(t *testing.T) {
	tc, err := ParseTopicCreationText("# default group\ntopic.creation.default.partitions = 6\ndefault.cleanup.policy=compact,delete;groups=dlq\ndlq.include=walstream\\.dlq\n")
	if err != nil {
		t.Fatal(err)
	}
	if g := tc.For("x"); g.Partitions != 6 || g.Configs["cleanup.policy"] != "compact,delete" {
		t.Errorf("default group %+v", g)
	}
	if g := tc.For("walstream.dlq"); g.Name != "dlq" || g.Partitions != 6 {
		t.Errorf("dlq group %+v", g)
	}
	if tc, err := ParseTopicCreationText(" ;\n# nothing\n"); tc != nil || err != nil {
		t.Errorf("empty text: %+v, %v; want nil (broker auto-creation)", tc, err)
	}
	for text, want := range map[string]string{"default.partitions": "not name=value", "default.partitions=1;default.partitions=2": "set twice"} {
		if _, err := ParseTopicCreationText(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
