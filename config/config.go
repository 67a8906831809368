package config

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/group"
	"github.com/walstream/walstream/internal/secret"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/pipeline"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
)

const defaultHTTPAddr = "127.0.0.1:9187"

// Values of --fleet.
const (
	fleetAuto = "auto"
	fleetOn   = "on"
	fleetOff  = "off"
)

// Policies for rows that cannot become records (--on-error).
const (
	onErrorFail       = "fail"
	onErrorDeadLetter = "dead-letter"
)

// Config is a command's settings: pipeline.Config, whose fields flags set
// where they take them as they are, and the text of the others, which
// build parses into it.
type Config struct {
	pipeline.Config
	// Router is the outbox router settings every table shares, by Debezium
	// key; TableSettings are a config file's own settings of each table,
	// by schema-qualified name.
	Router                                                                     map[string]string
	TableSettings                                                              map[string]map[string]string
	ConfigFile, PGURL, PGPasswordFile, Brokers, Slot, Publication, Table       string
	PGAWSIAMAuth                                                               bool
	PGAWSRegion                                                                string
	KafkaTLS                                                                   bool
	KafkaTLSCAFile, KafkaTLSCertFile, KafkaTLSKeyFile, KafkaTLSServerName      string
	KafkaSASLMechanism, KafkaSASLUser, KafkaSASLPasswordFile                   string
	KafkaOAuthTokenFile, KafkaOAuthTokenURL, KafkaOAuthClientID                string
	KafkaOAuthClientSecretFile, KafkaOAuthScope                                string
	Converter, KeyConverter, ValueConverter, KeySchemas, ValueSchemas, OnError string
	KeyStrategy, ValueStrategy                                                 string
	RegistryURL, RegistryUser, RegistryPasswordFile, RegistryTokenFile         string
	RegistryTLSCAFile, RegistryTLSCertFile, RegistryTLSKeyFile                 string
	RegistryTLSServerName                                                      string
	CompressionText, SkipEventText, AcceptRecreatedText                        string
	HTTPAddr, HTTPConfigFile, PprofAddr, LogLevel, LogFormat                   string
	// FleetMembership is --fleet: auto, on or off; build resolves it into
	// Fleet.Group, empty when the process joins no fleet's group.
	FleetMembership string
	// ExtendedHeaders adds Debezium's __debezium.context.* headers;
	// MessageNullFields keeps a logical message's null fields, as
	// DecodeLogicalDecodingMessageContent's fields.null.include does.
	ExtendedHeaders, MessageNullFields bool
	// Connector is the form of the Debezium connector config --config
	// named ("" for walstream's own YAML), and Ignored the keys of it that
	// walstream has no use for, logged once at startup.
	Connector string
	Ignored   []debezium.IgnoredKey
	// Unresolved are the connector config's config provider references
	// the command left as written (Command.Secrets), in the settings they
	// set; resolving says which it reads.
	Unresolved []debezium.Unresolved
	resolving  debezium.Resolving
	// connectorKeys names, by setting, the connector config's key that
	// set it and where that key is (Connector.At), so that a value
	// Validate refuses is named where the user wrote it.
	connectorKeys map[string]string
	// NamesWarning, when set, says why the checkpoint key and the
	// transactional id, one set and one derived, are fragile; logged at
	// start.
	NamesWarning string
	// registryPassword and registryToken are the secrets a config file's
	// converter settings give, which have no flags.
	registryPassword, registryToken string
	// takeoverName is the connector's name --from-debezium-offset's URL
	// gives.
	takeoverName string
	// listed: the stream is an entry of a config file's streams: list,
	// which --fleet=auto shares among the processes of the config.
	listed bool
}

// Setting is one flag; its environment variable (EnvName) and its config
// file key are its Name. field names the pipeline.Config fields it sets as
// Validate names them (space-separated), so that errors name the flag.
type Setting struct {
	Name  string
	p     any // *string, *bool, *int, *time.Duration or a flag.Value
	def   any
	field string
	// Usage is what --help says of it, less its environment variable.
	Usage string
}

