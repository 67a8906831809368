package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestConfigFromEnvironment(t *testing.T) {
	t.Setenv("WALSTREAM_PG_URL", "postgres://walstream@db:5432/app")
	t.Setenv("WALSTREAM_KAFKA_BROKERS", "k1:9092, k2:9092")
	t.Setenv("WALSTREAM_SLOT", "orders")
	t.Setenv("WALSTREAM_LINGER", "20ms")
	c, err := parseConfig([]string{"--slot", "flagwins"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Slot != "flagwins" {
		t.Errorf("Slot = %q: a flag must win over the environment", c.Slot)
	}
	if got := c.brokers(); len(got) != 2 || got[1] != "k2:9092" {
		t.Errorf("brokers = %q", got)
	}
	if c.Linger != 20*time.Millisecond {
		t.Errorf("Linger = %s", c.Linger)
	}
	if c.TransactionalID != "walstream-flagwins" || c.CheckpointKey != "flagwins" {
		t.Errorf("defaults derived from the slot: transactional id %q, checkpoint key %q", c.TransactionalID, c.CheckpointKey)
	}
	if c.TopicTemplate != "outbox.event.${routedByValue}" || c.Table != "public.outbox" || c.Publication != "walstream_outbox" || !c.Create {
		t.Errorf("defaults: %+v", c)
	}
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	base := []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"missing required", nil, nil, []string{"--pg-url ($WALSTREAM_PG_URL): is required", "--kafka-brokers ($WALSTREAM_KAFKA_BROKERS): is required"}},
		{"bad env value", base, map[string]string{"WALSTREAM_MAX_BATCH_EVENTS": "lots"}, []string{"WALSTREAM_MAX_BATCH_EVENTS", "lots"}},
		{"zero batch", append(base, "--max-batch-events", "0"), nil, []string{"--max-batch-events", "at least 1"}},
		{"table not qualified", append(base, "--table", "outbox"), nil, []string{"--table", "schema-qualified"}},
		{"bad slot", append(base, "--slot", "My-Slot"), nil, []string{`slot name "My-Slot"`}},
		{"template", append(base, "--topic-template", "fixed"), nil, []string{"--topic-template", "${routedByValue}"}},
		{"interval", append(base, "--status-interval", "0s"), nil, []string{"--status-interval", "must be positive"}},
		{"log level", append(base, "--log-level", "loud"), nil, []string{"--log-level", "loud"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := parseConfig(tc.args, &bytes.Buffer{})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestConfigNeverPrintsThePassword(t *testing.T) {
	_, err := parseConfig([]string{"--pg-url", "postgres://u:hunter2secret@h:notaport/db", "--kafka-brokers", "k:9092"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--pg-url") {
		t.Fatalf("err = %v, want a --pg-url error", err)
	}
	if strings.Contains(err.Error(), "hunter2secret") {
		t.Fatalf("error prints the password: %v", err)
	}
}

func TestRunHelpListsEnvironment(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseConfig([]string{"--help"}, &stderr)
	if err == nil {
		t.Fatal("--help returned no error")
	}
	for _, want := range []string{"$WALSTREAM_PG_URL", "$WALSTREAM_KAFKA_BROKERS", "$WALSTREAM_SLOT", "$WALSTREAM_PUBLICATION",
		"$WALSTREAM_TABLE", "$WALSTREAM_TOPIC_TEMPLATE", "$WALSTREAM_CHECKPOINT_TOPIC", "$WALSTREAM_TRANSACTIONAL_ID",
		"$WALSTREAM_MAX_BATCH_EVENTS", "$WALSTREAM_HTTP_ADDR", "$WALSTREAM_CREATE"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("run --help does not document %s", want)
		}
	}
}
