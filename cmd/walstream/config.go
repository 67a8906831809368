package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
)

// Defaults, named so README and --help agree with the code.
const (
	DefaultSlot            = "walstream"
	DefaultPublication     = "walstream_outbox"
	DefaultTable           = "public.outbox"
	DefaultCheckpointTopic = "walstream.checkpoints"
	DefaultHTTPAddr        = "127.0.0.1:9187"
	DefaultMaxBatchEvents  = 10000
	DefaultMaxBatchBytes   = 16 << 20
	DefaultQueueBytes      = 16 << 20
	DefaultLinger          = 5 * time.Millisecond
	DefaultStatusInterval  = 10 * time.Second
	DefaultConfirmInterval = 250 * time.Millisecond
	DefaultProgress        = 30 * time.Second
	DefaultIdleInterval    = 10 * time.Second
	DefaultCommitTimeout   = 30 * time.Second
	DefaultDeadLetterTopic = "walstream.dlq"
	DefaultMaxRecordBytes  = 1_000_000
	DefaultSlotPoll        = 5 * time.Second
	DefaultReadyConfirmAge = time.Minute
)

// Upper bounds of sizes: far above any useful value, and low enough that
// the producer's doubled buffer and int32 batch limit cannot overflow.
const (
	maxBatchEvents = 1 << 24
	maxBytes       = 1 << 30
	maxQueueBytes  = 1 << 40
)

// Policies for rows that cannot become records (--on-error).
const (
	OnErrorFail       = "fail"
	OnErrorDeadLetter = "dead-letter"
)

// Config is everything `walstream run` is told.
type Config struct {
	// Mapping is the outbox router settings every table shares.
	Mapping
	// TableSettings are a config file's router settings per table, by
	// schema-qualified name.
	TableSettings         map[string]map[string]string
	ConfigFile            string
	PGURL                 string
	Brokers               string
	Slot                  string
	Publication           string
	Table                 string
	Create                bool
	AllowSlotAhead        bool
	AcceptPhantoms        bool
	AcceptSystemChange    bool
	FailoverSlot          bool
	CheckpointTopic       string
	CheckpointKey         string // defaults to the slot name
	TransactionalID       string // defaults to "walstream-" + slot
	MaxBatchEvents        int
	MaxBatchBytes         int
	QueueBytes            int
	Linger                time.Duration
	StatusInterval        time.Duration
	ConfirmInterval       time.Duration
	ProgressInterval      time.Duration
	IdleInterval          time.Duration
	CommitTimeout         time.Duration
	OnError               string
	Converter             string
	KeyConverter          string
	ValueConverter        string
	KeySchemas            string // "" is the converter's default
	ValueSchemas          string
	SchemaTopicPrefix     string
	Compression           string
	MessagePrefix         string
	DeadLetterTopic       string
	SkipEvent             string
	AcceptRecreated       string
	MaxRecordBytes        int
	PGPasswordFile        string
	KafkaTLS              bool
	KafkaTLSCAFile        string
	KafkaTLSCertFile      string
	KafkaTLSKeyFile       string
	KafkaTLSServerName    string
	KafkaSASLMechanism    string
	KafkaSASLUser         string
	KafkaSASLPasswordFile string
	HTTPConfigFile        string
	PprofAddr             string
	SlotPollInterval      time.Duration
	ReadyConfirmAge       time.Duration
	HTTPAddr              string
	LogLevel              string
	LogFormat             string
	// TopicCreation creates missing outbox and dead-letter topics.
	TopicCreation topicCreation
}

// envPrefix maps flag --max-batch-events to WALSTREAM_MAX_BATCH_EVENTS.
const envPrefix = "WALSTREAM_"