// Settings are the settings table bound to c's fields: every flag but the
// outbox router's (routerFlags).
func (c *Config) Settings() []Setting {
	return []Setting{
		{"config", &c.ConfigFile, nil, "", "config file: walstream's YAML (settings by flag name, Debezium outbox router settings under outbox:, per-table ones under tables:; see docs/configuration.md), or a Debezium Postgres connector config as it is (.json, .properties, or a Strimzi KafkaConnector; see docs/debezium.md)"},
		{"pg-url", &c.PGURL, nil, "", "Postgres connection URL or DSN of the primary (required); to follow a promotion, list every failover candidate with target_session_attrs=primary"},
		{"pg-password-file", &c.PGPasswordFile, nil, "", "file holding the Postgres password (else the URL, passfile or ~/.pgpass), read again for each connection: a rotated password is used from the next one on"},
		{"pg-aws-iam-auth", &c.PGAWSIAMAuth, nil, "", "Amazon RDS and Aurora IAM database authentication: each connection signs a new token with the AWS credentials of the default chain (IRSA, EKS Pod Identity, environment) instead of a password; needs sslmode=verify-full or require (see docs/postgres.md, Amazon RDS and Aurora)"},
		{"pg-aws-region", &c.PGAWSRegion, nil, "", "with --pg-aws-iam-auth, the AWS region of the database (default: the one in the endpoint's host name, <id>.<hash>.<region>.rds.amazonaws.com)"},
		{"kafka-brokers", &c.Brokers, nil, "Kafka.Brokers", "comma-separated Kafka bootstrap brokers (required)"},
		{"kafka-tls", &c.KafkaTLS, nil, "", "connect to Kafka with TLS, verifying brokers against the system roots or --kafka-tls-ca-file"},
		{"kafka-tls-ca-file", &c.KafkaTLSCAFile, nil, "", "PEM CA bundle to verify the brokers with (implies --kafka-tls)"},
		{"kafka-tls-cert-file", &c.KafkaTLSCertFile, nil, "", "PEM client certificate for mutual TLS"},
		{"kafka-tls-key-file", &c.KafkaTLSKeyFile, nil, "", "PEM client key for mutual TLS"},
		{"kafka-tls-server-name", &c.KafkaTLSServerName, nil, "", "name to verify the brokers' certificates against (default: the host dialed)"},
		{"kafka-sasl-mechanism", &c.KafkaSASLMechanism, nil, "Kafka.SASLMechanism", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (the password comes from --kafka-sasl-password-file or $" + EnvKafkaSASLPassword + "); OAUTHBEARER (--kafka-oauth-token-file, or --kafka-oauth-token-url for an OIDC token endpoint); AWS_MSK_IAM (credentials from the AWS default chain; see docs/kafka.md, Security)"},
		{"kafka-sasl-user", &c.KafkaSASLUser, nil, "", "SASL user"},
		{"kafka-sasl-password-file", &c.KafkaSASLPasswordFile, nil, "", "file holding the SASL password; or $" + EnvKafkaSASLPassword + ", which has no flag"},
		{"kafka-oauth-token-file", &c.KafkaOAuthTokenFile, nil, "", "OAUTHBEARER: file holding the bearer token, read again for every authentication (another process renews it)"},
		{"kafka-oauth-token-url", &c.KafkaOAuthTokenURL, nil, "", "OAUTHBEARER: OIDC token endpoint walstream asks for tokens with the client-credentials grant, renewing them before they expire"},
		{"kafka-oauth-client-id", &c.KafkaOAuthClientID, nil, "", "OAUTHBEARER: client id for --kafka-oauth-token-url"},
		{"kafka-oauth-client-secret-file", &c.KafkaOAuthClientSecretFile, nil, "", "OAUTHBEARER: file holding the client secret for --kafka-oauth-token-url; or $" + EnvKafkaOAuthClientSecret + ", which has no flag"},
		{"kafka-oauth-scope", &c.KafkaOAuthScope, nil, "", "OAUTHBEARER: scopes to ask --kafka-oauth-token-url for, space- or comma-separated"},
		{"slot", &c.Slot, pipeline.DefaultSlot, "Names.Slot", "logical replication slot (pgoutput)"},
		{"publication", &c.Publication, pipeline.DefaultPublication, "Names.Publication", "publication of the outbox table"},
		{"table", &c.Table, pipeline.DefaultTable, "Names.Tables", "outbox tables, schema-qualified and comma-separated; they share the slot and the publication"},
		{"create", &c.Create, true, "", "create the publication and slot when missing; with false, a missing one is an error that gives the SQL to create it"},
		{"allow-slot-ahead", &c.AllowSlotAhead, nil, "", "start even though the slot is ahead of the checkpoint in Kafka, creating a missing slot (events may be missing; see docs/postgres.md, Recovery)"},
		{"accept-phantoms", &c.Accept.Phantoms, nil, "", "go on after phantom events (published from WAL the server's history lacks), from where the histories part (see docs/postgres.md, Phantom events)"},
		{"accept-system-change", &c.Accept.SystemChange, nil, "", "go on from the slot when the server is another cluster than the checkpoint's (see docs/postgres.md, Another cluster)"},
		{"from-debezium-offset", &parsed{parse: c.takeoverSource}, nil, "",
			"take over from Debezium's Postgres connector on its slot and publication (--slot, --publication) at a first start, when Kafka holds no checkpoint of the stream: its offset is read from Kafka Connect's REST API (http://connect:8083), its offsets topic (kafka:<offset.storage.topic>) or a file (the REST answer saved, or a standalone worker's offsets file), and the events it had published are not published again (see docs/debezium.md, Cutover: from Debezium to walstream)"},
		{"debezium-connector", &c.Takeover.Selector.Connector, nil, "", "Kafka Connect's name of the connector --from-debezium-offset takes over from (a connector config's name); its topic.prefix is --topic-prefix"},
		{"debezium-lookback", &c.Takeover.Lookback, pipeline.DefaultTakeoverLookback, "Takeover.Lookback", "with --from-debezium-offset, how long before the commit of the offset's last transaction the output topics are read for events Debezium published; raise it when table.field.event.timestamp takes record timestamps from a column set long before the commit"},
		{"debezium-accept-repeated-ids", &c.Takeover.AcceptRepeatedIDs, nil, "", "with --from-debezium-offset, take over although an outbox table's event id column has no unique index on it alone or may be null, or the stream takes logical messages, with a warning: an event whose id Debezium published shortly before its offset may then not be published, and one with a null id is published even if Debezium had (see docs/debezium.md, How the takeover avoids loss and duplicates)"},
		{"failover-slot", &c.FailoverSlot, true, "", "create the slot as a failover slot where the server supports it (Postgres 17 and later)"},
		{"checkpoint-topic", &c.CheckpointTopic, pipeline.DefaultCheckpointTopic, "CheckpointTopic", "compacted topic holding checkpoints, created when missing"},
		{"stream", &c.Stream, nil, "Stream", "name of this stream, shown in logs, metrics and status, and the default of its checkpoint key and transactional id; default <database>/<slot>, which a failover or restore keeps: give each stream sharing a Kafka cluster its own (see docs/kafka.md, Many streams on one Kafka cluster)"},
		{"checkpoint-key", &c.CheckpointKey, nil, "", "key of this stream's checkpoints (default: the stream name)"},
		{"transactional-id", &c.TransactionalID, nil, "", "Kafka transactional.id (default: walstream-<stream name>)"},
		{"stream-in-progress", &c.StreamInProgress, true, "", "on Postgres 14 and later, have transactions larger than logical_decoding_work_mem streamed while in progress instead of spilled to disk and sent at their commit, so that a large transaction on another table no longer holds up the outbox; a streamed outbox transaction is kept in a temporary file until it commits, then published (see --spool-dir)"},
		{"spool-dir", &c.SpoolDir, nil, "", "directory of the temporary files holding streamed transactions until they commit (default: $TMPDIR, else /tmp); the files are unlinked at once, so a crash leaves none"},
		{"max-batch-events", &c.MaxBatchEvents, pipeline.DefaultMaxBatchEvents, "MaxBatchEvents", "events per Kafka transaction; larger Postgres transactions are split"},
		{"max-batch-bytes", &c.MaxBatchBytes, pipeline.DefaultMaxBatchBytes, "MaxBatchBytes", "bytes per Kafka transaction; larger Postgres transactions are split"},
		{"queue-bytes", &c.QueueBytes, pipeline.DefaultQueueBytes, "QueueBytes", "memory of decoded events waiting for Kafka before WAL reading pauses"},
		{"linger", &c.Linger, pipeline.DefaultLinger, "Linger", "least time from one Kafka commit to the next: a Kafka transaction begun sooner waits for more Postgres transactions until then; one whose first Postgres transaction comes later commits at once"},
		{"status-interval", &c.StatusInterval, pipeline.DefaultStatusInterval, "StatusInterval", "interval of standby status updates to Postgres (keepalive; keep it well under wal_sender_timeout); commits are confirmed sooner, see --confirm-interval"},
		{"confirm-interval", &c.ConfirmInterval, pipeline.DefaultConfirmInterval, "ConfirmInterval", "least interval between status updates confirming Kafka commits to Postgres: a commit reaches the slot's confirmed_flush_lsn within it, and up to 20ms more (--linger, if longer) when no other commit follows it; 0 confirms only every --status-interval"},
		{"progress-interval", &c.ProgressInterval, pipeline.DefaultProgressInterval, "ProgressInterval", "interval of the progress log line while streaming, and of the line naming what walstream waits for while it cannot stream (a slot being created behind open transactions, a slot another process holds); 0 logs no progress and each wait once"},
		{"blocking-query-text", &c.BlockingQueries, nil, "", "add the query text of the sessions walstream waits for to the log, /readyz and status (off: query text may hold data)"},
		{"idle-interval", &c.IdleInterval, pipeline.DefaultIdleInterval, "IdleInterval", "minimum interval of checkpoint-only transactions while the outbox is idle"},
		{"commit-timeout", &c.CommitTimeout, pipeline.DefaultCommitTimeout, "CommitTimeout", "limit on flushing and committing one Kafka transaction"},
		{"converter", &c.Converter, "string", "", "key and value bytes as Debezium emits them behind Kafka Connect's StringConverter (string), JsonConverter with schemas.enable=false (json) or an AvroConverter with --schema-registry-url (avro)"},
		{"key-converter", &c.KeyConverter, nil, "", "the key's converter, as Connect's key.converter: string, json, avro or a converter class; empty: --converter"},
		{"value-converter", &c.ValueConverter, nil, "", "the value's converter, as Connect's value.converter: string, json, avro or a converter class; empty: --converter"},
		{"key-converter-schemas-enable", &c.KeySchemas, nil, "", "key.converter.schemas.enable: true or false; empty: JsonConverter's default, true, for --key-converter, false for --converter"},
		{"value-converter-schemas-enable", &c.ValueSchemas, nil, "", "value.converter.schemas.enable: true or false; empty: JsonConverter's default, true, for --value-converter, false for --converter"},
		{"extended-headers", &c.ExtendedHeaders, nil, "", "write Debezium's __debezium.context.* headers before id, as its extended.headers.enabled does: connectorLogicalName (--topic-prefix), taskId 0, connectorName postgresql and runId (a UUIDv7 each start); on unless set false when --config is a Debezium connector config, whose default it is"},
		{"topic-prefix", &c.Encoding.SchemaPrefix, nil, "Encoding.SchemaPrefix", "the Debezium connector's topic.prefix, which value schemas of envelopes name under a JSON converter with schemas and the Avro converter"},
		{"schema-registry-url", &c.RegistryURL, nil, "", "the Avro converter's schema registry: its Confluent-compatible API, comma-separated URLs (Apicurio Registry: http://host:8080/apis/ccompat/v7; its /apis/registry/v2 or v3 URL, as Apicurio's converter takes, is turned into that)"},
		{"schema-registry-user", &c.RegistryUser, nil, "", "schema registry basic auth user; the password comes from --schema-registry-password-file or $" + EnvRegistryPassword},
		{"schema-registry-password-file", &c.RegistryPasswordFile, nil, "", "file holding the schema registry's basic auth password; or $" + EnvRegistryPassword + ", which has no flag"},
		{"schema-registry-token-file", &c.RegistryTokenFile, nil, "", "file holding a bearer token for the schema registry; or $" + EnvRegistryToken + ", which has no flag"},
		{"schema-registry-tls-ca-file", &c.RegistryTLSCAFile, nil, "", "PEM CA bundle to verify the schema registry with (default: the system roots); the name is always verified"},
		{"schema-registry-tls-cert-file", &c.RegistryTLSCertFile, nil, "", "PEM client certificate for the schema registry"},
		{"schema-registry-tls-key-file", &c.RegistryTLSKeyFile, nil, "", "PEM client key for the schema registry"},
		{"schema-registry-tls-server-name", &c.RegistryTLSServerName, nil, "", "name to verify the schema registry's certificate against (default: the URL's host)"},
		{"key-subject-name-strategy", &c.KeyStrategy, "topic", "", "subject of key schemas: topic (<topic>-key), record (the schema's full name) or topic-record (<topic>-<full name>), or Confluent's or Apicurio's strategy class"},
		{"value-subject-name-strategy", &c.ValueStrategy, "topic", "", "subject of value schemas: topic (<topic>-value), record or topic-record, or a strategy class"},
		{"auto-register-schemas", &c.Encoding.Registry.AutoRegister, true, "", "register a schema its subject lacks (auto.register.schemas); with false, it must be registered already, or be the subject's latest version with --use-latest-version"},
		{"use-latest-version", &c.Encoding.Registry.UseLatest, nil, "", "with --auto-register-schemas=false, write with the subject's latest version's id, which must be the schema walstream writes (use.latest.version)"},
		{"compression", &c.CompressionText, "snappy", "", "record batch compression: snappy, lz4, zstd, gzip or none"},
		{"message-prefix", &c.MessagePrefix, "walstream", "", "prefix of transactional pg_logical_emit_message() outbox events; * takes every prefix, as Debezium without message.prefix.include.list; empty: ignore logical messages"},
		{"message-fields-null-include", &c.MessageNullFields, nil, "", "keep a logical message's null fields, as DecodeLogicalDecodingMessageContent's fields.null.include does: a null event id or key is then published as a null header or key instead of stopping"},
		{"on-error", &c.OnError, onErrorFail, "", "a row that cannot become a record: fail (stop, confirm nothing past it) or dead-letter (write it to --dlq-topic and go on)"},
		{"dlq-topic", &c.SkipTopic, pipeline.DefaultDeadLetterTopic, "SkipTopic DeadLetterTopic", "dead-letter topic, with --on-error=dead-letter or --skip-event"},
		{"skip-event", &c.SkipEventText, nil, "", "one event that cannot be published, as a stop message names it (<commit LSN>:<ordinal>): it goes to --dlq-topic with its reason and the skip is recorded in the checkpoint; nothing else is skipped (see docs/outbox.md, Bad input)"},
		{"accept-recreated-table", &c.AcceptRecreatedText, nil, "", "outbox tables accepted as dropped and recreated, or as having left the publication and come back, as schema.table=<OID now>, comma-separated, once the rows lost meanwhile are dealt with (see docs/postgres.md, A recreated outbox table, A table out of the publication)"},
		{"reemit-chunk-rows", &c.Reemit.ChunkRows, pipeline.DefaultReemitChunkRows, "Reemit.ChunkRows", "rows a re-emit request reads in one chunk, one statement, and publishes in one Kafka transaction with its progress; live transactions wait behind one chunk at most; a chunk never holds more than --max-batch-events (see docs/reemit.md)"},
		{"reemit-rate", &c.Reemit.Rate, 0, "Reemit.Rate", "most rows per second a re-emit request publishes; 0: as fast as it reads them"},
		{"signal-table", &c.Reemit.SignalTable, nil, "Reemit.SignalTable", "Debezium's signal table (signal.data.collection), schema-qualified and in the publication: its execute-snapshot and stop-snapshot signals are re-emit requests and their cancels (see docs/reemit.md)"},
		{"max-record-bytes", &c.MaxRecordBytes, pipeline.DefaultMaxRecordBytes, "MaxRecordBytes", "largest record to send; keep it within the topics' max.message.bytes"},
		{"slot-poll-interval", &c.SlotPollInterval, pipeline.DefaultSlotPollInterval, "SlotPollInterval", "how often the slot's state is read for metrics and checked"},
		{"ready-confirm-age", &c.ReadyConfirmAge, pipeline.DefaultReadyConfirmAge, "ReadyConfirmAge", "/readyz fails when no position was confirmed to Postgres for this long"},
		{"fleet", &c.FleetMembership, fleetAuto, "", "share the streams among the processes run with the same config, each stream run by one of them, balanced and moved as processes join and leave, by a Kafka group of their own (see docs/operations.md, A fleet across processes): auto (on for a config file's streams: list on one Kafka cluster), on, or off (each process runs every stream, and waits as a standby for those another process streams)"},
		{"fleet-group", &c.Fleet.Group, nil, "", "the Kafka group id of the fleet's processes (default walstream-fleet-<checkpoint topic>: every process of one config agrees on it, and a fleet of another config on the same checkpoint topic may share it, since each stream goes only to processes whose config has it)"},
		{"fleet-session-timeout", &c.Fleet.SessionTimeout, group.DefaultSessionTimeout, "Fleet.SessionTimeout", "how long the fleet's group waits for a process that stopped heartbeating (killed, paused, cut off from Kafka) before its streams move to the others; such a process stops its streams a margin before (see docs/operations.md, A fleet across processes)"},
		{"fleet-heartbeat-interval", &c.Fleet.HeartbeatInterval, group.DefaultHeartbeatInterval, "Fleet.HeartbeatInterval", "how often a process of a fleet heartbeats to its group, and so how soon it learns that streams move; at most a third of --fleet-session-timeout"},
		{"fleet-rebalance-timeout", &c.Fleet.RebalanceTimeout, group.DefaultRebalanceTimeout, "Fleet.RebalanceTimeout", "how long the fleet's group waits for every process to join again when processes join or leave; one that does not is left out of the new assignment"},
		{"http-config-file", &c.HTTPConfigFile, nil, "", "Prometheus exporter-toolkit web config (TLS, basic auth) for the HTTP listener"},
		{"pprof-addr", &c.PprofAddr, nil, "", "serve /debug/pprof on this loopback address; empty: off"},
		{"http-addr", &c.HTTPAddr, defaultHTTPAddr, "", "listen address for /metrics, /healthz and /readyz; empty disables, port 0 picks one; one that binds every interface is logged as a warning"},
		{"log-level", &c.LogLevel, "info", "", "debug, info, warn or error"},
		{"log-format", &c.LogFormat, "text", "", "text or json"},
		{"topic-creation", &parsed{parse: func(s string) (err error) { c.TopicCreation, err = kafka.ParseTopicCreationText(s); return err }}, nil, "",
			"create missing outbox and dead-letter topics with Kafka Connect topic.creation.* settings, name=value separated by ; or new lines, e.g. default.partitions=6;default.replication.factor=3 (see docs/kafka.md); empty: rely on the broker's auto.create.topics.enable"},
	}
}

// envPrefix maps flag --max-batch-events to WALSTREAM_MAX_BATCH_EVENTS.
const envPrefix = "WALSTREAM_"

// EnvName is the environment variable of a setting: --max-batch-events'
// is WALSTREAM_MAX_BATCH_EVENTS.
func EnvName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// EnvKafkaSASLPassword is the SASL password's environment variable. It has
// no flag: a secret on the command line shows in ps and shell history.
const EnvKafkaSASLPassword = envPrefix + "KAFKA_SASL_PASSWORD"

// EnvKafkaOAuthClientSecret is the OAuth client secret's environment
// variable, also without a flag.
const EnvKafkaOAuthClientSecret = envPrefix + "KAFKA_OAUTH_CLIENT_SECRET"

// The schema registry's secrets' environment variables, which have no
// flag either.
const (
	// EnvRegistryPassword is the schema registry's basic auth password's.
	EnvRegistryPassword = envPrefix + "SCHEMA_REGISTRY_PASSWORD"
	// EnvRegistryToken is the schema registry's bearer token's.
	EnvRegistryToken = envPrefix + "SCHEMA_REGISTRY_TOKEN"
)

// Flags defines every setting on fs, bound to c. Each flag's usage names
// its environment variable, so `walstream run --help` documents both.
func (c *Config) Flags(fs *flag.FlagSet) {
	for _, s := range c.Settings() {
		usage := s.Usage + " ($" + EnvName(s.Name) + ")"
		switch p := s.p.(type) {
		case *string:
			def, _ := s.def.(string)
			fs.StringVar(p, s.Name, def, usage)
		case *bool:
			def, _ := s.def.(bool)
			fs.BoolVar(p, s.Name, def, usage)
		case *int:
			fs.IntVar(p, s.Name, s.def.(int), usage)
		case *time.Duration:
			fs.DurationVar(p, s.Name, s.def.(time.Duration), usage)
		case flag.Value:
			fs.Var(p, s.Name, usage)
		}
	}
	c.Router = make(map[string]string)
	routerFlags(fs, c.Router)
}

// parsed is a flag parsed when set, so that a bad value is refused alike
// from the command line, the environment and the config file.
type parsed struct {
	text  string
	parse func(string) error
}

var _ flag.Value = (*parsed)(nil)

func (p *parsed) String() string {
	if p == nil {
		return ""
	}
	return p.text
}

func (p *parsed) Set(s string) error {
	p.text = s
	return p.parse(s)
}

// build parses the settings held as text into pipeline.Config and reports
// those that do not parse; pipeline.Config.Validate checks the rest.
func (c *Config) build() error {
	var errs []error
	bad := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s ($%s): %w", name, EnvName(name), err))
		}
	}
	var err error
	if c.Postgres, err = pgx.ParseConfig(c.PGURL); err != nil && c.PGURL != "" {
		bad("pg-url", err) // pgconn's parse errors redact the password
	} else if err == nil {
		errs = append(errs, c.postgresCredentials()...)
	}
	c.Names = replication.Names{Slot: c.Slot, Publication: c.Publication}
	c.streamNames()
	tablesErr := false
	if c.Names.Tables, err = replication.ParseTables(c.Table); err != nil {
		bad("table", err)
		tablesErr = true
	} else {
		errs = append(errs, c.outboxes()...)
	}
	c.Kafka, err = c.kafka()
	errs = append(errs, err)
	if c.Converter != "string" && c.Converter != "json" && c.Converter != "avro" {
		bad("converter", fmt.Errorf("%q is not string, json or avro", c.Converter))
	} else {
		c.Encoding.Key, err = c.format("key-converter", c.KeyConverter, "key-converter-schemas-enable", c.KeySchemas)
		errs = append(errs, err)
		c.Encoding.Value, err = c.format("value-converter", c.ValueConverter, "value-converter-schemas-enable", c.ValueSchemas)
		errs = append(errs, err)
	}
	if c.ExtendedHeaders {
		if c.Encoding.SchemaPrefix == "" {
			bad("extended-headers", errors.New("needs --topic-prefix, Debezium's topic.prefix, which the connectorLogicalName header holds"))
		}
		c.Encoding.Context = format.ContextHeaders(c.Encoding.SchemaPrefix, newRunID(time.Now()))
	}
	errs = append(errs, c.registry()...)
	c.Compression, err = publish.ParseCompression(c.CompressionText)
	bad("compression", err)
	switch c.OnError {
	case onErrorDeadLetter:
		c.DeadLetterTopic = c.SkipTopic
	case onErrorFail:
	default:
		bad("on-error", fmt.Errorf("%q is not %s or %s", c.OnError, onErrorFail, onErrorDeadLetter))
	}
	if c.SkipEventText != "" {
		c.SkipEvent, err = decode.ParseRef(c.SkipEventText)
		bad("skip-event", err)
	}
	c.AcceptRecreated, err = acceptRecreated(c.AcceptRecreatedText)
	bad("accept-recreated-table", err)
	if c.HTTPConfigFile != "" {
		bad("http-config-file", checkWebConfig(c.HTTPConfigFile))
	}
	if _, err := c.Logger(io.Discard); err != nil {
		bad("log-level", fmt.Errorf("%q is not one of debug, info, warn, error", c.LogLevel))
	}
	// Checked here, not when run listens: validate passes what run takes.
	if c.HTTPAddr != "" {
		if _, err := listenAddr(c.HTTPAddr); err != nil {
			bad("http-addr", fmt.Errorf("%q: %w (like 127.0.0.1:9187; port 0 picks one, empty turns it off)", c.HTTPAddr, err))
		}
	}
	if c.PprofAddr != "" {
		if host, err := listenAddr(c.PprofAddr); err != nil {
			bad("pprof-addr", fmt.Errorf("%q: %w (like 127.0.0.1:6060)", c.PprofAddr, err))
		} else if !replication.Loopback(host) {
			bad("pprof-addr", fmt.Errorf("%q: pprof shows memory and must listen on loopback, like 127.0.0.1:6060", c.PprofAddr))
		}
	}
	if c.SpoolDir != "" {
		if fi, err := os.Stat(c.SpoolDir); err != nil {
			bad("spool-dir", err)
		} else if !fi.IsDir() {
			bad("spool-dir", fmt.Errorf("%s is not a directory", c.SpoolDir))
		}
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format", fmt.Errorf("%q is not text or json", c.LogFormat))
	}
	c.Takeover.Selector.Server = c.Encoding.SchemaPrefix
	switch name := c.takeoverName; {
	case name == "":
	case c.Takeover.Selector.Connector == "":
		c.Takeover.Selector.Connector = name
	case c.Takeover.Selector.Connector != name:
		bad("debezium-connector", fmt.Errorf("%q, but --from-debezium-offset names connector %q", c.Takeover.Selector.Connector, name))
	}
	if c.Takeover.Enabled() && c.Takeover.Source.Kind == debezium.SourceREST && c.Takeover.Selector.Connector == "" {
		bad("from-debezium-offset", errors.New("reading the offset from Kafka Connect's REST API needs the connector's name: --debezium-connector, or the URL of the connector (http://connect:8083/connectors/<name>)"))
	}
	switch c.FleetMembership {
	case fleetOn, fleetAuto:
		if c.FleetMembership == fleetOn || c.listed {
			c.Fleet.Group = cmp.Or(c.Fleet.Group, group.DefaultGroup(c.CheckpointTopic))
			break
		}
		c.Fleet.Group = ""
	case fleetOff:
		c.Fleet.Group = ""
	default:
		bad("fleet", fmt.Errorf("%q is not %s, %s or %s", c.FleetMembership, fleetAuto, fleetOn, fleetOff))
	}
	c.Hook = pipeline.CrashHook(os.Getenv("WALSTREAM_CRASH_AT"))
	for _, err := range unjoin(c.Validate()) {
		var se *pipeline.SettingError
		if errors.As(err, &se) && !(se.Field == "Names.Tables" && tablesErr) {
			errs = append(errs, c.named(se)...)
		}
	}
	return errors.Join(errs...)
}

