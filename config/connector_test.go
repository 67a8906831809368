package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/publish/format"
	"go.yaml.in/yaml/v3"
)

// harnessConnector is a connector config as compat's harness gives it to
// Kafka Connect (testenv.Connect.DebeziumConnector plus a case's router
// and converter settings), in the form of POST /connectors.
const harnessConnector = `{
  "name": "placements_json",
  "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.dbname": "postgres",
    "database.hostname": "127.0.0.1",
    "database.port": "21951",
    "database.user": "postgres",
    "database.password": "s3cr'et",
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "plugin.name": "pgoutput",
    "publication.autocreate.mode": "filtered",
    "publication.name": "dbz_placements_json",
    "slot.name": "dbz_placements_json",
    "snapshot.mode": "no_data",
    "table.include.list": "c_placements_json.outbox",
    "tasks.max": "1",
    "tombstones.on.delete": "false",
    "topic.prefix": "placements_json",
    "transforms": "outbox",
    "transforms.outbox.route.topic.regex": "(?<routedByValue>Ord|Inv)(er|oice)",
    "transforms.outbox.route.topic.replacement": "events.${routedByValue}.$2",
    "transforms.outbox.table.field.event.timestamp": "created_at",
    "transforms.outbox.table.fields.additional.placement": "type:header:eventType, shard:partition,tenant:envelope",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false"
  }
}`

