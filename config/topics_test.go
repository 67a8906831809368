package config

import (
	"bytes"
	"strings"
	"testing"
)

func TestTopicCreationSetting(t *testing.T) {
	base := []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	c, err := Parse(Run, base, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.TopicCreation != nil {
		t.Fatal("topic creation is on by default; broker auto-creation is the default")
	}

	file := writeFile(t, `pg-url: postgres://u@h/db
kafka-brokers: k:9092
topic-creation: |
  # the default group
  topic.creation.default.partitions = 6
  default.replication.factor=3
  groups=dlq
  dlq.include=walstream\.dlq
  dlq.retention.ms=-1
`)
	c, err = Parse(Run, []string{"--config", file}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	tc := c.TopicCreation
	if tc == nil {
		t.Fatal("config file topic-creation ignored")
	}
	if g := tc.For("outbox.event.Order"); g.Name != "default" || g.Partitions != 6 || g.ReplicationFactor != 3 {
		t.Errorf("outbox topic: %+v", g)
	}
	if g := tc.For("walstream.dlq"); g.Name != "dlq" || g.Partitions != 6 || g.Configs["retention.ms"] != "-1" {
		t.Errorf("dead-letter topic: %+v", g)
	}

	t.Setenv("WALSTREAM_TOPIC_CREATION", "default.partitions=2;default.cleanup.policy=compact,delete")
	if c, err = Parse(Run, base, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if g := c.TopicCreation.For("x"); g.Partitions != 2 || g.Configs["cleanup.policy"] != "compact,delete" {
		t.Errorf("from the environment: %+v", g)
	}

	for _, bad := range []struct{ value, want string }{
		{"default.partitions", "not name=value"},
		{"default.partitions=0", "topic.creation.default.partitions"},
		{"orders.partitions=3", `"orders" is not the default group`},
		{"default.partitions=1;default.partitions=2", "default.partitions is set twice"},
	} {
		_, err := Parse(Run, append(base, "--topic-creation", bad.value), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "topic-creation") {
			t.Errorf("--topic-creation %q: %v, want an error naming the flag and %q", bad.value, err, bad.want)
		}
	}
}