// streamNames defaults the stream's name to <database>/<slot>, names that
// a failover or a restore of the database keeps, and the checkpoint key
// and transactional id to the stream's name. Earlier versions defaulted
// the key to the slot's name and the transactional id to
// walstream-<slot>: whichever of the two is left to its default, the
// stream's checkpoint may still be under the earlier default
// (pipeline.Config.LegacyKey), and a checkpoint found there keeps both.
// A key and a transactional id named apart, one set and one derived, is
// worth a warning (namesWarning): they must name the same stream.
func (c *Config) streamNames() {
	keyDefaulted, idDefaulted := c.CheckpointKey == "", c.TransactionalID == ""
	defer func() { c.NamesWarning = c.namesWarning(!keyDefaulted, !idDefaulted) }()
	if c.Stream == "" {
		db := ""
		if c.Postgres != nil {
			if db = c.Postgres.Database; db == "" {
				db = c.Postgres.User // libpq's default database
			}
		}
		c.Stream = pipeline.StreamName(db, c.Slot)
	}
	if keyDefaulted {
		c.CheckpointKey = c.Stream
		c.LegacyKey = c.Slot
	}
	if idDefaulted {
		c.TransactionalID = "walstream-" + c.Stream
		c.LegacyTransactionalID = "walstream-" + c.Slot
	}
}