func writeNamed(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConnectorConfig: the connector config Debezium runs is walstream's
// config as it is, in each form a Debezium user has it: the settings map
// onto walstream's, a router setting with its transform's prefix, the
// database.* keys onto the connection (the password too, never logged),
// and the keys walstream has no use for are kept to be logged once.
func TestConnectorConfig(t *testing.T) {
	props := `# ConnectStandalone's connector file
name=placements_json
connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname = 127.0.0.1
database.port:21951
database.user postgres
database.password=s3cr'et
database.dbname=postgres
plugin.name=pgoutput
slot.name=dbz_placements_json
publication.name=dbz_placements_json
publication.autocreate.mode=filtered
table.include.list=c_placements_json\\.outbox
snapshot.mode=no_data
tombstones.on.delete=false
tasks.max=1
topic.prefix=placements_json
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.route.topic.regex=(?<routedByValue>Ord|Inv)(er|oice)
transforms.outbox.route.topic.replacement=events.${routedByValue}.$2
transforms.outbox.table.field.event.timestamp=created_at
transforms.outbox.table.fields.additional.placement=type:header:eventType, \
   shard:partition,tenant:envelope
key.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=false
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
`
	strimzi := `apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaConnector
metadata:
  name: placements_json
  labels:
    strimzi.io/cluster: connect
spec:
  class: io.debezium.connector.postgresql.PostgresConnector
  tasksMax: 1
  config:
    database.hostname: 127.0.0.1
    database.port: 21951
    database.user: postgres
    database.password: "s3cr'et"
    database.dbname: postgres
    plugin.name: pgoutput
    slot.name: dbz_placements_json
    publication.name: dbz_placements_json
    publication.autocreate.mode: filtered
    table.include.list: c_placements_json.outbox
    snapshot.mode: no_data
    tombstones.on.delete: false
    topic.prefix: placements_json
    transforms: outbox
    transforms.outbox.type: io.debezium.transforms.outbox.EventRouter
    transforms.outbox.route.topic.regex: "(?<routedByValue>Ord|Inv)(er|oice)"
    transforms.outbox.route.topic.replacement: "events.${routedByValue}.$2"
    transforms.outbox.table.field.event.timestamp: created_at
    transforms.outbox.table.fields.additional.placement: "type:header:eventType, shard:partition,tenant:envelope"
    key.converter: org.apache.kafka.connect.json.JsonConverter
    key.converter.schemas.enable: false
    value.converter: org.apache.kafka.connect.json.JsonConverter
    value.converter.schemas.enable: false
`
	for _, tc := range []struct{ name, file, body string }{
		{"JSON", "connector.json", harnessConnector},
		{"properties", "connector.properties", props},
		{"Strimzi KafkaConnector", "connector.yaml", strimzi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(Run, []string{"--config", writeNamed(t, tc.file, tc.body), "--kafka-brokers", "k:9092"}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Connector != tc.name {
				t.Errorf("form %q, want %q", c.Connector, tc.name)
			}
			pg := c.Postgres
			if pg.Host != "127.0.0.1" || pg.Port != 21951 || pg.User != "postgres" || pg.Password != "s3cr'et" || pg.Database != "postgres" {
				t.Errorf("connection %s:%d user %s database %s password %q", pg.Host, pg.Port, pg.User, pg.Database, pg.Password)
			}
			if c.Slot != "dbz_placements_json" || c.Publication != "dbz_placements_json" || c.Table != "c_placements_json.outbox" {
				t.Errorf("slot %s publication %s table %s", c.Slot, c.Publication, c.Table)
			}
			if c.Encoding.Key != format.JSON || c.Encoding.Value != format.JSON || c.Encoding.SchemaPrefix != "placements_json" {
				t.Errorf("encoding %+v", c.Encoding)
			}
			if !c.ExtendedHeaders || len(c.Encoding.Context) != 4 || string(c.Encoding.Context[0].Value) != "placements_json" {
				t.Errorf("extended headers %v %q: Debezium's default is on", c.ExtendedHeaders, c.Encoding.Context)
			}
			if c.MessagePrefix != "" {
				t.Errorf("message prefix %q: without the decoder, an outbox takes no logical messages", c.MessagePrefix)
			}
			o := c.Outboxes[0]
			if o.Name() != "c_placements_json.outbox" || o.Columns.Timestamp != "created_at" || o.TopicReplacement != "events.${routedByValue}.$2" ||
				len(o.Additional) != 3 || o.Additional[1] != (decode.Additional{Column: "shard", Placement: decode.PlacePartition, Alias: "shard"}) {
				t.Errorf("mapping %+v", o)
			}
			var ignored []string
			for _, k := range c.Ignored {
				ignored = append(ignored, k.Key)
			}
			if got := strings.Join(ignored, ","); got != "publication.autocreate.mode,snapshot.mode,tasks.max,tombstones.on.delete" {
				t.Errorf("ignored keys %s", got)
			}
			// The connector's name is what --from-debezium-offset reads the
			// offset of.
			if c.Takeover.Selector != (debezium.Selector{Connector: "placements_json", Server: "placements_json"}) || c.Takeover.Enabled() {
				t.Errorf("takeover %+v: the connector named, no takeover unless asked for", c.Takeover)
			}
		})
	}
}

// TestConnectorConfigRefused: a key whose behaviour walstream cannot give
// is an error naming the key (and its line, where the form has lines); a
// config that leaves the converters to the worker is refused, since
// walstream cannot see the worker's.
func TestConnectorConfigRefused(t *testing.T) {
	parse := func(body string) error {
		_, err := Parse(Run, []string{"--config", writeNamed(t, "c.json", body), "--kafka-brokers", "k:9092"}, &bytes.Buffer{})
		return err
	}
	for _, tc := range []struct{ old, new, want string }{
		{`"tasks.max": "1",`, `"tasks.max": "1", "decimal.handling.mode": "double",`, `decimal.handling.mode: "double"`},
		{`"plugin.name": "pgoutput"`, `"plugin.name": "decoderbufs"`, "plugin.name"},
		{`"snapshot.mode": "no_data"`, `"snapshot.mode": "always"`, "snapshot.mode"},
		{`"table.include.list": "c_placements_json.outbox"`, `"table.include.list": "public\\.outbox.*"`, "is a pattern"},
		{`"tasks.max": "1",`, `"tasks.max": "1", "errors.tolerance": "all",`, "--on-error=dead-letter"},
		{`"tasks.max": "1",`, `"tasks.max": "1", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",`, "transform unwrap is not in transforms=outbox"},
		{`"transforms": "outbox"`, `"transforms": "unwrap,outbox", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"`, "transforms.unwrap.type"},
		{`"tasks.max": "1",`, `"tasks.max": "1", "header.converter": "org.apache.kafka.connect.json.JsonConverter",`, "SimpleHeaderConverter"},
		{`"database.password": "s3cr'et"`, `"database.password": "${vault:secret/db:password}"`, `config provider "vault"`},
		{`"tasks.max": "1",`, `"tasks.max": "1", "message.prefix.exclude.list": "audit",`, "message.prefix.exclude.list"},
		{`"tasks.max": "1",`, `"tasks.max": "1", "column.mask.with.4.chars": "public.t.c",`, "column.mask.with.4.chars"},
		{`"tasks.max": "1",`, `"tasks.max": "1", "transforms.outbox.table.field.event.type": "type",`, "removed in Debezium 2.0"},
		{`"tasks.max": "1",`, `"tasks.max": "1", "some.typo": "x",`, `some.typo: is not a key walstream knows`},
		{`"connector.class": "io.debezium.connector.postgresql.PostgresConnector"`, `"connector.class": "io.debezium.connector.mysql.MySqlConnector"`, "connector.class"},
		{`"table.include.list": "c_placements_json.outbox",`, ``, "table.include.list: is required"},
		{`"key.converter": "org.apache.kafka.connect.json.JsonConverter",`, ``, "key.converter is not set"},
		{`"transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",`, ``, "transforms.outbox.type: is missing"},
		{`"topic.prefix": "placements_json",`, ``, "topic.prefix: is required"},
	} {
		if !strings.Contains(harnessConnector, tc.old) {
			t.Fatalf("the config has no %s", tc.old)
		}
		if err := parse(strings.Replace(harnessConnector, tc.old, tc.new, 1)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("with %s: %v, want an error naming %q", tc.new, err, tc.want)
		}
	}
	// Values that change nothing are taken.
	if err := parse(strings.Replace(harnessConnector, `"tasks.max": "1",`,
		`"tasks.max": "1", "decimal.handling.mode": "PRECISE", "heartbeat.interval.ms": "10000", "exactly.once.support": "required",`, 1)); err != nil {
		t.Fatal(err)
	}
	// A properties file names the line.
	_, err := Parse(Run, []string{"--config", writeNamed(t, "c.properties", "connector.class=io.debezium.connector.postgresql.PostgresConnector\n\nbinary.handling.mode=hex\n"),
		"--kafka-brokers", "k:9092"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "line 3: binary.handling.mode") {
		t.Errorf("properties: %v, want the line named", err)
	}
}

// A connector key whose value walstream's checks refuse is named with its
// file and line, as a key Translate refuses is, beside the setting it
// became; a setting it only derives from (--confirm-interval, within the
// status interval) is not blamed as well.
func TestConnectorConfigValueRefused(t *testing.T) {
	props := strings.Join([]string{"connector.class=io.debezium.connector.postgresql.PostgresConnector", "database.hostname=db", "topic.prefix=dbz",
		"table.include.list=public.outbox", "transforms=outbox", "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter",
		"key.converter=org.apache.kafka.connect.storage.StringConverter", "value.converter=org.apache.kafka.connect.storage.StringConverter",
		"status.update.interval.ms=0", "incremental.snapshot.chunk.size=0"}, "\n")
	path := writeNamed(t, "c.properties", props+"\n")
	_, err := Parse(Run, []string{"--config", path, "--kafka-brokers", "k:9092"}, &bytes.Buffer{})
	wantRefused(t, err, "connector config "+path+", line 9: status.update.interval.ms (--status-interval): must be positive",
		"connector config "+path+", line 10: incremental.snapshot.chunk.size (--reemit-chunk-rows): must be at least 1")
	if strings.Contains(err.Error(), "confirm-interval") {
		t.Errorf("error blames --confirm-interval, which nothing set: %v", err)
	}
	// Set by a flag, the setting is the flag's, named as ever.
	_, err = Parse(Run, []string{"--config", path, "--kafka-brokers", "k:9092", "--status-interval", "0s", "--reemit-chunk-rows", "5"}, &bytes.Buffer{})
	wantRefused(t, err, "--status-interval ($WALSTREAM_STATUS_INTERVAL): must be positive")
	if strings.Contains(err.Error(), "status.update.interval.ms") {
		t.Errorf("error names the connector key the flag overrode: %v", err)
	}
}

// TestConnectorConfigMessagesAndProviders: Debezium's message decoder
// before the router takes the logical messages of every prefix, or of the
// one message.prefix.include.list names; flags win over the file; the env
// and file config providers are read; Debezium's defaults apply to keys
// the config leaves out.
func TestConnectorConfigMessagesAndProviders(t *testing.T) {
	secrets := writeNamed(t, "db.properties", "password=from-file\n")
	t.Setenv("WS_TEST_DB_USER", "dbz")
	cfg := `{"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
		"database.hostname": "db", "database.user": "${env:WS_TEST_DB_USER}", "database.password": "${file:` + secrets + `:password}",
		"database.dbname": "app", "topic.prefix": "dbz", "table.include.list": "public.outbox",
		"transforms": "decode,outbox",
		"transforms.decode.type": "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent",
		"transforms.decode.fields.null.include": "true",
		"transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
		"key.converter": "org.apache.kafka.connect.storage.StringConverter",
		"value.converter": "org.apache.kafka.connect.storage.StringConverter",
		"extended.headers.enabled": "false"}`
	path := writeNamed(t, "c.json", cfg)
	c, err := Parse(Run, []string{"--config", path, "--kafka-brokers", "k:9092", "--publication", "mine"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.MessagePrefix != decode.AllPrefixes || !c.Messages.MessageNullFields || c.ExtendedHeaders {
		t.Errorf("message prefix %q, null fields %v, extended headers %v", c.MessagePrefix, c.Messages.MessageNullFields, c.ExtendedHeaders)
	}
	if c.Postgres.User != "dbz" || c.Postgres.Password != "from-file" || c.Postgres.Port != 5432 {
		t.Errorf("user %s password %q port %d", c.Postgres.User, c.Postgres.Password, c.Postgres.Port)
	}
	if c.Slot != "debezium" || c.Publication != "mine" {
		t.Errorf("slot %s publication %s: want Debezium's default slot and the flag's publication", c.Slot, c.Publication)
	}
	one := strings.Replace(cfg, `"extended.headers.enabled": "false"`, `"message.prefix.include.list": "outbox"`, 1)
	if c, err = Parse(Run, []string{"--config", writeNamed(t, "c.json", one), "--kafka-brokers", "k:9092"}, &bytes.Buffer{}); err != nil || c.MessagePrefix != "outbox" {
		t.Errorf("one prefix: %q, %v", c.MessagePrefix, err)
	}
	after := strings.Replace(cfg, `"transforms": "decode,outbox"`, `"transforms": "outbox,decode"`, 1)
	if _, err := Parse(Run, []string{"--config", writeNamed(t, "c.json", after), "--kafka-brokers", "k:9092"}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "comes after the outbox router") {
		t.Errorf("the decoder after the router: %v", err)
	}
}

// TestInitFromDebezium: init --from-debezium prints a walstream config that
// reads back as the connector config does, without the password.
func TestInitFromDebezium(t *testing.T) {
	path := writeNamed(t, "connector.json", harnessConnector)
	var out bytes.Buffer
	if err := PrintFromDebezium(&out, path); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cr") {
		t.Fatalf("the printed config holds the password:\n%s", out.String())
	}
	var doc map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	t.Setenv("KAFKA_BROKERS", "k:9092")
	t.Setenv("PGPASSWORD", "s3cr'et")
	printed, err := Parse(Run, []string{"--config", writeFile(t, out.String())}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	pasted, err := Parse(Run, []string{"--config", path, "--kafka-brokers", "k:9092"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	p, q := printed.Outboxes[0], pasted.Outboxes[0]
	if printed.Slot != pasted.Slot || printed.Table != pasted.Table || printed.Encoding.Key != pasted.Encoding.Key ||
		printed.ExtendedHeaders != pasted.ExtendedHeaders || p.TopicRegex != q.TopicRegex || p.TopicReplacement != q.TopicReplacement ||
		len(p.Additional) != len(q.Additional) || printed.Postgres.Host != pasted.Postgres.Host || printed.Postgres.Password != pasted.Postgres.Password {
		t.Errorf("the printed config reads back otherwise:\n%s", out.String())
	}
	for _, want := range []string{"# keys walstream has no use for:", "#   tasks.max:", "kafka-brokers: ${KAFKA_BROKERS}"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The TLS key's password (database.sslpassword) is a secret as the
// database password is: init --from-debezium leaves it out of the printed
// config and says where walstream reads it.
func TestInitFromDebeziumSSLPassword(t *testing.T) {
	connector := strings.Replace(harnessConnector, `"database.user": "postgres",`,
		`"database.user": "postgres", "database.sslmode": "verify-full", "database.sslkey": "/tls/client.key", "database.sslpassword": "k3yPassw0rd",`, 1)
	var out bytes.Buffer
	if err := PrintFromDebezium(&out, writeNamed(t, "connector.json", connector)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "k3yPassw0rd") || strings.Contains(out.String(), "sslpassword=") {
		t.Fatalf("the printed config holds the TLS key's password:\n%s", out.String())
	}
	for _, want := range []string{"sslkey='/tls/client.key'", "# the TLS key's password (database.sslpassword) is not copied: walstream reads it from $PGSSLPASSWORD"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestConnectorConfigRemoteSecrets: walstream fetches the secrets of the
// keys it uses only. A key it ignores is not resolved; init
// --from-debezium fetches none and prints, for a setting that refers to
// one, where walstream run reads it. The process runs in no pod and no
// AWS region, so a fetch would fail.
func TestConnectorConfigRemoteSecrets(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ignored := strings.Replace(harnessConnector, `"tasks.max": "1",`, `"tasks.max": "1", "producer.override.sasl.jaas.config": "${secretsmanager:msk/jaas:config}",`, 1)
	if _, err := Parse(Run, []string{"--config", writeNamed(t, "c.json", ignored), "--kafka-brokers", "k:9092"}, &bytes.Buffer{}); err != nil {
		t.Errorf("a secret in a key walstream ignores: %v", err)
	}

	remote := strings.NewReplacer(`"database.user": "postgres",`, `"database.user": "${k8s:db-creds:user}",`,
		`"database.password": "s3cr'et",`, `"database.password": "${k8s:db-creds:password}",
    "config.providers": "k8s", "config.providers.k8s.class": "io.strimzi.kafka.KubernetesSecretConfigProvider",`).Replace(harnessConnector)
	var out bytes.Buffer
	if err := PrintFromDebezium(&out, writeNamed(t, "connector.json", remote)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "db-creds:password") || !strings.Contains(out.String(), "# pg-url: from database.*, which refers to ${k8s:db-creds:user}") {
		t.Errorf("init --from-debezium printed:\n%s", out.String())
	}
}

// avroConnector is harnessConnector with Apicurio's AvroConverter, set as
// Debezium's documentation sets it, for keys and values.
var avroConnector = strings.NewReplacer(
	`"key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",`,
	`"key.converter": "io.apicurio.registry.utils.converter.AvroConverter",
    "key.converter.apicurio.registry.url": "http://apicurio:8080/apis/registry/v2",
    "key.converter.apicurio.registry.auto-register": "true",
    "key.converter.apicurio.registry.find-latest": "true",
    "key.converter.apicurio.registry.as-confluent": "true",
    "key.converter.apicurio.registry.use-id": "contentId",
    "key.converter.apicurio.registry.headers.enabled": "false",`,
	`"value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false"`,
	`"value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
    "value.converter.apicurio.registry.url": "http://apicurio:8080/apis/registry/v2",
    "value.converter.apicurio.registry.auto-register": "true",
    "value.converter.apicurio.registry.find-latest": "true",
    "value.converter.apicurio.registry.as-confluent": "true",
    "value.converter.apicurio.registry.use-id": "contentId",
    "value.converter.apicurio.registry.headers.enabled": "false"`).Replace(harnessConnector)

// TestConnectorConfigAvro: a connector config with Apicurio's or
// Confluent's AvroConverter runs as it is, its registry settings mapped as
// walstream's config file maps them; settings walstream cannot honour are
// refused naming the key.
func TestConnectorConfigAvro(t *testing.T) {
	if avroConnector == harnessConnector {
		t.Fatal("the Avro converters were not put in the config")
	}
	parse := func(name, body string, args ...string) (*Config, error) {
		return Parse(Run, append([]string{"--config", writeNamed(t, name, body), "--kafka-brokers", "k:9092"}, args...), &bytes.Buffer{})
	}
	c, err := parse("connector.json", avroConnector)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Encoding.Registry
	if c.Encoding.Key != format.Avro || c.Encoding.Value != format.Avro {
		t.Errorf("encoding %v/%v, want avro", c.Encoding.Key, c.Encoding.Value)
	}
	if len(r.URLs) != 1 || r.URLs[0] != "http://apicurio:8080/apis/ccompat/v7" || !r.AutoRegister || !r.UseLatest {
		t.Errorf("registry %v, auto-register %v, use latest %v", r.URLs, r.AutoRegister, r.UseLatest)
	}
	if c, err := parse("connector.json", avroConnector, "--schema-registry-url", "http://other:8081"); err != nil || c.Encoding.Registry.URLs[0] != "http://other:8081" {
		t.Errorf("the flag does not win over the file: %v, %v", c.Encoding.Registry.URLs, err)
	}

	// docs/debezium.md's Confluent converter settings, the secret's file in
	// a test folder, and auto-registration off.
	secrets := writeNamed(t, "sr.properties", "user-info=app:pa:ss\n")
	block := testenv.DocsBlock(t, "debezium.md", "## Avro and a schema registry", "```properties")
	if !strings.Contains(block, "/etc/kafka/secrets/registry.properties") {
		t.Fatalf("docs/debezium.md's Confluent settings read no secret from /etc/kafka/secrets/registry.properties:\n%s", block)
	}
	confluent := `connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=db
database.dbname=app
topic.prefix=dbz
table.include.list=public.outbox
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
` + strings.ReplaceAll(block, "/etc/kafka/secrets/registry.properties", secrets) + `value.converter.auto.register.schemas=false
value.converter.use.latest.version=true
`
	if c, err = parse("connector.properties", confluent); err != nil {
		t.Fatal(err)
	}
	r = c.Encoding.Registry
	if len(r.URLs) != 1 || r.URLs[0] != "https://registry:8081" || r.User != "app" || r.Password != "pa:ss" {
		t.Errorf("registry %v user %q password %q", r.URLs, r.User, r.Password)
	}
	if r.KeyStrategy != format.SubjectTopic || r.ValueStrategy != format.SubjectTopicRecord || r.AutoRegister || !r.UseLatest {
		t.Errorf("strategies %v/%v, auto-register %v, use latest %v", r.KeyStrategy, r.ValueStrategy, r.AutoRegister, r.UseLatest)
	}

	for _, tc := range []struct{ old, new, want string }{
		{`"value.converter.apicurio.registry.as-confluent": "true"`, `"value.converter.apicurio.registry.as-confluent": "false"`,
			`value.converter.apicurio.registry.as-confluent: is "false"; walstream writes the Confluent wire format`},
		{`"value.converter.apicurio.registry.url": "http://apicurio:8080/apis/registry/v2"`, `"value.converter.apicurio.registry.url": "http://other:8080/apis/registry/v2"`,
			"one schema registry"},
		{`"key.converter.apicurio.registry.auto-register": "true"`, `"key.converter.apicurio.registry.auto-register": "maybe"`,
			`key.converter.apicurio.registry.auto-register: "maybe"`},
		{`"value.converter.apicurio.registry.use-id": "contentId"`, `"value.converter.apicurio.registry.use-id": "contentId", "value.converter.apicurio.registry.check-period-ms": "1"`,
			`value.converter.apicurio.registry.check-period-ms: "1": is not a converter setting walstream knows`},
		{`"value.converter.apicurio.registry.use-id": "contentId"`, `"value.converter.apicurio.registry.use-id": "contentId", "value.converter.connect.meta.data": "false"`,
			"connect.meta.data"},
	} {
		if !strings.Contains(avroConnector, tc.old) {
			t.Fatalf("the config has no %s", tc.old)
		}
		if _, err := parse("c.json", strings.Replace(avroConnector, tc.old, tc.new, 1)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("with %s: %v, want an error naming %q", tc.new, err, tc.want)
		}
	}

	// init --from-debezium leaves the registry's password out, and the
	// printed config reads back as the connector config does.
	var out bytes.Buffer
	if err := PrintFromDebezium(&out, writeNamed(t, "connector.properties", confluent)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "pa:ss") || !strings.Contains(out.String(), "$"+EnvRegistryPassword) {
		t.Fatalf("the printed config holds the password, or does not say where it goes:\n%s", out.String())
	}
	t.Setenv("KAFKA_BROKERS", "k:9092")
	t.Setenv(EnvRegistryPassword, "pa:ss")
	printed, err := Parse(Run, []string{"--config", writeFile(t, out.String())}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if p := printed.Encoding.Registry; p.URLs[0] != r.URLs[0] || p.User != r.User || p.Password != r.Password || p.ValueStrategy != r.ValueStrategy ||
		p.AutoRegister != r.AutoRegister || p.UseLatest != r.UseLatest || printed.Encoding.Value != format.Avro {
		t.Errorf("the printed config reads back otherwise: %+v\n%s", p, out.String())
	}
}

// TestConnectorConfigSignals: a connector config with Debezium's signal
// table sets walstream's, with its incremental snapshots' chunk size; the
// router's TopicNameMatches predicate, which such configs need, is taken
// when it lets every outbox table's records through, and refused when it
// does not; without the source channel there is no signal table.
func TestConnectorConfigSignals(t *testing.T) {
	const signals = `"tasks.max": "1",
    "signal.data.collection": "c_placements_json.debezium_signal",
    "incremental.snapshot.chunk.size": "512",
    "transforms.outbox.predicate": "isOutbox",
    "predicates": "isOutbox",
    "predicates.isOutbox.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
    "predicates.isOutbox.pattern": "placements_json\\.c_placements_json\\.outbox",`
	parse := func(body string) (*Config, error) {
		return Parse(Run, []string{"--config", writeNamed(t, "c.json", body), "--kafka-brokers", "k:9092"}, &bytes.Buffer{})
	}
	withSignals := strings.Replace(harnessConnector, `"tasks.max": "1",`, signals, 1)
	cfg, err := parse(withSignals)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Reemit.SignalTable != "c_placements_json.debezium_signal" || cfg.Reemit.ChunkRows != 512 {
		t.Errorf("signal table %q, chunk rows %d", cfg.Reemit.SignalTable, cfg.Reemit.ChunkRows)
	}
	noted := false
	for _, k := range cfg.Ignored {
		noted = noted || k.Key == "transforms.outbox.predicate"
	}
	if !noted {
		t.Errorf("the predicate is not noted: %+v", cfg.Ignored)
	}
	for _, tc := range []struct{ old, new, want string }{
		{`"placements_json\\.c_placements_json\\.outbox"`, `"placements_json\\.c_placements_json\\.debezium_signal"`, "leaves out the records of outbox table c_placements_json.outbox"},
		{`"predicates.isOutbox.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"`,
			`"predicates.isOutbox.type": "org.apache.kafka.connect.transforms.predicates.HasHeaderKey"`, "TopicNameMatches on the outbox router only"},
		{`"predicates": "isOutbox",`, `"predicates": "isOutbox,other", "predicates.other.type": "x",`, "predicate other is not the outbox router's"},
		{`"transforms.outbox.predicate": "isOutbox",`, `"transforms.outbox.predicate": "missing",`, "predicate missing is not in predicates=isOutbox"},
	} {
		if _, err := parse(strings.Replace(withSignals, tc.old, tc.new, 1)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("with %s: %v, want an error naming %q", tc.new, err, tc.want)
		}
	}
	cfg, err = parse(strings.Replace(withSignals, `"predicates": "isOutbox",`, `"predicates": "isOutbox", "signal.enabled.channels": "kafka",`, 1))
	if err != nil || cfg.Reemit.SignalTable != "" {
		t.Errorf("without the source channel: signal table %q, %v", cfg.Reemit.SignalTable, err)
	}
}