func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flags defines every setting on fs. Each flag's usage names its
// environment variable, so `walstream run --help` documents both.
func (c *Config) flags(fs *flag.FlagSet) {
	str := func(p *string, name, def, usage string) { fs.StringVar(p, name, def, usage+" ($"+envName(name)+")") }
	num := func(p *int, name string, def int, usage string) {
		fs.IntVar(p, name, def, usage+" ($"+envName(name)+")")
	}
	dur := func(p *time.Duration, name string, def time.Duration, usage string) {
		fs.DurationVar(p, name, def, usage+" ($"+envName(name)+")")
	}
	boolean := func(p *bool, name string, def bool, usage string) {
		fs.BoolVar(p, name, def, usage+" ($"+envName(name)+")")
	}

	str(&c.ConfigFile, "config", "", "YAML config file: settings by flag name, Debezium outbox router settings under outbox:, per-table ones under tables: (see README)")
	str(&c.PGURL, "pg-url", "", "Postgres connection URL or DSN of the primary (required)")
	str(&c.PGPasswordFile, "pg-password-file", "", "file holding the Postgres password (else the URL, passfile or ~/.pgpass)")
	str(&c.Brokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers (required)")
	boolean(&c.KafkaTLS, "kafka-tls", false, "connect to Kafka with TLS, verifying brokers against the system roots or --kafka-tls-ca-file")
	str(&c.KafkaTLSCAFile, "kafka-tls-ca-file", "", "PEM CA bundle to verify the brokers with (implies --kafka-tls)")
	str(&c.KafkaTLSCertFile, "kafka-tls-cert-file", "", "PEM client certificate for mutual TLS")
	str(&c.KafkaTLSKeyFile, "kafka-tls-key-file", "", "PEM client key for mutual TLS")
	str(&c.KafkaTLSServerName, "kafka-tls-server-name", "", "name to verify the brokers' certificates against (default: the host dialed)")
	str(&c.KafkaSASLMechanism, "kafka-sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; the password comes from --kafka-sasl-password-file or $"+envKafkaSASLPassword)
	str(&c.KafkaSASLUser, "kafka-sasl-user", "", "SASL user")
	str(&c.KafkaSASLPasswordFile, "kafka-sasl-password-file", "", "file holding the SASL password")
	str(&c.Slot, "slot", DefaultSlot, "logical replication slot (pgoutput)")
	str(&c.Publication, "publication", DefaultPublication, "publication of the outbox table")
	str(&c.Table, "table", DefaultTable, "outbox tables, schema-qualified and comma-separated; they share the slot and the publication")
	boolean(&c.Create, "create", true, "create the publication and slot when missing")
	boolean(&c.AllowSlotAhead, "allow-slot-ahead", false, "start even though the slot is ahead of the checkpoint in Kafka, creating a missing slot (events may be missing; see README)")
	boolean(&c.AcceptPhantoms, "accept-phantoms", false, "go on after phantom events (published from WAL the server's history lacks), from where the histories part (see README, Postgres failover)")
	boolean(&c.AcceptSystemChange, "accept-system-change", false, "go on from the slot when the server is another cluster than the checkpoint's (see README, Postgres failover)")
	boolean(&c.FailoverSlot, "failover-slot", true, "create the slot as a failover slot where the server supports it (Postgres 17 and later)")
	str(&c.CheckpointTopic, "checkpoint-topic", DefaultCheckpointTopic, "compacted topic holding checkpoints")
	str(&c.CheckpointKey, "checkpoint-key", "", "key of this stream's checkpoints (default: the slot name)")
	str(&c.TransactionalID, "transactional-id", "", "Kafka transactional.id (default: walstream-<slot>)")
	num(&c.MaxBatchEvents, "max-batch-events", DefaultMaxBatchEvents, "events per Kafka transaction; larger Postgres transactions are split")
	num(&c.MaxBatchBytes, "max-batch-bytes", DefaultMaxBatchBytes, "bytes per Kafka transaction; larger Postgres transactions are split")
	num(&c.QueueBytes, "queue-bytes", DefaultQueueBytes, "memory of decoded events waiting for Kafka before WAL reading pauses")
	dur(&c.Linger, "linger", DefaultLinger, "how long a Kafka transaction waits for more Postgres transactions")
	dur(&c.StatusInterval, "status-interval", DefaultStatusInterval, "interval of standby status updates to Postgres (keepalive); commits are confirmed sooner, see --confirm-interval")
	dur(&c.ConfirmInterval, "confirm-interval", DefaultConfirmInterval, "least interval between status updates confirming Kafka commits to Postgres; 0 confirms only every --status-interval")
	dur(&c.ProgressInterval, "progress-interval", DefaultProgress, "interval of the progress log line while streaming; 0 disables it")
	dur(&c.IdleInterval, "idle-interval", DefaultIdleInterval, "minimum interval of checkpoint-only transactions while the outbox is idle")
	dur(&c.CommitTimeout, "commit-timeout", DefaultCommitTimeout, "limit on flushing and committing one Kafka transaction")
	str(&c.Converter, "converter", "string", "key and value bytes as Debezium emits them behind Kafka Connect's StringConverter (string) or JsonConverter with schemas.enable=false (json)")
	str(&c.KeyConverter, "key-converter", "", "the key's converter, as Connect's key.converter: string, json or a converter class; empty: --converter")
	str(&c.ValueConverter, "value-converter", "", "the value's converter, as Connect's value.converter: string, json or a converter class; empty: --converter")
	str(&c.KeySchemas, "key-converter-schemas-enable", "", "key.converter.schemas.enable: true or false; empty: JsonConverter's default, true, for --key-converter, false for --converter")
	str(&c.ValueSchemas, "value-converter-schemas-enable", "", "value.converter.schemas.enable: true or false; empty: JsonConverter's default, true, for --value-converter, false for --converter")
	str(&c.SchemaTopicPrefix, "topic-prefix", "", "the Debezium connector's topic.prefix, which value schemas of envelopes name under a JSON converter with schemas")
	c.Mapping = Mapping{}
	c.Mapping.flags(fs, envName)
	str(&c.Compression, "compression", "snappy", "record batch compression: snappy, lz4, zstd, gzip or none")
	str(&c.MessagePrefix, "message-prefix", "walstream", "prefix of transactional pg_logical_emit_message() outbox events; empty: ignore logical messages")
	str(&c.OnError, "on-error", OnErrorFail, "a row that cannot become a record: fail (stop, confirm nothing past it) or dead-letter (write it to --dlq-topic and go on)")
	str(&c.DeadLetterTopic, "dlq-topic", DefaultDeadLetterTopic, "dead-letter topic, with --on-error=dead-letter or --skip-event")
	str(&c.SkipEvent, "skip-event", "", "one event that cannot be published, as a stop message names it (<commit LSN>:<ordinal>): it goes to --dlq-topic with its reason and the skip is recorded in the checkpoint; nothing else is skipped (see README)")
	str(&c.AcceptRecreated, "accept-recreated-table", "", "outbox tables accepted as dropped and recreated, as schema.table=<new OID>, comma-separated, once the rows the recreation lost are dealt with (see README)")
	num(&c.MaxRecordBytes, "max-record-bytes", DefaultMaxRecordBytes, "largest record to send; keep it within the topics' max.message.bytes")
	dur(&c.SlotPollInterval, "slot-poll-interval", DefaultSlotPoll, "how often the slot's state is read for metrics and checked")
	dur(&c.ReadyConfirmAge, "ready-confirm-age", DefaultReadyConfirmAge, "/readyz fails when no position was confirmed to Postgres for this long")
	str(&c.HTTPConfigFile, "http-config-file", "", "Prometheus exporter-toolkit web config (TLS, basic auth) for the HTTP listener")
	str(&c.PprofAddr, "pprof-addr", "", "serve /debug/pprof on this loopback address; empty: off")
	str(&c.HTTPAddr, "http-addr", DefaultHTTPAddr, "listen address for /metrics, /healthz and /readyz; empty disables, port 0 picks one; one that binds every interface is logged as a warning")
	str(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	str(&c.LogFormat, "log-format", "text", "text or json")
	fs.Var(&c.TopicCreation, "topic-creation", "create missing outbox and dead-letter topics with Kafka Connect topic.creation.* settings, name=value separated by ; or new lines, e.g. default.partitions=6;default.replication.factor=3 (see README); empty: rely on the broker's auto.create.topics.enable ($"+envName("topic-creation")+")")
}

// parseConfig reads the settings of `walstream run`: flags, then the
// environment, then the config file. Help goes to stdout.
func parseConfig(args []string, stdout io.Writer) (*Config, error) {
	return parseCommand(command{name: "run", about: "Streams an outbox table from a Postgres logical replication slot into Kafka, exactly once.",
		needs: func() (pg, kafka bool) { return true, true }}, args, stdout)
}

// Validate reports every invalid setting, naming it.
func (c *Config) Validate() error {
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--%s ($%s): %s", name, envName(name), fmt.Sprintf(format, a...)))
	}
	if c.PGURL != "" {
		if _, err := pgconn.ParseConfig(c.PGURL); err != nil {
			// pgconn's parse errors redact the password.
			bad("pg-url", "%v", err)
		}
	}
	if _, err := c.tables(); err != nil {
		bad("table", "%v", err)
	} else if err := c.names().Validate(); err != nil {
		bad("slot/publication/table", "%v", err)
	} else if _, _, err := c.outboxes(); err != nil {
		errs = append(errs, err)
	}
	if err := publish.ValidTopic(c.CheckpointTopic); err != nil {
		bad("checkpoint-topic", "%v", err)
	}
	for _, n := range []struct {
		name     string
		v, limit int
	}{{"max-batch-events", c.MaxBatchEvents, maxBatchEvents}, {"max-batch-bytes", c.MaxBatchBytes, maxBytes},
		{"max-record-bytes", c.MaxRecordBytes, maxBytes}, {"queue-bytes", c.QueueBytes, maxQueueBytes}} {
		if n.v < 1 || n.v > n.limit {
			bad(n.name, "must be from 1 to %d, got %d", n.limit, n.v)
		}
	}
	for _, b := range c.brokers() {
		if err := checkBroker(b); err != nil {
			bad("kafka-brokers", "%v", err)
		}
	}
	if c.HTTPConfigFile != "" {
		if err := checkWebConfig(c.HTTPConfigFile); err != nil {
			bad("http-config-file", "%v", err)
		}
	}
	if c.Converter != "string" && c.Converter != "json" {
		bad("converter", "%q is not string or json", c.Converter)
	} else if enc, err := c.encoding(); err != nil {
		errs = append(errs, err)
	} else if enc.Value == publish.FormatJSONSchema && enc.SchemaPrefix == "" && c.envelopes() {
		bad("topic-prefix", "is required when envelope fields are written with schemas: the value schema is named <topic.prefix>.<schema>.<table>.<route-by value>.Value")
	}
	if _, err := publish.ParseCompression(c.Compression); err != nil {
		bad("compression", "%v", err)
	}
	if c.OnError != OnErrorFail && c.OnError != OnErrorDeadLetter {
		bad("on-error", "%q is not %s or %s", c.OnError, OnErrorFail, OnErrorDeadLetter)
	}
	if c.OnError == OnErrorDeadLetter || c.SkipEvent != "" {
		if err := publish.ValidTopic(c.DeadLetterTopic); err != nil {
			bad("dlq-topic", "%v", err)
		}
	}
	if c.SkipEvent != "" {
		if _, err := decode.ParseRef(c.SkipEvent); err != nil {
			bad("skip-event", "%v", err)
		}
	}
	if _, err := c.acceptRecreated(); err != nil {
		bad("accept-recreated-table", "%v", err)
	}
	if c.Linger < 0 {
		bad("linger", "must not be negative, got %s", c.Linger)
	}
	if c.ConfirmInterval < 0 || c.ConfirmInterval > c.StatusInterval {
		bad("confirm-interval", "must be between 0 and --status-interval (%s), got %s", c.StatusInterval, c.ConfirmInterval)
	}
	if c.ProgressInterval < 0 {
		bad("progress-interval", "must not be negative, got %s", c.ProgressInterval)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"status-interval", c.StatusInterval}, {"idle-interval", c.IdleInterval}, {"commit-timeout", c.CommitTimeout},
		{"slot-poll-interval", c.SlotPollInterval}, {"ready-confirm-age", c.ReadyConfirmAge}} {
		if d.v <= 0 {
			bad(d.name, "must be positive, got %s", d.v)
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		bad("log-level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	if c.PprofAddr != "" {
		if host, _, err := net.SplitHostPort(c.PprofAddr); err != nil || !replication.Loopback(host) {
			bad("pprof-addr", "%q: pprof shows memory and must listen on loopback, like 127.0.0.1:6060", c.PprofAddr)
		}
	}
	if _, err := c.kafkaConn(); err != nil {
		errs = append(errs, err)
	}
	if c.PGPasswordFile != "" {
		if _, err := os.Stat(c.PGPasswordFile); err != nil {
			bad("pg-password-file", "%v", err)
		}
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format", "%q is not text or json", c.LogFormat)
	}
	return errors.Join(errs...)
}

func (c *Config) brokers() []string {
	var bs []string
	for _, b := range strings.Split(c.Brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			bs = append(bs, b)
		}
	}
	return bs
}

func (c *Config) compression() publish.Compression {
	comp, _ := publish.ParseCompression(c.Compression) // validated
	return comp
}

// encoding is the key and value converters: --converter for both, each
// overridden by --key-converter and --value-converter as a Connect config
// sets key.converter and value.converter.
func (c *Config) encoding() (publish.Encoding, error) {
	var errs []error
	format := func(name, converter, schemasFlag, schemas string) publish.Format {
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
				errs = append(errs, fmt.Errorf("--%s ($%s): %q is not true or false", schemasFlag, envName(schemasFlag), schemas))
			}
		}
		f, err := publish.ParseFormat(converter, on)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s ($%s): %w", name, envName(name), err))
		}
		return f
	}
	enc := publish.Encoding{
		Key:          format("key-converter", c.KeyConverter, "key-converter-schemas-enable", c.KeySchemas),
		Value:        format("value-converter", c.ValueConverter, "value-converter-schemas-enable", c.ValueSchemas),
		SchemaPrefix: c.SchemaTopicPrefix,
	}
	return enc, errors.Join(errs...)
}