// namesWarning says, when one of --checkpoint-key and --transactional-id
// is set and the other derived from the stream's name, why that is
// fragile; empty otherwise.
func (c *Config) namesWarning(keySet, idSet bool) string {
	if keySet == idSet {
		return ""
	}
	set, derived := "--checkpoint-key", "transactional id"
	if idSet {
		set, derived = "--transactional-id", "checkpoint key"
	}
	return fmt.Sprintf("%s is set, but the %s is derived from the stream's name (%s): two deployments that share one but not the other "+
		"fence each other, or read each other's checkpoints; set --stream alone, from which both derive, or both (see docs/kafka.md, Many streams on one Kafka cluster)",
		set, derived, c.Stream)
}

// named words an error of pipeline.Config.Validate with the flag of the
// field it names, one line for each error it joins.
func (c *Config) named(se *pipeline.SettingError) []error {
	if se.Field == "Kafka.SASLMechanism" {
		hint := fmt.Sprintf("the password comes from --kafka-sasl-password-file or $%s", EnvKafkaSASLPassword)
		switch strings.ToUpper(c.KafkaSASLMechanism) {
		case kafka.SASLOAuthBearer:
			hint = fmt.Sprintf("--kafka-oauth-token-file, or --kafka-oauth-token-url with --kafka-oauth-client-id and --kafka-oauth-client-secret-file or $%s", EnvKafkaOAuthClientSecret)
		case kafka.SASLAWSMSKIAM:
			hint = "--kafka-tls"
		}
		return []error{fmt.Errorf("--kafka-sasl-mechanism: %w (%s)", se.Err, hint)}
	}
	name := ""
	for _, s := range c.Settings() {
		if strings.Contains(" "+s.field+" ", " "+se.Field+" ") {
			name = s.Name
		}
	}
	if name == "" {
		return []error{se} // a field no setting sets: named as Config names it
	}
	var out []error
	for _, err := range unjoin(se.Err) {
		if at, ok := c.connectorKeys[name]; ok {
			out = append(out, fmt.Errorf("%s (--%s): %w", at, name, err))
			continue
		}
		out = append(out, fmt.Errorf("--%s ($%s): %w", name, EnvName(name), err))
	}
	return out
}

