package config

import (
	"bytes"
	"testing"
)

// A router setting's flag or environment variable wins over a table's own
// value of it, as over the file's every other setting: shadow mode's
// --topic-template must take billing's events out of the live topics. In
// a stream's entry, the two are refused, as its other settings are.
func TestRouterFlagOverTableSettings(t *testing.T) {
	const shadow = "shadow.outbox.event.${routedByValue}"
	tables := `tables:
  orders.outbox:
  billing.outbox:
    table.field.event.id: event_id
    route.topic.replacement: billing.${routedByValue}
  audit.outbox:
    transforms.outbox.route.topic.replacement: audit.${routedByValue}
`
	file := writeFile(t, "pg-url: postgres://u@h/db\nkafka-brokers: k:9092\n"+tables)
	check := func(t *testing.T, c *Config) {
		t.Helper()
		for _, o := range c.Outboxes {
			if o.TopicReplacement != shadow {
				t.Errorf("%s: topic replacement %q, want the flag's %q", o.Name(), o.TopicReplacement, shadow)
			}
		}
		if billing := c.Outboxes[1]; billing.Columns.ID != "event_id" {
			t.Errorf("billing.outbox: event id column %q, want its own event_id, which no flag sets", billing.Columns.ID)
		}
	}
	t.Run("flag", func(t *testing.T) {
		c, err := Parse(Run, []string{"--config", file, "--topic-template", shadow}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, c)
	})
	t.Run("environment", func(t *testing.T) {
		t.Setenv("WALSTREAM_TOPIC_TEMPLATE", shadow)
		c, err := Parse(Run, []string{"--config", file}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, c)
	})
	t.Run("the top level of a streams list", func(t *testing.T) {
		body := "kafka-brokers: k:9092\n" + tables + "streams:\n  - pg-url: postgres://db/a\n"
		cs, err := parseRun(t, "--config", writeFile(t, body), "--topic-template", shadow)
		if err != nil {
			t.Fatal(err)
		}
		check(t, cs[0])
	})
	t.Run("a stream's own tables", func(t *testing.T) {
		body := "kafka-brokers: k:9092\nstreams:\n  - pg-url: postgres://db/a\n    tables:\n      billing.outbox:\n        route.topic.replacement: billing.${routedByValue}\n"
		_, err := parseRun(t, "--config", writeFile(t, body), "--topic-template", shadow)
		wantRefused(t, err, "stream 1", "line 6 (streams[0])", "tables.billing.outbox", "route.topic.replacement is also set by --topic-template or $WALSTREAM_TOPIC_TEMPLATE")
	})
}
