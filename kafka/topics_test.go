package kafka

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// cluster starts a kfake cluster of n brokers, without topic
// auto-creation unless opts add it.
func cluster(t *testing.T, n int, opts ...kfake.Opt) (Settings, *kadm.Client) {
	t.Helper()
	brokers, adm := testenv.KfakeCluster(t, n, opts...)
	return Settings{Brokers: brokers}, adm
}

// ensure is EnsureCheckpointTopic with a client of its own, as a session
// has one.
func ensure(t *testing.T, conn Settings, topic string, log *slog.Logger) (TopicState, error) {
	t.Helper()
	cl, err := kgo.NewClient(conn.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return EnsureCheckpointTopic(context.Background(), cl, topic, nil, log)
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
			var log testenv.LogBuffer
			st, err := ensure(t, conn, "walstream.checkpoints", log.Logger())
			if err != nil {
				t.Fatal(err)
			}
			if !st.Exists || st.Brokers != tc.brokers || st.ReplicationFactor != tc.wantReplicas || len(st.Weaker) > 0 {
				t.Fatalf("state %+v, want %d replicas on %d brokers and nothing weaker", st, tc.wantReplicas, tc.brokers)
			}
			replicas, partitions, policy := testenv.TopicSettings(t, adm, "walstream.checkpoints", "cleanup.policy")
			if replicas != tc.wantReplicas || partitions != 1 || policy != "compact" {
				t.Errorf("created with %d replicas, %d partitions, cleanup.policy %q; want %d, 1, compact", replicas, partitions, policy, tc.wantReplicas)
			}
			if _, _, minISR := testenv.TopicSettings(t, adm, "walstream.checkpoints", "min.insync.replicas"); minISR != tc.wantMinISR {
				t.Errorf("min.insync.replicas %q, want %q", minISR, tc.wantMinISR)
			}
			if out := log.String(); !strings.Contains(out, "created checkpoint topic") || strings.Contains(out, "WARN") {
				t.Errorf("log:\n%s", out)
			}
			// A second start finds it and has nothing to say.
			var again testenv.LogBuffer
			if _, err := ensure(t, conn, "walstream.checkpoints", again.Logger()); err != nil || again.String() != "" {
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
			var log testenv.LogBuffer
			st, err := ensure(t, conn, "cp", log.Logger())
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