// format is one converter: --converter's unless its own is set, as a
// Connect config sets key.converter and value.converter.
func (c *Config) format(name, converter, schemasName, schemas string) (format.Converter, error) {
	if converter == "" {
		converter = c.Converter
		if schemas == "" {
			schemas = "false" // --converter json means schemas.enable=false
		}
	}
	on := true // JsonConverterConfig: schemas.enable defaults to true
	if schemas != "" {
		var err error
		if on, err = strconv.ParseBool(strings.TrimSpace(schemas)); err != nil {
			return 0, fmt.Errorf("--%s ($%s): %q is not true or false", schemasName, EnvName(schemasName), schemas)
		}
	}
	f, err := format.Parse(converter, on)
	if err != nil {
		return 0, fmt.Errorf("--%s ($%s): %w", name, EnvName(name), err)
	}
	return f, nil
}

// takeoverSource reads --from-debezium-offset; a connector's REST URL
// names the connector too, unless --debezium-connector does.
func (c *Config) takeoverSource(s string) error {
	if strings.TrimSpace(s) == "" {
		c.Takeover.Source = debezium.Source{}
		return nil
	}
	src, name, err := debezium.ParseSource(s)
	if err != nil {
		return err
	}
	c.Takeover.Source, c.takeoverName = src, name
	return nil
}