// envelopes reports whether any table places fields in the envelope.
func (c *Config) envelopes() bool {
	tables, messages, _ := c.outboxes()
	for _, o := range append(tables, messages) {
		for _, a := range o.Additional {
			if a.Placement == decode.PlaceEnvelope {
				return true
			}
		}
	}
	return false
}

// skipEvent is the event --skip-event names; zero when none.
func (c *Config) skipEvent() decode.Ref {
	r, _ := decode.ParseRef(c.SkipEvent) // validated
	return r
}

// acceptRecreated reads --accept-recreated-table: schema.table=oid entries.
func (c *Config) acceptRecreated() (map[string]uint32, error) {
	out := make(map[string]uint32)
	for _, entry := range strings.Split(c.AcceptRecreated, ",") {
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

// deadLetterTopic is the DLQ topic, or empty when bad rows are fatal.
func (c *Config) deadLetterTopic() string {
	if c.OnError == OnErrorDeadLetter {
		return c.DeadLetterTopic
	}
	return ""
}

func (c *Config) names() replication.Names {
	tables, _ := c.tables() // validated
	return replication.Names{Slot: c.Slot, Publication: c.Publication, Tables: tables}
}

// applyFile sets every flag the command line and the environment left
// unset from the config file: flags win over the environment, the
// environment over the file.
func (c *Config) applyFile(fs *flag.FlagSet, set map[string]bool) error {
	f, err := loadConfigFile(c.ConfigFile)
	if err != nil {
		return err
	}
	var errs []error
	apply := func(s fileSetting, flagName string) {
		if set[flagName] {
			return
		}
		if fs.Lookup(flagName) == nil {
			errs = append(errs, fmt.Errorf("config file %s, line %d: unknown setting %q (settings are flag names, like kafka-brokers)", c.ConfigFile, s.line, s.key))
			return
		}
		if err := fs.Set(flagName, s.value); err != nil {
			errs = append(errs, fmt.Errorf("config file %s, line %d: %s=%q: %s", c.ConfigFile, s.line, s.key, s.value, expected(fs.Lookup(flagName), err)))
		}
		set[flagName] = true
	}
	for _, s := range f.settings {
		if s.key == "config" {
			errs = append(errs, fmt.Errorf("config file %s, line %d: a config file cannot name another", c.ConfigFile, s.line))
			continue
		}
		if f, ok := connectKeys[s.key]; ok {
			apply(s, f)
			continue
		}
		apply(s, s.key)
	}
	for _, s := range f.outbox {
		// type, or transforms.<name>.type in a copied connector config.
		if s.key == "type" || strings.HasPrefix(s.key, "transforms.") && strings.HasSuffix(s.key, ".type") && strings.Count(s.key, ".") == 2 {
			if s.value != routerType {
				errs = append(errs, fmt.Errorf("config file %s, line %d: %s is %q; walstream is %s", c.ConfigFile, s.line, s.key, s.value, routerType))
			}
			continue
		}
		key, err := decode.CanonicalRouterKey(s.key)
		if err != nil {
			errs = append(errs, fmt.Errorf("config file %s, line %d: %w (see README, Debezium compatibility)", c.ConfigFile, s.line, err))
			continue
		}
		apply(s, routerFlags[key])
	}
	if len(f.tables) > 0 {
		if set["table"] {
			errs = append(errs, fmt.Errorf("config file %s: its tables section and --table ($%s, or table:) both name the outbox tables; keep one", c.ConfigFile, envName("table")))
		}
		c.Table, c.TableSettings = strings.Join(f.tables, ","), f.perTable
	}
	return errors.Join(errs...)
}

// connectKeys are Kafka Connect and Debezium connector settings a config
// file may hold at its top level as a connector config has them, with the
// flag each sets.
var connectKeys = map[string]string{
	"key.converter":                  "key-converter",
	"value.converter":                "value-converter",
	"key.converter.schemas.enable":   "key-converter-schemas-enable",
	"value.converter.schemas.enable": "value-converter-schemas-enable",
	"topic.prefix":                   "topic-prefix",
}

func (c *Config) logger(w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.LogLevel)) // validated
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
