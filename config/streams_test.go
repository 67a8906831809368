package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/publish/format"
	"go.yaml.in/yaml/v3"
)

// fleetFile is a config file of three streams: the top level shared, each
// stream its own Postgres, slot and outbox settings, one of them another
// Kafka cluster, and one a pasted Debezium connector config.
const fleetFile = `
kafka-brokers: kafka:9092
key.converter: org.apache.kafka.connect.storage.StringConverter
value.converter: org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable: false
linger: 20ms
outbox:
  route.by.field: aggregatetype
streams:
  - pg-url: postgres://walstream@orders-db/orders
    tables:
      public.outbox:
        table.field.event.key: order_id
  - stream: billing
    pg-url: postgres://walstream@shared-db/billing
    slot: billing
    kafka-brokers: billing-kafka:9092
    linger: 50ms
    outbox:
      route.by.field: kind
  - connector:
      connector.class: io.debezium.connector.postgresql.PostgresConnector
      database.hostname: shared-db
      database.dbname: inventory
      database.user: ${env:WS_TEST_INVENTORY_USER}
      topic.prefix: inventory
      slot.name: inventory
      table.include.list: inventory.outbox
      transforms: outbox
      transforms.outbox.type: io.debezium.transforms.outbox.EventRouter
      transforms.outbox.route.topic.replacement: inventory.${routedByValue}
`

func parseRun(t *testing.T, args ...string) ([]*Config, error) {
	t.Helper()
	return ParseStreams(Run, args, &bytes.Buffer{})
}