// listenAddr checks a TCP listen address, host:port with a port from 0 to
// 65535 (the host may be empty: every interface), and returns its host.
func listenAddr(addr string) (host string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", errors.New("want host:port")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("port %q is not from 0 to 65535", port)
	}
	return host, nil
}

// acceptRecreated reads --accept-recreated-table: schema.table=oid entries.
func acceptRecreated(s string) (map[string]uint32, error) {
	out := make(map[string]uint32)
	for _, entry := range strings.Split(s, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		name, oidText, ok := strings.Cut(entry, "=")
		t, err := replication.ParseTable(name)
		if err != nil || !ok {
			return nil, fmt.Errorf("%q is not schema.table=<OID>", entry)
		}
		oid, err := strconv.ParseUint(oidText, 10, 32)
		if err != nil || oid == 0 {
			return nil, fmt.Errorf("%q: OID %q is not a table OID", entry, oidText)
		}
		out[t.String()] = uint32(oid)
	}
	return out, nil
}

// postgresCredentials installs into the Postgres connection config what
// each connection reads anew: the password file, or an IAM token, and the
// TLS files the URL names.
func (c *Config) postgresCredentials() []error {
	var creds replication.Credentials
	var errs []error
	if c.PGPasswordFile != "" {
		var err error
		if creds.PasswordFile, err = secret.NewFile(c.PGPasswordFile); err != nil {
			return []error{fmt.Errorf("--pg-password-file ($%s): %w", EnvName("pg-password-file"), err)}
		}
	}
	switch {
	case c.PGAWSIAMAuth && c.PGPasswordFile != "":
		errs = append(errs, fmt.Errorf("--pg-aws-iam-auth ($%s): and --pg-password-file are both set; IAM authentication sends a token in place of the password", EnvName("pg-aws-iam-auth")))
	case c.PGAWSIAMAuth && c.PGAWSRegion == "" && replication.RegionOf(c.Postgres.Host) == "":
		errs = append(errs, fmt.Errorf("--pg-aws-region ($%s): needed with --pg-aws-iam-auth, since host %s is no RDS endpoint (<id>.<hash>.<region>.rds.amazonaws.com) to take the region from",
			EnvName("pg-aws-region"), c.Postgres.Host))
	case c.PGAWSIAMAuth:
		creds.IAM = &replication.IAMAuth{Region: c.PGAWSRegion}
	case c.PGAWSRegion != "":
		errs = append(errs, fmt.Errorf("--pg-aws-region ($%s): set without --pg-aws-iam-auth, which it is for", EnvName("pg-aws-region")))
	}
	if len(errs) > 0 {
		return errs
	}
	pg, err := creds.Install(context.Background(), c.Postgres)
	if err != nil {
		return []error{fmt.Errorf("--pg-aws-iam-auth ($%s): %w", EnvName("pg-aws-iam-auth"), err)}
	}
	c.Postgres = pg
	return nil
}

