package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/decode"
	"go.yaml.in/yaml/v3"
)

// A Debezium Postgres connector config with the outbox router, taken as it
// is (read by debezium.ReadConnector: JSON, properties, or a Strimzi
// KafkaConnector). Every key is mapped onto walstream's settings, listed
// as ignored with the reason, or refused with the key named
// (docs/debezium.md, Pasting a connector config).

// simpleHeaders is the header converter walstream writes headers as.
const simpleHeaders = "org.apache.kafka.connect.storage.SimpleHeaderConverter"

// ignoredKey is a connector key walstream has no use for, and why.
type ignoredKey struct{ Key, Why string }

// translation is what a connector config sets: flags by name (router
// settings by their flags too), the key that set each, the schema
// registry's secrets, which have no flags, and the keys it ignores.
type translation struct {
	flags, from map[string]string
	registry    registryKeys
	ignored     []ignoredKey
}

// set sets a flag from a key.
func (tr *translation) set(key, flag, value string) {
	tr.flags[flag], tr.from[flag] = value, key
}

// Why walstream ignores keys, by key or by prefix (ending in a dot).
var ignoredKeys = map[string]string{
	"tasks.max":                           "Debezium's Postgres connector runs one task, as walstream runs one stream",
	"tombstones.on.delete":                "the outbox router drops deletes",
	"heartbeat.interval.ms":               "walstream confirms an idle slot's position by itself (--idle-interval, --status-interval) and writes no heartbeat records",
	"heartbeat.action.query":              "walstream confirms the server's WAL end while the outbox is idle, so other databases' WAL does not pile up",
	"heartbeat.topics.prefix":             "walstream writes no heartbeat records",
	"topic.heartbeat.prefix":              "walstream writes no heartbeat records",
	"exactly.once.support":                "walstream always publishes exactly once, in Kafka transactions",
	"transaction.boundary":                "walstream chooses its Kafka transactions (--max-batch-events, --max-batch-bytes, --linger)",
	"transaction.boundary.interval.ms":    "walstream chooses its Kafka transactions (--max-batch-events, --max-batch-bytes, --linger)",
	"offsets.storage.topic":               "walstream keeps its position in --checkpoint-topic",
	"offset.flush.interval.ms":            "walstream commits its position with each Kafka transaction",
	"offset.flush.timeout.ms":             "walstream commits its position with each Kafka transaction",
	"offset.mismatch.strategy":            "walstream checks its checkpoint against the slot itself (docs/postgres.md)",
	"lsn.flush.timeout.ms":                "walstream confirms positions with its status updates (--status-interval)",
	"lsn.flush.timeout.action":            "walstream confirms positions with its status updates (--status-interval)",
	"max.batch.size":                      "walstream's batches are --max-batch-events and --max-batch-bytes",
	"max.queue.size":                      "walstream's queue is --queue-bytes",
	"max.queue.size.in.bytes":             "walstream's queue is --queue-bytes",
	"poll.interval.ms":                    "walstream hands rows on as they arrive (--linger)",
	"slot.max.retries":                    "walstream retries with backoff for as long as it runs",
	"slot.retry.delay.ms":                 "walstream retries with backoff for as long as it runs",
	"retriable.restart.connector.wait.ms": "walstream retries with backoff for as long as it runs",
	"errors.max.retries":                  "walstream retries with backoff for as long as it runs",
	"errors.retry.timeout":                "walstream retries with backoff for as long as it runs",
	"errors.retry.delay.max.ms":           "walstream retries with backoff for as long as it runs",
	"errors.log.enable":                   "walstream logs every failure",
	"errors.log.include.messages":         "walstream logs every failure",
	"database.tcpKeepAlive":               "walstream sends status updates every --status-interval",
	"database.server.name":                "Debezium 1.x's name, replaced by topic.prefix",
	"message.key.columns":                 "it keys change events, which the outbox router replaces by table.field.event.key",
	"xmin.fetch.interval.ms":              "walstream does not read xmin",
	"schema.refresh.mode":                 "walstream reads a table's catalog when its Relation message arrives, as columns_diff does",
	"include.unknown.datatypes":           "walstream refuses a column type it cannot encode, naming the column",
	"unavailable.value.placeholder":       "outbox rows are inserted whole; no value is an unchanged TOAST",
	"replica.identity.autoset.values":     "the outbox router ignores updates and deletes",
	"publication.autocreate.mode":         "walstream creates its publication for its tables when it is missing (--create)",
	"read.only":                           "walstream never writes to the database",
	"query.fetch.size":                    "walstream takes no snapshot",
	"incremental.snapshot.":               "walstream's re-emit requests read by primary key in chunks of --reemit-chunk-rows (see docs/reemit.md)",
	"snapshot.":                           "walstream takes no snapshot",
	"signal.":                             "walstream reads signals from the table signal.data.collection names only (see docs/reemit.md)",
	"notification.":                       "walstream sends no notifications",
	"producer.override.":                  "walstream's producer is its own: transactional, acks=all (the --kafka-* flags connect it)",
	"consumer.override.":                  "walstream's Kafka client is its own (the --kafka-* flags connect it)",
	"admin.override.":                     "walstream's Kafka client is its own (the --kafka-* flags connect it)",
	"guardrail.":                          "walstream streams only its named outbox tables",
	"custom.metric.tags":                  "walstream's metrics are its own (docs/metrics.md)",
	"openlineage.":                        "walstream reports no lineage",
	"database.history.":                   "Debezium 1.x's schema history; Postgres needs none",
	"schema.history.internal.":            "Postgres needs no schema history",
}