// Each stream of a streams: list has its own settings over the shared
// top level; the environment sets every stream's but those a stream sets.
// The converters at the top level are a pasted connector config's, as a
// Kafka Connect worker's are its connectors'.
func TestConfigStreams(t *testing.T) {
	t.Setenv("WALSTREAM_COMMIT_TIMEOUT", "7s")
	t.Setenv("WS_TEST_INVENTORY_USER", "inventory-user")
	path := writeFile(t, fleetFile)
	cs, err := parseRun(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 {
		t.Fatalf("%d streams, want 3", len(cs))
	}
	orders, billing, inventory := cs[0], cs[1], cs[2]
	for _, c := range cs {
		if c.CommitTimeout != 7*time.Second || c.Encoding.Value != format.JSON {
			t.Errorf("stream %s: commit timeout %s, value format %v; want the environment's 7s and the shared json", c.Stream, c.CommitTimeout, c.Encoding.Value)
		}
	}
	if orders.Stream != "orders/walstream" || orders.Slot != "walstream" || orders.TransactionalID != "walstream-orders/walstream" ||
		orders.Kafka.Brokers[0] != "kafka:9092" || orders.Linger != 20*time.Millisecond {
		t.Errorf("orders: stream %q slot %q transactional id %q brokers %v linger %s", orders.Stream, orders.Slot, orders.TransactionalID, orders.Kafka.Brokers, orders.Linger)
	}
	if o := orders.Outboxes[0]; o.Name() != "public.outbox" || o.Columns.AggregateID != "order_id" || o.Columns.AggregateType != "aggregatetype" {
		t.Errorf("orders' table: its own key column and the shared route: %+v", o.Columns)
	}
	if billing.Stream != "billing" || billing.CheckpointKey != "billing" || billing.Postgres.Database != "billing" ||
		billing.Kafka.Brokers[0] != "billing-kafka:9092" || billing.Linger != 50*time.Millisecond {
		t.Errorf("billing: stream %q key %q database %q brokers %v linger %s", billing.Stream, billing.CheckpointKey, billing.Postgres.Database, billing.Kafka.Brokers, billing.Linger)
	}
	if o := billing.Outboxes[0]; o.Columns.AggregateType != "kind" {
		t.Errorf("billing's route: %+v, want its own kind", o.Columns)
	}
	if inventory.Stream != "inventory/inventory" || inventory.Postgres.Host != "shared-db" || inventory.Postgres.User != "inventory-user" || inventory.Table != "inventory.outbox" ||
		inventory.Connector != "YAML" || inventory.Outboxes[0].TopicReplacement != "inventory.${routedByValue}" || inventory.Kafka.Brokers[0] != "kafka:9092" {
		t.Errorf("inventory, a pasted connector config: stream %q host %q user %q table %q form %q replacement %q brokers %v",
			inventory.Stream, inventory.Postgres.Host, inventory.Postgres.User, inventory.Table, inventory.Connector, inventory.Outboxes[0].TopicReplacement, inventory.Kafka.Brokers)
	}

	// --stream picks one stream; Parse, for commands of one stream,
	// needs it.
	if cs, err = parseRun(t, "--config", path, "--stream", "billing"); err != nil || len(cs) != 1 || cs[0].Stream != "billing" {
		t.Errorf("--stream billing: %d streams, %v", len(cs), err)
	}
	if _, err := Parse(Run, []string{"--config", path}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "lists 3 streams and walstream run takes one: name it with --stream (orders/walstream, billing, inventory/inventory)") {
		t.Errorf("one stream of three without --stream: %v", err)
	}
	initCmd := Command{Name: "init", Uses: InitSettings, Needs: func() (bool, bool) { return false, false }}
	if c, err := Parse(initCmd, []string{"--config", path, "--stream", "inventory/inventory"}, &bytes.Buffer{}); err != nil || c.Slot != "inventory" {
		t.Errorf("init --stream inventory/inventory: %v", err)
	}
	if _, err := parseRun(t, "--config", path, "--stream", "nope"); err == nil || !strings.Contains(err.Error(), `--stream "nope": config file`) {
		t.Errorf("--stream nope: %v", err)
	}
}

// A stream's connector: may name a connector config file, relative to the
// config file's directory.
func TestConfigStreamConnectorFile(t *testing.T) {
	path := connectorFleet(t, "")
	cs, err := parseRun(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if c := cs[0]; c.Connector != "JSON" || c.Slot != "debezium" || c.Postgres.Database != "billing" || c.Encoding.Value != format.JSONSchema {
		t.Errorf("billing from billing.json: form %q slot %q database %q value %v", c.Connector, c.Slot, c.Postgres.Database, c.Encoding.Value)
	}
	if c := cs[1]; c.Connector != "" || c.Slot != "walstream" {
		t.Errorf("orders: form %q slot %q, want walstream's own settings", c.Connector, c.Slot)
	}
}

// A stream's tables, named either way, replace the top level's, named
// either way; within one place, or with --table, both ways are refused.
func TestConfigStreamTables(t *testing.T) {
	body := `kafka-brokers: k:9092
table: shared.outbox
streams:
  - pg-url: postgres://db/a
    tables:
      a.outbox:
        route.by.field: kind
  - pg-url: postgres://db/b
    slot: b
  - pg-url: postgres://db/c
    slot: c
    table: c.outbox
`
	cs, err := parseRun(t, "--config", writeFile(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{cs[0].Table, cs[1].Table, cs[2].Table}; got[0] != "a.outbox" || got[1] != "shared.outbox" || got[2] != "c.outbox" {
		t.Errorf("tables %q, want a.outbox, shared.outbox (the top level's) and c.outbox", got)
	}
	if c := cs[0].Outboxes[0].Columns.AggregateType; c != "kind" {
		t.Errorf("a.outbox's route.by.field = %q, want its own kind", c)
	}
	shared := "kafka-brokers: k:9092\ntables:\n  shared.outbox:\nstreams:\n  - pg-url: postgres://db/a\n    table: a.outbox\n"
	if cs, err := parseRun(t, "--config", writeFile(t, shared)); err != nil || cs[0].Table != "a.outbox" {
		t.Errorf("a stream's table: over the top level's tables: %v", err)
	}
	for name, tc := range map[string]struct {
		body string
		args []string
	}{
		"both ways in a stream":              {"kafka-brokers: k:9092\nstreams:\n  - pg-url: postgres://db/a\n    table: x.outbox\n    tables:\n      a.outbox:\n", nil},
		"--table and the top level's tables": {shared, []string{"--table", "cli.outbox"}},
	} {
		if _, err := parseRun(t, append([]string{"--config", writeFile(t, tc.body)}, tc.args...)...); err == nil || !strings.Contains(err.Error(), "both name the outbox tables") {
			t.Errorf("%s: %v, want both named refused", name, err)
		}
	}
}

func TestConfigStreamsErrors(t *testing.T) {
	two := "kafka-brokers: k:9092\nstreams:\n  - pg-url: postgres://db/a\n  - pg-url: postgres://db/b\n    slot: b\n"
	for _, tc := range []struct {
		name, body string
		args, env  []string
		want       []string
	}{
		{"not a list", "streams: {}\n", nil, nil, []string{"line 1", "streams must be a list"}},
		{"process setting in a stream", "kafka-brokers: k:9092\nstreams:\n  - pg-url: postgres://db/a\n    http-addr: :9187\n", nil, nil,
			[]string{"line 4 (streams[0])", "http-addr is the process's"}},
		{"stream setting shared", "checkpoint-key: x\n" + two, nil, nil, []string{"line 1", "checkpoint-key names one stream"}},
		{"stream flag", two, []string{"--transactional-id", "x"}, nil, []string{"--transactional-id ($WALSTREAM_TRANSACTIONAL_ID) names one stream"}},
		{"environment and a stream's own", two + "    linger: 1s\n", nil, []string{"WALSTREAM_LINGER", "5ms"},
			[]string{"stream 2", "line 6 (streams[1])", "linger is also set by --linger or $WALSTREAM_LINGER"}},
		{"one slot twice", "kafka-brokers: k:9092\nstreams:\n  - pg-url: postgres://db/a\n  - pg-url: postgres://db/b\n", nil, nil,
			[]string{`streams a/walstream and b/walstream have the same slot "walstream" on db:5432`}},
		{"a stream without Postgres", "kafka-brokers: k:9092\nstreams:\n  - slot: a\n", nil, nil, []string{"stream 1", "--pg-url", "is required"}},
		{"a connector config without converters", "kafka-brokers: k:9092\nstreams:\n  - connector:\n      connector.class: io.debezium.connector.postgresql.PostgresConnector\n" +
			"      database.hostname: db\n      topic.prefix: a\n      table.include.list: public.outbox\n      transforms: o\n      transforms.o.type: io.debezium.transforms.outbox.EventRouter\n",
			nil, nil, []string{"stream 1", "key.converter is not set"}},
		{"nested streams", "kafka-brokers: k:9092\nstreams:\n  - pg-url: postgres://db/a\n    streams: []\n", nil, nil, []string{"line 4 (streams[0])", "cannot name another"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != nil {
				t.Setenv(tc.env[0], tc.env[1])
			}
			_, err := parseRun(t, append([]string{"--config", writeFile(t, tc.body)}, tc.args...)...)
			wantRefused(t, err, tc.want...)
		})
	}
}

// TestFleetManifest: the fleet example's config is what walstream reads:
// three streams, each with its password from its mounted file and none in
// a URL, one of them the connector config beside it, shared by the pods
// through their fleet's group.
func TestFleetManifest(t *testing.T) {
	b, err := os.ReadFile("../docs/fleet/walstream.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type doc struct {
		Kind       string
		Data       map[string]string
		StringData map[string]string `yaml:"stringData"`
	}
	dir := t.TempDir()
	docs := map[string]doc{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d doc
		if err := dec.Decode(&d); err != nil {
			break
		}
		docs[d.Kind] = d
	}
	files := docs["ConfigMap"].Data
	if files["fleet.yaml"] == "" || files["inventory-connector.json"] == "" {
		t.Fatalf("ConfigMap holds %d files, want fleet.yaml and inventory-connector.json", len(files))
	}
	secrets := docs["Secret"].StringData
	for name, body := range secrets {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range files {
		for secret, value := range secrets {
			if strings.Contains(body, value) {
				t.Errorf("%s holds the secret %s", name, secret)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.ReplaceAll(body, "/etc/walstream/secrets", dir)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := parseRun(t, "--config", filepath.Join(dir, "fleet.yaml"))
	if err != nil {
		t.Fatalf("fleet.yaml: %v", err)
	}
	want := map[string]struct{ host, db, password string }{
		"orders":    {"postgres-a.example.internal", "orders", secrets["orders-pg-password"]},
		"billing":   {"postgres-a.example.internal", "billing", secrets["billing-pg-password"]},
		"inventory": {"postgres-b.example.internal", "inventory", secrets["inventory-pg-password"]},
	}
	if len(cs) != len(want) {
		t.Fatalf("%d streams, want %d", len(cs), len(want))
	}
	for _, c := range cs {
		w, ok := want[c.Stream]
		// Passwords are read from their files at each connection.
		pgPassword, _ := readSecret(c.PGPasswordFile)
		var kafkaPassword string
		if c.Kafka.SASLPasswordFile != nil {
			kafkaPassword, _, _ = c.Kafka.SASLPasswordFile.Read()
		}
		if !ok || c.Postgres.Host != w.host || c.Postgres.Database != w.db || pgPassword != w.password ||
			kafkaPassword != secrets["kafka-sasl-password"] || c.Create || c.HTTPAddr != "0.0.0.0:9187" ||
			c.Fleet.Group != "walstream-fleet-walstream.checkpoints" {
			t.Errorf("stream %q: host %q database %q, its password from its file %v, Kafka's %v, create %v, http %q",
				c.Stream, c.Postgres.Host, c.Postgres.Database, pgPassword == w.password, kafkaPassword == secrets["kafka-sasl-password"], c.Create, c.HTTPAddr)
		}
	}
}

// A config file's streams: list joins a fleet's group by default, its name
// derived from the checkpoint topic; a stream alone does not unless asked;
// the group's settings are the process's, and a list on several Kafka
// clusters, or of several checkpoint topics, is said plainly.
func TestConfigFleet(t *testing.T) {
	two := func(extra, second string) string {
		return writeFile(t, `
kafka-brokers: kafka:9092
`+extra+`
streams:
  - pg-url: postgres://walstream@db/orders
  - pg-url: postgres://walstream@db/billing
    slot: billing
`+second)
	}
	cs, err := parseRun(t, "--config", two("", ""))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if f := c.Fleet; f.Group != "walstream-fleet-walstream.checkpoints" || f.SessionTimeout != 10*time.Second || f.HeartbeatInterval != time.Second ||
			f.RebalanceTimeout != 30*time.Second {
			t.Errorf("stream %s: fleet %+v, want the default group and timeouts", c.Stream, f)
		}
	}
	if cs, err := parseRun(t, "--config", two("fleet: off", "")); err != nil || cs[0].Fleet.Group != "" || cs[1].Fleet.Group != "" {
		t.Errorf("fleet: off: %v, %v", cs, err)
	}
	if cs, err := parseRun(t, "--config", two("fleet-group: payments\nfleet-session-timeout: 20s", "    checkpoint-topic: other")); err != nil ||
		cs[1].Fleet.Group != "payments" || cs[1].Fleet.SessionTimeout != 20*time.Second {
		t.Errorf("a named group: %+v, %v", cs, err)
	}
	// One stream: standby as before, unless asked.
	one := []string{"--pg-url", "postgres://walstream@db/app", "--kafka-brokers", "kafka:9092"}
	if cs, err := parseRun(t, one...); err != nil || cs[0].Fleet.Group != "" {
		t.Errorf("one stream: group %q, %v", cs[0].Fleet.Group, err)
	}
	if cs, err := parseRun(t, append(one, "--fleet", "on", "--checkpoint-topic", "cp")...); err != nil || cs[0].Fleet.Group != "walstream-fleet-cp" {
		t.Errorf("one stream, --fleet on: %+v, %v", cs, err)
	}
	// Several Kafka clusters: auto runs without a group, on is refused.
	elsewhere := "    kafka-brokers: other-kafka:9092"
	if cs, err := parseRun(t, "--config", two("", elsewhere)); err != nil || cs[0].Fleet.Group != "" || cs[1].Fleet.Group != "" {
		t.Errorf("streams on two Kafka clusters, fleet auto: %v", err)
	}
	// One cluster's brokers in another order: one cluster, one group.
	reordered := writeFile(t, `
kafka-brokers: kafka:9092,kafka-2:9092
streams:
  - pg-url: postgres://walstream@db/orders
  - pg-url: postgres://walstream@db/billing
    slot: billing
    kafka-brokers: kafka-2:9092,kafka:9092
`)
	if cs, err := parseRun(t, "--config", reordered); err != nil || cs[1].Fleet.Group != "walstream-fleet-walstream.checkpoints" {
		t.Errorf("streams on one Kafka cluster, brokers in two orders, fleet auto: %v", err)
	}
	for _, tc := range []struct{ name, extra, second, want string }{
		{"two clusters", "fleet: on", elsewhere, "write to different Kafka clusters (kafka:9092 and other-kafka:9092), and the fleet's group walstream-fleet-walstream.checkpoints is on one"},
		{"two checkpoint topics", "", "    checkpoint-topic: other", "would join different fleet groups, walstream-fleet-walstream.checkpoints and walstream-fleet-other, derived from their checkpoint topics: " +
			"give them one checkpoint topic, or name the group with --fleet-group ($WALSTREAM_FLEET_GROUP)"},
		{"a stream's own", "", "    fleet-session-timeout: 5s", "fleet-session-timeout is the process's, not a stream's"},
		{"not a value", "fleet: yes", "", `--fleet ($WALSTREAM_FLEET): "yes" is not auto, on or off`},
		{"heartbeats too rare", "fleet-heartbeat-interval: 4s", "", "--fleet-heartbeat-interval ($WALSTREAM_FLEET_HEARTBEAT_INTERVAL): must be positive and at most a third of the session timeout (10s), got 4s"},
	} {
		if _, err := parseRun(t, "--config", two(tc.extra, tc.second)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A stream's connector config is part of the stream's entry: a setting it
// gives that the command line or the environment sets too is refused,
// naming both, as the entry's own keys are; Debezium's default of a key
// it leaves out yields, as walstream's defaults do.
func TestConfigStreamConnectorAndEnvironment(t *testing.T) {
	path := connectorFleet(t, `"slot.name": "billing",`)
	t.Run("environment", func(t *testing.T) {
		t.Setenv("WALSTREAM_PG_URL", "postgres://other/db")
		t.Setenv("WALSTREAM_SLOT", "other")
		_, err := parseRun(t, "--config", path)
		wantRefused(t, err, "stream 1", "billing.json: database.* (streams[0]): is also set by --pg-url or $WALSTREAM_PG_URL",
			"billing.json: slot.name (streams[0]): is also set by --slot or $WALSTREAM_SLOT")
	})
	t.Run("flag", func(t *testing.T) {
		_, err := parseRun(t, "--config", path, "--table", "public.other")
		wantRefused(t, err, "billing.json: table.include.list (streams[0]): is also set by --table or $WALSTREAM_TABLE")
	})
	t.Run("a default", func(t *testing.T) {
		t.Setenv("WALSTREAM_PUBLICATION", "shared")
		cs, err := parseRun(t, "--config", path)
		if err != nil {
			t.Fatal(err)
		}
		if got := cs[0].Publication; got != "shared" {
			t.Errorf("publication %q, want the environment's over Debezium's default, which billing.json leaves to it", got)
		}
	})
}

// connectorFleet writes a fleet config whose first stream names the
// connector config billing.json beside it (with more of its keys, a JSON
// fragment ending in a comma), and returns its path.
func connectorFleet(t *testing.T, more string) string {
	t.Helper()
	dir := t.TempDir()
	connector := `{"name": "billing", "config": {"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
		"database.hostname": "db", "database.dbname": "billing", "topic.prefix": "billing", "table.include.list": "public.outbox", ` + more + `
		"transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
		"key.converter": "org.apache.kafka.connect.storage.StringConverter", "value.converter": "org.apache.kafka.connect.json.JsonConverter"}}`
	if err := os.WriteFile(filepath.Join(dir, "billing.json"), []byte(connector), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fleet.yaml")
	body := "kafka-brokers: kafka:9092\nstreams:\n  - connector: billing.json\n  - pg-url: postgres://db/orders\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