// readSecret reads a secret file, dropping one trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	return secret.Trim(string(b)), err
}

// kafka builds the Kafka connection settings, reading the TLS files and
// the SASL password.
func (c *Config) kafka() (kafka.Settings, error) {
	conn := kafka.Settings{SASLMechanism: c.KafkaSASLMechanism, SASLUser: c.KafkaSASLUser, SASLPassword: os.Getenv(EnvKafkaSASLPassword)}
	for _, b := range strings.Split(c.Brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			conn.Brokers = append(conn.Brokers, b)
		}
	}
	var err error
	if conn.TLS, err = tlsConfig("kafka", c.KafkaTLSCAFile, c.KafkaTLSCertFile, c.KafkaTLSKeyFile, c.KafkaTLSServerName); err != nil {
		return conn, err
	}
	if conn.TLS == nil && c.KafkaTLS {
		conn.TLS = &secret.TLS{}
	}
	if c.KafkaSASLPasswordFile != "" {
		if conn.SASLPasswordFile, err = secret.NewFile(c.KafkaSASLPasswordFile); err != nil {
			return conn, fmt.Errorf("--kafka-sasl-password-file: %w", err)
		}
	}
	conn.OAuth = kafka.OAuthSettings{TokenFile: c.KafkaOAuthTokenFile, TokenURL: c.KafkaOAuthTokenURL,
		ClientID: c.KafkaOAuthClientID, ClientSecret: os.Getenv(EnvKafkaOAuthClientSecret),
		Scopes: strings.FieldsFunc(c.KafkaOAuthScope, func(r rune) bool { return r == ' ' || r == ',' })}
	if c.KafkaOAuthClientSecretFile != "" {
		if conn.OAuth.ClientSecretFile, err = secret.NewFile(c.KafkaOAuthClientSecretFile); err != nil {
			return conn, fmt.Errorf("--kafka-oauth-client-secret-file: %w", err)
		}
	}
	if c.KafkaOAuthTokenFile != "" {
		if _, err := os.Stat(c.KafkaOAuthTokenFile); err != nil {
			return conn, fmt.Errorf("--kafka-oauth-token-file: %w", err)
		}
	}
	return conn.Shared(), nil
}