// refusedKeys are keys whose behaviour walstream cannot give, with the
// reason; ok, when set, accepts the values that change nothing.
var refusedKeys = map[string]struct {
	ok  func(v string) bool
	why string
}{
	"plugin.name":                            {is("pgoutput"), "walstream reads pgoutput only"},
	"decimal.handling.mode":                  {is("precise"), "walstream writes numeric as Debezium's default, precise (a Connect Decimal)"},
	"time.precision.mode":                    {is("adaptive"), "walstream writes times as Debezium's default, adaptive"},
	"interval.handling.mode":                 {is("numeric"), "walstream writes intervals as Debezium's default, numeric (MicroDuration)"},
	"binary.handling.mode":                   {is("bytes"), "walstream writes bytea as Debezium's default, bytes"},
	"money.fraction.digits":                  {is("2"), "walstream writes money with Debezium's default scale, 2"},
	"hstore.handling.mode":                   {is("json"), "walstream does not encode hstore columns"},
	"field.name.adjustment.mode":             {is("none"), "walstream keeps field names as they are, Debezium's default"},
	"schema.name.adjustment.mode":            {is("none"), "walstream keeps schema names as they are, Debezium's default"},
	"topic.delimiter":                        {is("."), "walstream names value schemas with Debezium's default delimiter, ."},
	"topic.naming.strategy":                  {is("io.debezium.schema.SchemaTopicNamingStrategy"), "walstream names value schemas as Debezium's default naming strategy does"},
	"event.processing.failure.handling.mode": {is("fail"), "walstream stops at a row it cannot publish, or dead-letters it (--on-error); it never skips one silently"},
	"errors.tolerance":                       {is("none"), "walstream never drops a record silently; --on-error=dead-letter writes what it cannot publish to --dlq-topic"},
	"slot.drop.on.stop":                      {is("false"), "walstream keeps its slot: its position is what makes delivery exactly once"},
	"lsn.flush.mode":                         {oneOf("connector", "connector_and_driver"), "walstream confirms the slot's position once Kafka has committed it"},
	"flush.lsn.source":                       {is("true"), "walstream confirms the slot's position once Kafka has committed it"},
	"provide.transaction.metadata":           {is("false"), "walstream writes no transaction metadata topic"},
	"publish.via.partition.root":             {is("false"), "walstream streams the outbox tables it names"},
	"database.initial.statements":            {nil, "walstream runs no statements of yours"},
	"slot.stream.params":                     {nil, "walstream starts replication with pgoutput's own options"},
	"converters":                             {nil, "walstream cannot load Debezium's custom converters"},
	"post.processors":                        {nil, "walstream cannot load Debezium's post processors"},
	"schema.include.list":                    {nil, "walstream streams the tables table.include.list names"},
	"schema.exclude.list":                    {nil, "walstream streams the tables table.include.list names"},
	"table.exclude.list":                     {nil, "walstream streams the tables table.include.list names"},
	"column.include.list":                    {nil, "the outbox router reads whole rows"},
	"column.exclude.list":                    {nil, "the outbox router reads whole rows"},
	"column.propagate.source.type":           {nil, "walstream writes no source type parameters in schemas"},
	"datatype.propagate.source.type":         {nil, "walstream writes no source type parameters in schemas"},
	"column.mask.":                           {nil, "walstream masks no columns"},
	"column.truncate.to.":                    {nil, "walstream truncates no columns"},
	"key.converter.":                         {nil, "is not a converter setting walstream knows (it takes schemas.enable, and the Avro converters' schema registry settings)"},
	"value.converter.":                       {nil, "is not a converter setting walstream knows (it takes schemas.enable, and the Avro converters' schema registry settings)"},
	"header.converter.":                      {nil, "walstream writes headers as SimpleHeaderConverter does"},
}

