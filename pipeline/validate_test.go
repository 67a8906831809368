package pipeline

import (
	"errors"
	"strings"
	"testing"

	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
)

// validConfig is a Config at the defaults that Validate accepts.
func validConfig(t *testing.T) Config {
	t.Helper()
	o, err := decode.NewOutbox("public", "outbox", map[string]string{"table.fields.additional.placement": "type:envelope"})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Names: replication.Names{Slot: DefaultSlot, Publication: DefaultPublication, Tables: []replication.Table{{Schema: "public", Name: "outbox"}}},
		Kafka: kafka.Settings{Brokers: []string{"k:9092"}}, CheckpointTopic: DefaultCheckpointTopic, Outboxes: []*decode.Outbox{o},
		MaxBatchEvents: DefaultMaxBatchEvents, MaxBatchBytes: DefaultMaxBatchBytes, QueueBytes: DefaultQueueBytes, MaxRecordBytes: DefaultMaxRecordBytes,
		Linger: DefaultLinger, StatusInterval: DefaultStatusInterval, ConfirmInterval: DefaultConfirmInterval, ProgressInterval: DefaultProgressInterval,
		IdleInterval: DefaultIdleInterval, CommitTimeout: DefaultCommitTimeout, SlotPollInterval: DefaultSlotPollInterval, ReadyConfirmAge: DefaultReadyConfirmAge,
		Reemit: ReemitSettings{ChunkRows: DefaultReemitChunkRows}}
}

// Each refused field is named as Config names it, never by a flag.
func TestValidate(t *testing.T) {
	c := validConfig(t)
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for _, tc := range []struct {
		field, want string
		change      func(*Config)
	}{
		{"Names.Slot", `slot name "My-Slot"`, func(c *Config) { c.Names.Slot = "My-Slot" }},
		{"Names.Publication", `publication name "p'x"`, func(c *Config) { c.Names.Publication = "p'x" }},
		{"Names.Tables", "listed twice", func(c *Config) { c.Names.Tables = append(c.Names.Tables, c.Names.Tables[0]) }},
		{"CheckpointTopic", `"bad topic"`, func(c *Config) { c.CheckpointTopic = "bad topic" }},
		{"DeadLetterTopic", "", func(c *Config) { c.DeadLetterTopic = "a/b" }},
		{"SkipTopic", "", func(c *Config) { c.SkipEvent, c.SkipTopic = decode.Ref{CommitLSN: 1, Ordinal: 1}, "" }},
		{"MaxBatchEvents", "must be from 1 to 16777216, got 0", func(c *Config) { c.MaxBatchEvents = 0 }},
		{"MaxBatchBytes", "must be from 1 to 1073741824, got 4611686018427387904", func(c *Config) { c.MaxBatchBytes = 1 << 62 }},
		{"QueueBytes", "must be from 1", func(c *Config) { c.QueueBytes = -1 }},
		{"Linger", "must not be negative", func(c *Config) { c.Linger = -1 }},
		{"ConfirmInterval", "between 0 and the status interval (10s)", func(c *Config) { c.ConfirmInterval = c.StatusInterval + 1 }},
		{"CommitTimeout", "must be positive", func(c *Config) { c.CommitTimeout = 0 }},
		{"Kafka.Brokers", `port "0"`, func(c *Config) { c.Kafka.Brokers = []string{"k:0"} }},
		{"Kafka.SASLMechanism", "needs a user and a password", func(c *Config) { c.Kafka.SASLMechanism = "PLAIN" }},
		{"Encoding.SchemaPrefix", "is required", func(c *Config) { c.Encoding.Value = format.JSONSchema }},
		{"Reemit.ChunkRows", "must be at least 1, got 0", func(c *Config) { c.Reemit.ChunkRows = 0 }},
		{"Reemit.Rate", "must not be negative", func(c *Config) { c.Reemit.Rate = -1 }},
		{"Reemit.SignalTable", "public.outbox is an outbox table", func(c *Config) { c.Reemit.SignalTable = "public.outbox" }},
		{"Reemit.SignalTable", "must be schema-qualified", func(c *Config) { c.Reemit.SignalTable = "signals" }},
		{"MessagePrefix", "re-emit requests", func(c *Config) { c.MessagePrefix = decode.ControlPrefix }},
	} {
		c := validConfig(t)
		tc.change(&c)
		err := c.Validate()
		var se *SettingError
		if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "--") {
			t.Errorf("%s: %v, want a SettingError for it saying %q", tc.field, err, tc.want)
		}
	}
	c.Encoding = format.Encoding{Value: format.JSONSchema, SchemaPrefix: "app"}
	if err := c.Validate(); err != nil {
		t.Errorf("an envelope with a schema prefix: %v", err)
	}
	// A status interval that is not positive is its fault alone, not the
	// confirm interval's too.
	c = validConfig(t)
	c.StatusInterval = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "StatusInterval") || strings.Contains(err.Error(), "ConfirmInterval") {
		t.Errorf("a status interval of 0: %v, want StatusInterval refused alone", err)
	}
}

// A stream's ACLs grant the topics of its logical messages as well as its
// tables': the producer routes both.
func TestKafkaACLsCoverMessages(t *testing.T) {
	cfg := validConfig(t)
	o, err := decode.NewOutbox("public", "outbox", map[string]string{"route.topic.replacement": "orders.${routedByValue}"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode.NewOutbox("", "logical message walstream", map[string]string{"route.topic.replacement": "messages.${routedByValue}"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Outboxes, cfg.Messages = []*decode.Outbox{o}, m
	var prefixes []string
	for _, a := range cfg.KafkaACLs() {
		if a.Pattern == "prefixed" {
			prefixes = append(prefixes, a.Name)
		}
	}
	if strings.Join(prefixes, " ") != "orders. messages." {
		t.Errorf("prefixed ACLs on %v, want orders. and messages.", prefixes)
	}
}