// registry builds the schema registry's settings when a converter needs
// one, reading its secrets and TLS files.
func (c *Config) registry() []error {
	var errs []error
	bad := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s ($%s): %w", name, EnvName(name), err))
		}
	}
	r := &c.Encoding.Registry
	var err error
	r.KeyStrategy, err = format.ParseSubjectStrategy(c.KeyStrategy)
	bad("key-subject-name-strategy", err)
	r.ValueStrategy, err = format.ParseSubjectStrategy(c.ValueStrategy)
	bad("value-subject-name-strategy", err)
	if !c.Encoding.UsesRegistry() {
		return errs
	}
	for _, u := range strings.Split(c.RegistryURL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			r.URLs = append(r.URLs, format.CompatURL(u))
		}
	}
	if len(r.URLs) == 0 {
		bad("schema-registry-url", errors.New("the Avro converter needs a schema registry"))
	} else {
		bad("schema-registry-url", r.CheckURLs())
	}
	r.User, r.Password, r.Token = c.RegistryUser, cmp.Or(c.registryPassword, os.Getenv(EnvRegistryPassword)), cmp.Or(c.registryToken, os.Getenv(EnvRegistryToken))
	if c.RegistryPasswordFile != "" {
		r.Password, err = readSecret(c.RegistryPasswordFile)
		bad("schema-registry-password-file", err)
	}
	if c.RegistryTokenFile != "" {
		r.Token, err = readSecret(c.RegistryTokenFile)
		bad("schema-registry-token-file", err)
	}
	if r.User != "" && r.Token != "" {
		bad("schema-registry-user", errors.New("and a bearer token are both set; the registry takes one"))
	}
	if r.TLS, err = tlsConfig("schema-registry", c.RegistryTLSCAFile, c.RegistryTLSCertFile, c.RegistryTLSKeyFile, c.RegistryTLSServerName); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// tlsConfig is the TLS of a peer (kafka or schema-registry, the prefix of
// its flags): verified against the CA bundle or the system roots, by
// name, with a client certificate when one is given, its files read again
// for each connection; nil when none of its settings is set.
func tlsConfig(peer, caFile, certFile, keyFile, serverName string) (*secret.TLS, error) {
	if caFile == "" && certFile == "" && keyFile == "" && serverName == "" {
		return nil, nil
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("--%s-tls-cert-file and --%s-tls-key-file go together", peer, peer)
	}
	if caFile != "" {
		if _, err := secret.NewTLS(caFile, "", "", ""); err != nil {
			return nil, fmt.Errorf("--%s-tls-ca-file: %w", peer, err)
		}
	}
	t, err := secret.NewTLS(caFile, certFile, keyFile, serverName)
	if err != nil {
		return nil, fmt.Errorf("--%s-tls-cert-file/--%s-tls-key-file: %w", peer, peer, err)
	}
	return t, nil
}

// Logger logs to w at --log-level in --log-format; err is a bad level,
// which Parse refuses.
func (c *Config) Logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	err := lvl.UnmarshalText([]byte(c.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), err
	}
	return slog.New(slog.NewTextHandler(w, opts)), err
}

// quoted is what a YAML parser quotes from the document it failed on.
var quoted = regexp.MustCompile("`[^`]*`|\"[^\"]*\"|'[^']*'")

// checkWebConfig parses the exporter-toolkit web config as serving it
// would. Its errors never quote the file: it holds password hashes, and
// a wrong file may hold anything.
func checkWebConfig(path string) error {
	err := web.Validate(path)
	if err == nil {
		return nil
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("%s is not a valid web config (tls_server_config, basic_auth_users; see docs/operations.md, The metrics endpoint): %s",
		path, quoted.ReplaceAllString(strings.ReplaceAll(err.Error(), "\n", " "), "(…)"))
}

// newRunID is a UUIDv7 (RFC 9562) for the runId header, as Debezium makes
// one each time its task starts: 48 bits of Unix milliseconds, then random
// bits.
func newRunID(now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[6:])
	ms := uint64(now.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0F | 0x70 // version 7
	b[8] = b[8]&0x3F | 0x80 // variant 10
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