func is(want string) func(string) bool {
	return func(v string) bool { return strings.EqualFold(strings.TrimSpace(v), want) }
}

func oneOf(want ...string) func(string) bool {
	return func(v string) bool { return slices.ContainsFunc(want, func(w string) bool { return is(w)(v) }) }
}

// byPrefix finds a key's entry in a table keyed by key or by a prefix
// ending in a dot.
func byPrefix[V any](m map[string]V, key string) (V, bool) {
	if v, ok := m[key]; ok {
		return v, true
	}
	for k, v := range m {
		if strings.HasSuffix(k, ".") && strings.HasPrefix(key, k) {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// Keys mapped onto walstream's flags as they are, besides connectKeys,
// which walstream's config file takes too.
var connectorFlags = map[string]string{
	"name":                     "debezium-connector",
	"slot.name":                "slot",
	"publication.name":         "publication",
	"slot.failover":            "failover-slot",
	"extended.headers.enabled": "extended-headers",
	// Debezium's incremental snapshots are walstream's re-emit requests.
	"signal.data.collection":          "signal-table",
	"incremental.snapshot.chunk.size": "reemit-chunk-rows",
}

// Debezium's defaults of the keys whose defaults differ from walstream's:
// a pasted config means what it means to Debezium.
var connectorDefaults = map[string]string{
	"slot.name":                "debezium",
	"publication.name":         "dbz_publication",
	"extended.headers.enabled": "true",
}

// The converter keys a connector config may leave to the worker's config,
// which walstream cannot see.
var workerConverters = []string{"key.converter", "value.converter"}

// translate maps a connector config onto walstream's settings, its config
// provider references resolved; local leaves those to remote stores as
// they are (debezium.Connector.Resolve).
func translate(cc *debezium.Connector, local bool) (*translation, error) {
	tr := &translation{flags: make(map[string]string), from: make(map[string]string)}
	var errs []error
	refuse := func(key, why string) {
		errs = append(errs, fmt.Errorf("%s: %s (see docs/debezium.md, Pasting a connector config)", cc.At(key), why))
	}
	// A key walstream ignores needs no secret fetched for it.
	values, err := cc.Resolve(debezium.DefaultProviderEnv(), local, func(k string) bool {
		_, ignored := byPrefix(ignoredKeys, k)
		return ignored && k != "snapshot.mode"
	})
	errs = append(errs, err)
	if c := values["connector.class"]; strings.TrimSpace(c) != debezium.PostgresConnector {
		refuse("connector.class", fmt.Sprintf("is %q; walstream takes %s", c, debezium.PostgresConnector))
	}
	st := &translating{tr: tr, db: make(map[string]string), refuse: refuse}
	st.routers, st.decoders = transforms(values, refuse)
	st.predicates(values)
	for _, key := range slices.Sorted(maps.Keys(values)) {
		if key != "connector.class" && key != "transforms" { // checked above
			st.key(key, values[key])
		}
	}
	for key, def := range connectorDefaults {
		if f := connectorFlags[key]; tr.flags[f] == "" {
			tr.flags[f] = def
		}
	}
	if _, ok := values["topic.prefix"]; !ok {
		refuse("topic.prefix", "is required, as Debezium requires it")
	}
	if _, ok := values["table.include.list"]; !ok {
		refuse("table.include.list", "is required: walstream streams the outbox tables it names, where Debezium would capture every table")
	}
	if len(st.db) > 0 {
		dsn, err := postgresDSN(st.db)
		if err != nil {
			refuse("database."+err.key, err.why)
		}
		tr.flags["pg-url"] = dsn
	}
	if st.channels != nil && !slices.ContainsFunc(st.channels, func(c string) bool { return strings.TrimSpace(c) == "source" }) && tr.flags["signal-table"] != "" {
		// Debezium reads no signal table unless its source channel is on.
		tr.ignored = append(tr.ignored, ignoredKey{"signal.data.collection", "signal.enabled.channels lacks source, so Debezium reads no signal table either"})
		delete(tr.flags, "signal-table")
	}
	switch prefixes := st.prefixes; {
	case len(st.decoders) == 0:
		// Debezium would publish logical messages as change events to
		// <topic.prefix>.message; an outbox without the decoder has none.
		tr.flags["message-prefix"] = ""
	case prefixes == nil:
		tr.flags["message-prefix"] = "*"
	case len(prefixes) == 1 && !strings.ContainsAny(prefixes[0], `.*+?[](){}|^$\`):
		tr.flags["message-prefix"] = strings.TrimSpace(prefixes[0])
	default:
		refuse("message.prefix.include.list", "walstream takes the logical messages of one prefix, named as it is, or of every prefix")
	}
	return tr, errors.Join(errs...)
}

// translating is a connector config on its way to walstream's settings.
type translating struct {
	tr                *translation
	db                map[string]string // the database.* keys, less the prefix
	prefixes          []string          // message.prefix.include.list
	channels          []string          // signal.enabled.channels; nil: Debezium's default, source
	routers, decoders map[string]bool   // the transforms, by name
	refuse            func(key, why string)
}

// key maps one key of the config.
func (st *translating) key(key, v string) {
	tr := st.tr
	if name, rest, ok := transformKey(key); ok {
		switch {
		case rest == "type": // checked by transforms
		case st.routers[name] && (rest == "predicate" || rest == "negate"): // checked by predicates
		case st.routers[name]:
			if canon, err := decode.CanonicalRouterKey(key); err != nil {
				st.refuse(key, err.Error())
			} else {
				tr.set(key, routerFlagNames[canon], v)
			}
		case st.decoders[name] && rest == "fields.null.include":
			tr.flags["message-fields-null-include"] = v
		case st.decoders[name]:
			st.refuse(key, "not a setting of DecodeLogicalDecodingMessageContent")
		}
		return
	}
	if key == "predicates" || strings.HasPrefix(key, "predicates.") {
		return // checked by predicates
	}
	if known, err := tr.registry.add(key, v, func(flag, value string) { tr.set(key, flag, value) }); known {
		if err != nil {
			st.refuse(key, err.Error())
		}
		return
	}
	_, ignored := byPrefix(ignoredKeys, key)
	refused, isRefused := byPrefix(refusedKeys, key)
	switch {
	case strings.HasPrefix(key, "database.") && !ignored && !isRefused:
		st.db[strings.TrimPrefix(key, "database.")] = v
	case connectKeys[key] != "":
		tr.set(key, connectKeys[key], v)
	case connectorFlags[key] != "":
		tr.set(key, connectorFlags[key], v)
	case key == "table.include.list":
		tables, err := includedTables(v)
		if err != nil {
			st.refuse(key, err.Error())
		}
		tr.flags["table"] = tables
	case key == "status.update.interval.ms":
		ms, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil {
			st.refuse(key, fmt.Sprintf("%q is not a number of milliseconds", v))
		}
		tr.flags["status-interval"] = fmt.Sprintf("%dms", ms)
	case key == "header.converter":
		if strings.TrimSpace(v) != simpleHeaders {
			st.refuse(key, fmt.Sprintf("is %q; walstream writes headers as %s does", v, simpleHeaders))
		}
	case key == "skipped.operations" && strings.Contains(strings.ToLower(v), "c"):
		st.refuse(key, "skips inserts, which are the outbox's events")
	case key == "skipped.operations":
		tr.ignored = append(tr.ignored, ignoredKey{key, "the outbox router publishes inserts only"})
	case key == "signal.enabled.channels":
		st.channels = strings.Split(v, ",")
	case key == "message.prefix.include.list":
		st.prefixes = strings.Split(v, ",")
	case key == "message.prefix.exclude.list":
		st.refuse(key, "walstream takes the logical messages of one prefix, or of every prefix; name it in message.prefix.include.list")
	case strings.HasPrefix(key, "topic.creation."):
		tr.flags["topic-creation"] += strings.TrimPrefix(key, "topic.creation.") + "=" + v + ";"
	case key == "snapshot.mode":
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "no_data", "never":
			tr.ignored = append(tr.ignored, ignoredKey{key, "walstream streams from its slot's creation on, as no_data does"})
		case "initial", "when_needed":
			tr.ignored = append(tr.ignored, ignoredKey{key, "walstream takes no snapshot: rows committed before its slot existed are not published (Debezium publishes them at the connector's first start)"})
		default:
			st.refuse(key, fmt.Sprintf("%q: walstream takes no snapshot", v))
		}
	case isRefused:
		if refused.ok == nil || !refused.ok(v) {
			st.refuse(key, fmt.Sprintf("%q: %s", v, refused.why))
		}
	case ignored:
		why, _ := byPrefix(ignoredKeys, key)
		tr.ignored = append(tr.ignored, ignoredKey{key, why})
	default:
		st.refuse(key, "is not a key walstream knows")
	}
}

// transformKey splits transforms.<name>.<setting>.
func transformKey(key string) (name, rest string, ok bool) {
	after, ok := strings.CutPrefix(key, "transforms.")
	if !ok {
		return "", "", false
	}
	name, rest, ok = strings.Cut(after, ".")
	return name, rest, ok
}

// transforms checks the transform chain: the outbox router, and before it
// Debezium's decoder of logical messages, and nothing else.
func transforms(values map[string]string, refuse func(key, why string)) (routers, decoders map[string]bool) {
	routers, decoders = make(map[string]bool), make(map[string]bool)
	chain := values["transforms"]
	var names []string
	for _, n := range strings.Split(chain, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	for _, n := range names {
		typ := strings.TrimSpace(values["transforms."+n+".type"])
		switch {
		case typ == decode.RouterType && len(routers) == 0:
			routers[n] = true
		case typ == debezium.MessageDecoder && len(routers) == 0:
			decoders[n] = true
		case typ == debezium.MessageDecoder:
			refuse("transforms", fmt.Sprintf("%s comes after the outbox router: the router would get the logical messages undecoded", n))
		case typ == "":
			refuse("transforms."+n+".type", "is missing")
		default:
			refuse("transforms."+n+".type", fmt.Sprintf("is %q; walstream applies %s (and, before it, %s) only", typ, decode.RouterType, debezium.MessageDecoder))
		}
	}
	if len(routers) == 0 {
		refuse("transforms", fmt.Sprintf("names no %s: walstream is the outbox router", decode.RouterType))
	}
	for key := range values {
		if name, _, ok := transformKey(key); ok && !slices.Contains(names, name) {
			refuse(key, fmt.Sprintf("transform %s is not in transforms=%s", name, chain))
		}
	}
	return routers, decoders
}

// topicNameMatches is Kafka Connect's predicate on a record's topic.
const topicNameMatches = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"

// predicates checks the outbox router's predicate. A config with a signal
// table needs one: Debezium publishes the signal table's rows as change
// events, which would stop the router, so the router is limited to the
// outbox tables' topics with Kafka Connect's TopicNameMatches. walstream
// routes every outbox table and publishes nothing of other tables, so the
// predicate must let every outbox table's records through; the change
// events of the tables it leaves out (the signal table's) are the
// difference, noted as ignored.
func (st *translating) predicates(values map[string]string) {
	used := make(map[string]bool)
	for router := range st.routers {
		key := "transforms." + router + ".predicate"
		name := strings.TrimSpace(values[key])
		negate := strings.EqualFold(strings.TrimSpace(values["transforms."+router+".negate"]), "true")
		if name == "" {
			if _, ok := values["transforms."+router+".negate"]; ok {
				st.refuse("transforms."+router+".negate", "negates no predicate")
			}
			continue
		}
		used[name] = true
		if !slices.Contains(splitList(values["predicates"]), name) {
			st.refuse(key, fmt.Sprintf("predicate %s is not in predicates=%s", name, values["predicates"]))
			continue
		}
		if typ := strings.TrimSpace(values["predicates."+name+".type"]); typ != topicNameMatches {
			st.refuse("predicates."+name+".type", fmt.Sprintf("is %q; walstream takes %s on the outbox router only", typ, topicNameMatches))
			continue
		}
		pattern := values["predicates."+name+".pattern"]
		re, err := regexp.Compile(`^(?:` + pattern + `)$`)
		if err != nil {
			st.refuse("predicates."+name+".pattern", fmt.Sprintf("%q is not a regular expression walstream reads: %v", pattern, err))
			continue
		}
		tables, _ := includedTables(values["table.include.list"])
		for _, t := range splitList(tables) {
			topic := strings.TrimSpace(values["topic.prefix"]) + "." + t
			if re.MatchString(topic) == negate {
				st.refuse(key, fmt.Sprintf("leaves out the records of outbox table %s (topic %s), which walstream routes as it does every outbox table's", t, topic))
			}
		}
		st.tr.ignored = append(st.tr.ignored, ignoredKey{key, "walstream publishes the outbox tables' events only; Debezium also publishes the change events of the tables the predicate leaves out (such as the signal table's)"})
	}
	for _, name := range splitList(values["predicates"]) {
		if !used[name] {
			st.refuse("predicates", fmt.Sprintf("predicate %s is not the outbox router's; walstream applies no other transform", name))
		}
	}
	for key := range values {
		if name, _, ok := strings.Cut(strings.TrimPrefix(key, "predicates."), "."); ok && strings.HasPrefix(key, "predicates.") && !slices.Contains(splitList(values["predicates"]), name) {
			st.refuse(key, fmt.Sprintf("predicate %s is not in predicates=%s", name, values["predicates"]))
		}
	}
}

// includedTables reads table.include.list, a list of regular expressions
// over schema.table, as the outbox tables it names: each must name one
// table, not a pattern.
func includedTables(list string) (string, error) {
	var tables []string
	for _, t := range strings.Split(list, ",") {
		t = strings.ReplaceAll(strings.TrimSpace(t), `\.`, ".")
		if t == "" {
			continue
		}
		if strings.ContainsAny(t, `*+?[](){}|^$\`) {
			return "", fmt.Errorf("%q is a pattern; walstream streams named tables: list each as schema.table", t)
		}
		if !strings.Contains(t, ".") {
			return "", fmt.Errorf("%q names no schema: Debezium matches schema.table", t)
		}
		tables = append(tables, t)
	}
	return strings.Join(tables, ","), nil
}

type dbKeyError struct{ key, why string }

// postgresDSN is the connection string of the database.* keys, in the
// key=value form pgx reads; the password stays out of logs, as walstream
// never logs the connection string.
func postgresDSN(db map[string]string) (string, *dbKeyError) {
	params := map[string]string{
		"hostname": "host", "port": "port", "user": "user", "password": "password", "dbname": "dbname",
		"sslmode": "sslmode", "sslrootcert": "sslrootcert", "sslcert": "sslcert", "sslkey": "sslkey", "sslpassword": "sslpassword",
		"connectTimeout": "connect_timeout",
	}
	if db["hostname"] == "" {
		return "", &dbKeyError{"hostname", "is required"}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(db)) {
		p, ok := params[k]
		if !ok {
			return "", &dbKeyError{k, "is not a database setting walstream knows"}
		}
		v := db[k]
		if k == "connectTimeout" { // milliseconds, libpq's seconds
			ms, err := strconv.Atoi(v)
			if err != nil {
				return "", &dbKeyError{k, fmt.Sprintf("%q is not a number of milliseconds", v)}
			}
			v = strconv.Itoa(max(1, (ms+999)/1000))
		}
		if k == "sslmode" && strings.EqualFold(v, "disable") {
			v = "disable"
		}
		parts = append(parts, p+"='"+strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v)+"'")
	}
	if db["port"] == "" {
		parts = append(parts, "port='5432'")
	}
	return strings.Join(parts, " "), nil
}

// applyConnector sets every flag the command line and the environment left
// unset from a connector config, and notes the keys it ignores.
func (c *Config) applyConnector(fs *flag.FlagSet, set map[string]bool, cc *debezium.Connector) error {
	tr, err := translate(cc, false)
	var errs []error
	errs = append(errs, err)
	for _, name := range slices.Sorted(maps.Keys(tr.flags)) {
		if set[name] {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			errs = append(errs, fmt.Errorf("connector config %s: no flag %s", cc.Path, name))
			continue
		}
		if err := fs.Set(name, tr.flags[name]); err != nil {
			at := fmt.Sprintf("connector config %s (--%s)", cc.Path, name)
			if key, ok := tr.from[name]; ok {
				at = cc.At(key)
			}
			errs = append(errs, fmt.Errorf("%s: %q: %s", at, tr.flags[name], expected(f, err)))
		}
		set[name] = true
	}
	c.registryPassword, c.registryToken = tr.registry.password, tr.registry.token
	c.Ignored = tr.ignored
	c.Connector = cc.Form
	return errors.Join(errs...)
}

// unsetConverters refuses a connector config's stream whose converters
// nothing set: set are the flags set once every source was read.
func unsetConverters(set map[string]bool, path string) error {
	var errs []error
	for _, k := range workerConverters {
		if !set[connectKeys[k]] {
			errs = append(errs, fmt.Errorf("connector config %s: %s is not set: the connector takes the Kafka Connect worker's, which walstream cannot see; set it in the connector config or with --%s", path, k, connectKeys[k]))
		}
	}
	return errors.Join(errs...)
}

// printFromDebezium prints the walstream config file equivalent to a
// connector config: the settings it maps to, by flag name, the router's
// under outbox:, and the keys it ignores as comments. The database
// password is left out: walstream reads it from $PGPASSWORD, ~/.pgpass or
// --pg-password-file, never from a file it prints.
func printFromDebezium(w io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the connector config: %w", err)
	}
	cc, ok, err := debezium.ReadConnector(path, b)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is not a Debezium connector config (JSON, properties, or a Strimzi KafkaConnector with connector.class)", path)
	}
	password := cc.Values["database.password"]
	delete(cc.Values, "database.password")
	// Secrets in the Kubernetes API or AWS stay there: the printed config
	// says where, and walstream reads them when it runs with the connector
	// config itself.
	tr, err := translate(cc, true)
	if err != nil {
		return err
	}
	router := make(map[string]string)
	for key, f := range routerFlagNames {
		if v, ok := tr.flags[f]; ok {
			router[key] = v
			delete(tr.flags, f)
		}
	}
	fmt.Fprintf(w, "# walstream's config for the Debezium connector config %s (%s); walstream run --config this.yaml\n", path, cc.Form)
	if name := cc.Values["name"]; name != "" {
		fmt.Fprintf(w, "# connector %s\n", name)
	}
	for _, name := range slices.Sorted(maps.Keys(tr.flags)) {
		if refs := debezium.ProviderRefs(tr.flags[name]); len(refs) > 0 {
			from := tr.from[name]
			if name == "pg-url" {
				from = "database.*"
			}
			fmt.Fprintf(w, "# %s: from %s, which refers to %s: walstream run --config %s reads it there; or give %s here\n",
				name, from, strings.Join(refs, ", "), path, name)
			continue
		}
		fmt.Fprintf(w, "%s: %s\n", name, yamlScalar(tr.flags[name]))
		if name == "pg-url" && password != "" {
			fmt.Fprintln(w, "# the password is not copied: walstream reads it from $PGPASSWORD, ~/.pgpass or --pg-password-file")
		}
	}
	if tr.registry.password != "" {
		fmt.Fprintf(w, "# the schema registry's password is not copied: walstream reads it from --schema-registry-password-file or $%s\n", envRegistryPassword)
	}
	if tr.registry.token != "" {
		fmt.Fprintf(w, "# the schema registry's token is not copied: walstream reads it from --schema-registry-token-file or $%s\n", envRegistryToken)
	}
	fmt.Fprintln(w, "kafka-brokers: ${KAFKA_BROKERS} # the Kafka Connect worker's bootstrap.servers")
	if len(router) > 0 {
		fmt.Fprintln(w, "outbox:")
		for _, key := range slices.Sorted(maps.Keys(router)) {
			fmt.Fprintf(w, "  %s: %s\n", key, yamlScalar(router[key]))
		}
	}
	if len(tr.ignored) > 0 {
		fmt.Fprintln(w, "# keys walstream has no use for:")
		for _, k := range tr.ignored {
			fmt.Fprintf(w, "#   %s: %s\n", k.Key, k.Why)
		}
	}
	return nil
}

// yamlScalar writes a value as a YAML scalar that reads back as the same
// string.
func yamlScalar(v string) string {
	if v == "true" || v == "false" {
		return v // a boolean setting, which reads back as its text
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return strconv.Quote(v)
	}
	return strings.TrimSuffix(string(b), "\n")
}
