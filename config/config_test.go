package config

import (
	"bytes"
	"errors"
	"flag"
	"github.com/walstream/walstream/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/pipeline"
	"github.com/walstream/walstream/publish/format"
)

func TestConfigFromEnvironment(t *testing.T) {
	t.Setenv("WALSTREAM_PG_URL", "postgres://walstream@db:5432/app")
	t.Setenv("WALSTREAM_KAFKA_BROKERS", "k1:9092, k2:9092")
	t.Setenv("WALSTREAM_SLOT", "orders")
	t.Setenv("WALSTREAM_LINGER", "20ms")
	c, err := Parse(Run, []string{"--slot", "flagwins"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Slot != "flagwins" {
		t.Errorf("Slot = %q: a flag must win over the environment", c.Slot)
	}
	if got := c.Kafka.Brokers; len(got) != 2 || got[1] != "k2:9092" {
		t.Errorf("brokers = %q", got)
	}
	if c.Linger != 20*time.Millisecond {
		t.Errorf("Linger = %s", c.Linger)
	}
	if c.Stream != "app/flagwins" || c.TransactionalID != "walstream-app/flagwins" || c.CheckpointKey != "app/flagwins" ||
		c.LegacyKey != "flagwins" || c.LegacyTransactionalID != "walstream-flagwins" {
		t.Errorf("defaults derived from the database and slot: stream %q, transactional id %q, checkpoint key %q, legacy %q and %q",
			c.Stream, c.TransactionalID, c.CheckpointKey, c.LegacyKey, c.LegacyTransactionalID)
	}
	c, err = Parse(Run, []string{"--stream", "orders-eu"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	// Earlier versions defaulted key and transactional id from the slot:
	// whichever is left to its default may still be found there.
	if c.TransactionalID != "walstream-orders-eu" || c.CheckpointKey != "orders-eu" || c.LegacyKey != "orders" ||
		c.LegacyTransactionalID != "walstream-orders" || c.NamesWarning != "" {
		t.Errorf("with --stream: transactional id %q, checkpoint key %q, legacy %q and %q, warning %q; want walstream-orders-eu, orders-eu, orders, walstream-orders and none",
			c.TransactionalID, c.CheckpointKey, c.LegacyKey, c.LegacyTransactionalID, c.NamesWarning)
	}
	for _, tc := range []struct {
		args                []string
		legacyKey, legacyID string
		warn                string
	}{
		{[]string{"--checkpoint-key", "k"}, "", "walstream-flagwins", "--checkpoint-key is set, but the transactional id is derived"},
		{[]string{"--transactional-id", "t"}, "flagwins", "", "--transactional-id is set, but the checkpoint key is derived"},
		{[]string{"--checkpoint-key", "k", "--transactional-id", "t"}, "", "", ""},
		{[]string{"--stream", "s", "--checkpoint-key", "k"}, "", "walstream-flagwins", "--checkpoint-key is set"},
	} {
		c, err := Parse(Run, append([]string{"--slot", "flagwins"}, tc.args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if c.LegacyKey != tc.legacyKey || c.LegacyTransactionalID != tc.legacyID || (tc.warn == "") != (c.NamesWarning == "") ||
			!strings.Contains(c.NamesWarning, tc.warn) {
			t.Errorf("%q: legacy key %q, legacy transactional id %q, warning %q; want %q, %q and one saying %q",
				tc.args, c.LegacyKey, c.LegacyTransactionalID, c.NamesWarning, tc.legacyKey, tc.legacyID, tc.warn)
		}
	}
	if o := c.Outboxes[0]; o.Name() != "public.outbox" || o.TopicReplacement != "outbox.event.${routedByValue}" {
		t.Errorf("default topic template: %+v", o)
	}
	if c.Table != "public.outbox" || c.Publication != "walstream_outbox" || !c.Create {
		t.Errorf("defaults: %+v", c)
	}
}

// --skip-event and --accept-recreated-table reach the pipeline's settings.
func TestConfigSkipAndAccept(t *testing.T) {
	c, err := Parse(Run, []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092",
		"--skip-event", "0/16B3748:2", "--accept-recreated-table", "public.outbox=16454, billing.outbox=17000"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	pc := c.Config
	if pc.SkipEvent != (decode.Ref{CommitLSN: 0x16B3748, Ordinal: 2}) || pc.SkipTopic != pipeline.DefaultDeadLetterTopic || pc.DeadLetterTopic != "" {
		t.Errorf("skip %v to %q, dead-letter topic %q: want the one event to walstream.dlq, fail mode otherwise", pc.SkipEvent, pc.SkipTopic, pc.DeadLetterTopic)
	}
	if a := pc.AcceptRecreated; len(a) != 2 || a["public.outbox"] != 16454 || a["billing.outbox"] != 17000 {
		t.Errorf("accepted %v", a)
	}
}

// --from-debezium-offset reads its source, the connector's name from a
// connector's URL, and --topic-prefix selects the connector's partition.
func TestConfigTakeover(t *testing.T) {
	base := []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--slot", "dbz", "--publication", "dbz_publication"}
	for _, c := range []struct {
		args []string
		want pipeline.Takeover
		err  string
	}{
		{args: []string{"--from-debezium-offset", "http://connect:8083/connectors/outbox", "--topic-prefix", "dbserver1"},
			want: pipeline.Takeover{Source: debezium.Source{Kind: debezium.SourceREST, URL: "http://connect:8083"},
				Selector: debezium.Selector{Connector: "outbox", Server: "dbserver1"}, Lookback: pipeline.DefaultTakeoverLookback}},
		{args: []string{"--from-debezium-offset", "kafka:connect-offsets", "--debezium-connector", "outbox", "--debezium-lookback", "30m"},
			want: pipeline.Takeover{Source: debezium.Source{Kind: debezium.SourceTopic, Topic: "connect-offsets"},
				Selector: debezium.Selector{Connector: "outbox"}, Lookback: 30 * time.Minute}},
		{args: []string{"--from-debezium-offset", "offsets.json"},
			want: pipeline.Takeover{Source: debezium.Source{Kind: debezium.SourceFile, Path: "offsets.json"}, Lookback: pipeline.DefaultTakeoverLookback}},
		{args: []string{"--from-debezium-offset", "http://connect:8083"}, err: "--from-debezium-offset ($WALSTREAM_FROM_DEBEZIUM_OFFSET): reading the offset from Kafka Connect's REST API needs the connector's name"},
		{args: []string{"--from-debezium-offset", "http://connect:8083/connectors/a", "--debezium-connector", "b"}, err: `--debezium-connector ($WALSTREAM_DEBEZIUM_CONNECTOR): "b", but --from-debezium-offset names connector "a"`},
		{args: []string{"--from-debezium-offset", "kafka:"}, err: "--from-debezium-offset"},
		{args: []string{"--from-debezium-offset", "f", "--debezium-lookback", "-1m"}, err: "--debezium-lookback ($WALSTREAM_DEBEZIUM_LOOKBACK): must not be negative"},
	} {
		got, err := Parse(Run, append(base[:len(base):len(base)], c.args...), &bytes.Buffer{})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error naming %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || got.Takeover != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.args, got.Takeover, err, c.want)
		}
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
		{"zero batch", append(base, "--max-batch-events", "0"), nil, []string{"--max-batch-events", "must be from 1 to"}},
		{"batch bytes overflow", append(base, "--max-batch-bytes", "4611686018427387904"), nil, []string{"--max-batch-bytes", "must be from 1 to 1073741824, got 4611686018427387904"}},
		{"queue bytes", append(base, "--queue-bytes", "-1"), nil, []string{"--queue-bytes", "must be from 1 to"}},
		{"record bytes", append(base, "--max-record-bytes", "2147483647"), nil, []string{"--max-record-bytes", "must be from 1 to"}},
		{"checkpoint topic", append(base, "--checkpoint-topic", "bad topic"), nil, []string{"--checkpoint-topic", `"bad topic"`}},
		{"checkpoint topic empty", append(base, "--checkpoint-topic", ""), nil, []string{"--checkpoint-topic"}},
		{"empty template", append(base, "--topic-template", ""), nil, []string{"--topic-template", "is empty"}},
		{"blank template", append(base, "--topic-template", "  "), nil, []string{"--topic-template", "is empty"}},
		{"broker port 0", []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092,k:0"}, nil, []string{"--kafka-brokers", `broker "k:0": port "0" is not from 1 to 65535`}},
		{"broker port high", []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:65536"}, nil, []string{"--kafka-brokers", `port "65536"`}},
		{"broker port name", []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:kafka"}, nil, []string{"--kafka-brokers", `port "kafka"`}},
		{"bad env duration", base, map[string]string{"WALSTREAM_LINGER": "5"}, []string{"WALSTREAM_LINGER", "a duration like 5ms"}},
		{"table not qualified", append(base, "--table", "outbox"), nil, []string{"--table", "schema-qualified"}},
		{"bad slot", append(base, "--slot", "My-Slot"), nil, []string{`--slot ($WALSTREAM_SLOT): slot name "My-Slot"`}},
		{"bad publication", append(base, "--publication", "p'x"), nil, []string{`--publication ($WALSTREAM_PUBLICATION): publication name "p'x"`}},
		{"bad table name", append(base, "--table", "public.out box"), nil, []string{`--table ($WALSTREAM_TABLE): table name "out box"`}},
		{"template", append(base, "--topic-template", "events.${kind}"), nil, []string{"--topic-template", `no group named "kind"`}},
		{"placement", append(base, "--additional-placement", "type:body"), nil, []string{"--additional-placement", `"body" is not header, envelope or partition`}},
		{"compression", append(base, "--compression", "brotli"), nil, []string{"--compression", `"brotli" is not one of snappy, lz4, zstd, gzip, none`}},
		{"on update", append(base, "--on-update", "ignore"), nil, []string{"--on-update", `"ignore" is not warn, error or fatal`}},
		{"table twice", append(base, "--table", "public.outbox,public.outbox"), nil, []string{"--table ($WALSTREAM_TABLE): table public.outbox is listed twice"}},
		{"slot and table", append(base, "--slot", "My-Slot", "--table", "public.outbox,public.outbox"), nil,
			[]string{`--slot ($WALSTREAM_SLOT): slot name "My-Slot"`, "--table ($WALSTREAM_TABLE): table public.outbox is listed twice"}},
		{"interval", append(base, "--status-interval", "0s"), nil, []string{"--status-interval", "must be positive"}},
		{"log level", append(base, "--log-level", "loud"), nil, []string{"--log-level", "loud"}},
		{"skip event", append(base, "--skip-event", "0/16B3748"), nil, []string{"--skip-event", "<commit LSN>:<ordinal>"}},
		{"skip event without a DLQ topic", append(base, "--skip-event", "0/16B3748:2", "--dlq-topic", "bad topic"), nil, []string{"--dlq-topic"}},
		{"accept recreated", append(base, "--accept-recreated-table", "public.outbox"), nil, []string{"--accept-recreated-table", "schema.table=<OID>"}},
		{"accept recreated OID", append(base, "--accept-recreated-table", "public.outbox=x"), nil, []string{"--accept-recreated-table", `OID "x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := Parse(Run, tc.args, &bytes.Buffer{})
			wantRefused(t, err, tc.want...)
			if strings.Contains(err.Error(), "($WALSTREAM_SLOT/") {
				t.Errorf("error names a variable that does not exist: %v", err)
			}
		})
	}
}

func TestConfigNeverPrintsThePassword(t *testing.T) {
	_, err := Parse(Run, []string{"--pg-url", "postgres://u:hunter2secret@h:notaport/db", "--kafka-brokers", "k:9092"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--pg-url") {
		t.Fatalf("err = %v, want a --pg-url error", err)
	}
	if strings.Contains(err.Error(), "hunter2secret") {
		t.Fatalf("error prints the password: %v", err)
	}
}

// A value a flag refuses may hold a credential (a Kafka Connect URL with
// its user and password): wherever it comes from, the error names the
// setting and never prints the secret.
func TestConfigNeverPrintsACredential(t *testing.T) {
	base := []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	for name, url := range map[string]string{"a URL": "http://admin:s3cr3t@connect:8083/connectors/x", "no host": "http://admin:s3cr3t@/connectors/x",
		"not a URL": "http://admin:s3cr3t@conn ect:8083/"} {
		t.Run(name, func(t *testing.T) {
			check := func(t *testing.T, err error, want string) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("err = %v, want an error naming %s", err, want)
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Fatalf("error prints the password: %v", err)
				}
			}
			t.Run("flag", func(t *testing.T) {
				_, err := Parse(Run, append(base, "--from-debezium-offset", url), &bytes.Buffer{})
				check(t, err, "--from-debezium-offset")
			})
			t.Run("environment", func(t *testing.T) {
				t.Setenv("WALSTREAM_FROM_DEBEZIUM_OFFSET", url)
				_, err := Parse(Run, base, &bytes.Buffer{})
				check(t, err, "$WALSTREAM_FROM_DEBEZIUM_OFFSET")
			})
			t.Run("config file", func(t *testing.T) {
				_, err := Parse(Run, append(base, "--config", writeFile(t, "from-debezium-offset: '"+url+"'\n")), &bytes.Buffer{})
				check(t, err, "line 1: from-debezium-offset")
			})
		})
	}
}

func TestRunHelpListsEnvironment(t *testing.T) {
	var stderr bytes.Buffer
	_, err := Parse(Run, []string{"--help"}, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"$WALSTREAM_PG_URL", "$WALSTREAM_KAFKA_BROKERS", "$WALSTREAM_SLOT", "$WALSTREAM_PUBLICATION",
		"$WALSTREAM_TABLE", "$WALSTREAM_TOPIC_TEMPLATE", "$WALSTREAM_CHECKPOINT_TOPIC", "$WALSTREAM_TRANSACTIONAL_ID",
		"$WALSTREAM_MAX_BATCH_EVENTS", "$WALSTREAM_HTTP_ADDR", "$WALSTREAM_CREATE"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("run --help does not document %s", want)
		}
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "walstream.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A Debezium user copies the router settings, prefixed as in a connector
// config or not, into the outbox section; tables override them per table.
func TestConfigFileDebeziumSettings(t *testing.T) {
	t.Setenv("TEST_PG_URL", "postgres://walstream@db:5432/app")
	t.Setenv("WALSTREAM_LINGER", "7ms")
	path := writeFile(t, `
pg-url: ${TEST_PG_URL}
kafka-brokers: k:9092
linger: 1s
slot: ${TEST_SLOT:-orders_slot}
converter: json
outbox:
  transforms.outbox.type: io.debezium.transforms.outbox.EventRouter
  transforms.outbox.table.field.event.key: aggregateid
  route.topic.replacement: ${routedByValue}.events
  table.fields.additional.placement: type:header:eventType
  debezium.op.invalid.behavior: fatal
tables:
  orders.outbox:
  billing.outbox:
    table.field.event.id: event_id
    route.by.field: kind
    table.field.event.timestamp: created_at
    route.topic.replacement: billing.${routedByValue}
`)
	c, err := Parse(Run, []string{"--config", path, "--message-prefix", "app"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.PGURL != "postgres://walstream@db:5432/app" || c.Slot != "orders_slot" || c.Converter != "json" || c.MessagePrefix != "app" {
		t.Errorf("settings from the file: %+v", c)
	}
	if c.Linger != 7*time.Millisecond {
		t.Errorf("Linger = %s: the environment must win over the file", c.Linger)
	}
	tables, messages := c.Outboxes, c.Messages
	if len(tables) != 2 || tables[0].Name() != "orders.outbox" || tables[1].Name() != "billing.outbox" {
		t.Fatalf("tables %v", tables)
	}
	orders, billing := tables[0], tables[1]
	if orders.Columns.ID != "id" || orders.TopicReplacement != "${routedByValue}.events" || orders.OnUpdate != decode.OpFatal ||
		len(orders.Additional) != 1 || orders.Additional[0].Alias != "eventType" {
		t.Errorf("orders.outbox has the shared settings: %+v", orders)
	}
	if billing.Columns.ID != "event_id" || billing.Columns.AggregateType != "kind" || billing.Columns.Timestamp != "created_at" ||
		billing.TopicReplacement != "billing.${routedByValue}" || billing.OnUpdate != decode.OpFatal {
		t.Errorf("billing.outbox has its own settings over the shared ones: %+v", billing)
	}
	if messages.Schema != "" || messages.TopicReplacement != "${routedByValue}.events" {
		t.Errorf("logical messages use the shared settings: %+v", messages)
	}
	if n := c.Names; len(n.Tables) != 2 || n.Tables[1].String() != "billing.outbox" {
		t.Errorf("names %+v", n)
	}
}

func TestConfigFileErrors(t *testing.T) {
	base := "pg-url: postgres://u@h/db\nkafka-brokers: k:9092\n"
	for _, tc := range []struct {
		name, body string
		args       []string
		want       []string
	}{
		{"unknown setting", base + "kafka-broker: x\n", nil, []string{"line 3", `unknown setting "kafka-broker"`}},
		{"unknown outbox key", base + "outbox:\n  route.by.feld: x\n", nil, []string{"line 4", `"route.by.feld" is not a Debezium outbox router setting`}},
		{"unsupported outbox key", base + "outbox:\n  tracing.operation.name: op\n", nil, []string{"line 4", "not supported", "opens no spans"}},
		{"keys and values in two registries", base + "key.converter: avro\nkey.converter.schema.registry.url: http://a:8081\nvalue.converter: avro\nvalue.converter.schema.registry.url: http://b:8081\n", nil,
			[]string{"line 6", "one schema registry"}},
		{"not the Confluent wire format", base + "value.converter: io.apicurio.registry.utils.converter.AvroConverter\nvalue.converter.apicurio.registry.as-confluent: false\n", nil,
			[]string{"line 4", "Confluent wire format"}},
		{"removed outbox key", base + "outbox:\n  transforms.x.table.field.event.type: type\n", nil, []string{"table.fields.additional.placement=type:header:eventType"}},
		{"not the outbox router", base + "outbox:\n  transforms.x.type: io.debezium.transforms.ExtractNewRecordState\n", nil, []string{"line 4", "ExtractNewRecordState"}},
		{"unset variable", base + "slot: ${WALSTREAM_TEST_UNSET}\n", nil, []string{"line 3", "WALSTREAM_TEST_UNSET is not set"}},
		{"bad value", base + "max-batch-events: many\n", nil, []string{"line 3", "max-batch-events", "many"}},
		{"bad table setting", base + "tables:\n  public.outbox:\n    table.op.invalid.behavior: explode\n", nil, []string{"tables.public.outbox", "explode"}},
		{"tables and --table", base + "tables:\n  public.outbox:\n", []string{"--table", "public.other"}, []string{"tables section and --table"}},
		{"nested value", base + "outbox:\n  route.by.field: [a, b]\n", nil, []string{"line 4", "single value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(Run, append([]string{"--config", writeFile(t, tc.body)}, tc.args...), &bytes.Buffer{})
			wantRefused(t, err, tc.want...)
		})
	}
}

func TestExpandEnv(t *testing.T) {
	t.Setenv("WS_A", "a")
	for in, want := range map[string]string{
		"${WS_A}-x": "a-x", "${WS_UNSET_B:-dflt}": "dflt", "$$5 ${WS_A}": "$5 a", "no refs": "no refs", "${routedByValue}x${WS_A}": "",
	} {
		got, err := expandEnv(in)
		if want == "" {
			if err == nil {
				t.Errorf("expandEnv(%q) = %q, want an error (routedByValue is not in the environment)", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("expandEnv(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// Converters are set as a Connect worker sets them: key.converter and
// value.converter, each with schemas.enable, which JsonConverterConfig
// defaults to true; --converter sets both, without schemas.
func TestConfigConverters(t *testing.T) {
	base := "pg-url: postgres://u@h/db\nkafka-brokers: k:9092\n"
	for _, tc := range []struct {
		name, body string
		args       []string
		key, value format.Converter
		err        string
	}{
		{"default", base, nil, format.String, format.String, ""},
		{"--converter json", base, []string{"--converter", "json"}, format.JSON, format.JSON, ""},
		{"connect classes, schemas by default", base + "key.converter: org.apache.kafka.connect.storage.StringConverter\nvalue.converter: org.apache.kafka.connect.json.JsonConverter\n",
			nil, format.String, format.JSONSchema, ""},
		{"schemas off", base + "key.converter: org.apache.kafka.connect.json.JsonConverter\nkey.converter.schemas.enable: false\nvalue.converter: org.apache.kafka.connect.json.JsonConverter\nvalue.converter.schemas.enable: \"false\"\n",
			nil, format.JSON, format.JSON, ""},
		{"value only", base + "value.converter: json\nvalue.converter.schemas.enable: true\n", []string{"--converter", "json"}, format.JSON, format.JSONSchema, ""},
		{"unknown class", base + "value.converter: io.confluent.connect.protobuf.ProtobufConverter\n", nil, 0, 0, "--value-converter"},
		{"avro without a registry", base + "value.converter: io.confluent.connect.avro.AvroConverter\n", nil, 0, 0, "--schema-registry-url"},
		{"avro", base + "key.converter: io.apicurio.registry.utils.converter.AvroConverter\nkey.converter.apicurio.registry.url: http://r:8080/apis/registry/v2\n" +
			"value.converter: io.apicurio.registry.utils.converter.AvroConverter\nvalue.converter.apicurio.registry.url: http://r:8080/apis/registry/v2\n",
			nil, format.Avro, format.Avro, ""},
		{"bad schemas.enable", base + "value.converter: json\nvalue.converter.schemas.enable: maybe\n", nil, 0, 0, "--value-converter-schemas-enable"},
		{"envelope schema needs topic.prefix", base + "value.converter: json\noutbox:\n  table.fields.additional.placement: type:envelope\n", nil, 0, 0, "--topic-prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(Run, append([]string{"--config", writeFile(t, tc.body)}, tc.args...), &bytes.Buffer{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to name %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if enc := c.Encoding; enc.Key != tc.key || enc.Value != tc.value {
				t.Fatalf("encoding = %+v; want key %v, value %v", enc, tc.key, tc.value)
			}
		})
	}
}

// Router settings refused in the shared mapping name their flag and
// Debezium key; Debezium 3.6's table.field.additional.missing and the
// JSON payload behaviours are taken.
func TestConfigRouterSettings(t *testing.T) {
	base := []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	c, err := Parse(Run, append(base, "--additional-missing", "ignore", "--json-payload-empty-array-behavior", "optional_string",
		"--json-payload-null-behavior", "optional_bytes", "--tracing-column", "traceparent"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	tables := c.Outboxes
	if !tables[0].AdditionalOptional || !tables[0].ExpandJSONEmptyArrays || !tables[0].ExpandJSONNulls || tables[0].Columns.Tracing != "traceparent" {
		t.Fatalf("outboxes = %+v", tables[0])
	}
	_, err = Parse(Run, append(base, "--additional-missing", "skip"), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--additional-missing") || !strings.Contains(err.Error(), "table.field.additional.missing") {
		t.Fatalf("err = %v, want it to name --additional-missing and its Debezium key", err)
	}
	_, err = Parse(Run, append(base, "--topic-regex", "(?<routedByValue>.*)(?!x)"), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--topic-regex") || !strings.Contains(err.Error(), "negative lookahead") {
		t.Fatalf("err = %v, want it to name the construct and the setting", err)
	}
}

// A connector config's Avro converter settings, Confluent's or
// Apicurio's, become walstream's one schema registry.
func TestConfigRegistry(t *testing.T) {
	base := "pg-url: postgres://u@h/db\nkafka-brokers: k:9092\ntopic-prefix: dbz\n"
	t.Run("confluent", func(t *testing.T) {
		t.Setenv("WS_SR_SECRET", "s3cret")
		c, err := Parse(Run, []string{"--config", writeFile(t, base+`key.converter: io.confluent.connect.avro.AvroConverter
key.converter.schema.registry.url: https://sr:8081
key.converter.basic.auth.credentials.source: USER_INFO
key.converter.basic.auth.user.info: app:${WS_SR_SECRET}
value.converter: io.confluent.connect.avro.AvroConverter
value.converter.schema.registry.url: https://sr:8081
value.converter.basic.auth.credentials.source: USER_INFO
value.converter.basic.auth.user.info: app:${WS_SR_SECRET}
value.converter.value.subject.name.strategy: io.confluent.kafka.serializers.subject.TopicRecordNameStrategy
value.converter.auto.register.schemas: false
value.converter.use.latest.version: true
`)}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		r := c.Encoding.Registry
		if c.Encoding.Key != format.Avro || c.Encoding.Value != format.Avro {
			t.Errorf("encoding %v/%v, want avro", c.Encoding.Key, c.Encoding.Value)
		}
		if len(r.URLs) != 1 || r.URLs[0] != "https://sr:8081" || r.User != "app" || r.Password != "s3cret" {
			t.Errorf("registry %v user %q password %q", r.URLs, r.User, r.Password)
		}
		if r.KeyStrategy != format.SubjectTopic || r.ValueStrategy != format.SubjectTopicRecord || r.AutoRegister || !r.UseLatest {
			t.Errorf("strategies %v/%v, auto-register %v, use latest %v", r.KeyStrategy, r.ValueStrategy, r.AutoRegister, r.UseLatest)
		}
	})
	t.Run("apicurio", func(t *testing.T) {
		ca := testenv.NewCA(t, "registry-ca").CertFile
		token := writeFile(t, "tok\n")
		c, err := Parse(Run, []string{"--config", writeFile(t, base+`value.converter: io.apicurio.registry.utils.converter.AvroConverter
value.converter.apicurio.registry.url: http://registry:8080/apis/registry/v2
value.converter.apicurio.registry.auto-register: true
value.converter.apicurio.registry.find-latest: true
value.converter.apicurio.registry.as-confluent: true
value.converter.apicurio.registry.use-id: contentId
value.converter.apicurio.registry.headers.enabled: false
`), "--schema-registry-token-file", token, "--schema-registry-tls-ca-file", ca}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		r := c.Encoding.Registry
		if len(r.URLs) != 1 || r.URLs[0] != "http://registry:8080/apis/ccompat/v7" {
			t.Errorf("URLs %v, want the ccompat API", r.URLs)
		}
		if r.Token != "tok" || r.TLS == nil || r.TLS.CA == nil || r.TLS.CA.Path != ca || !r.AutoRegister {
			t.Errorf("token %q, TLS %v, auto-register %v", r.Token, r.TLS, r.AutoRegister)
		}
	})
}

// wantRefused checks that err refuses the settings, mentioning each of
// want.
func wantRefused(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}
