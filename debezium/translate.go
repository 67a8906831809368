package debezium

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/walstream/walstream/decode"
)

// A Debezium Postgres connector config with the outbox router, taken as it
// is (read by ReadConnector: JSON, properties, or a Strimzi
// KafkaConnector). Every key is mapped onto walstream's settings, listed
// as ignored with the reason, or refused with the key named
// (docs/debezium.md, Pasting a connector config). A setting goes by its
// name, which is its flag's and its config file key's; the reasons name
// settings as flags.

// simpleHeaders is the header converter walstream writes headers as.
const simpleHeaders = "org.apache.kafka.connect.storage.SimpleHeaderConverter"

// IgnoredKey is a connector key walstream has no use for, and why.
type IgnoredKey struct{ Key, Why string }

// Translation is what a connector config sets: walstream's settings by
// name (an outbox router setting by its name in RouterSettings too), the
// key that set each (From: the key, or the pattern of the keys, such as
// database.*), the settings only Debezium's defaults of the keys the config
// leaves out set (Defaults), the schema registry's secrets, which have no
// settings, the keys walstream ignores, and the config provider references
// left unresolved, as written in the settings.
type Translation struct {
	Settings, From map[string]string
	Defaults       map[string]bool
	Registry       RegistryKeys
	Ignored        []IgnoredKey
	Unresolved     []Unresolved
}

// set sets a setting from a key.
func (tr *Translation) set(key, setting, value string) {
	tr.Settings[setting], tr.From[setting] = value, key
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

// Keys mapped onto walstream's settings as they are, besides ConnectKeys,
// which walstream's config file takes too.
var connectorSettings = map[string]string{
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

// Translate maps a connector config onto walstream's settings, its config
// provider references resolved as mode says (Connector.Resolve).
func Translate(cc *Connector, mode Resolving) (*Translation, error) {
	tr := &Translation{Settings: make(map[string]string), From: make(map[string]string), Defaults: make(map[string]bool)}
	var errs []error
	refuse := func(key, why string) {
		errs = append(errs, fmt.Errorf("%s: %s (see docs/debezium.md, Pasting a connector config)", cc.At(key), why))
	}
	// A key walstream ignores needs no secret fetched for it.
	values, unresolved, err := cc.Resolve(DefaultProviderEnv(), mode, func(k string) bool {
		_, ignored := byPrefix(ignoredKeys, k)
		return ignored && k != "snapshot.mode"
	})
	errs = append(errs, err)
	tr.Unresolved = unresolved
	if c := values["connector.class"]; strings.TrimSpace(c) != PostgresConnector {
		refuse("connector.class", fmt.Sprintf("is %q; walstream takes %s", c, PostgresConnector))
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
		if name := connectorSettings[key]; tr.Settings[name] == "" {
			tr.Settings[name], tr.Defaults[name] = def, true
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
		tr.set("database.*", "pg-url", dsn)
	}
	if st.channels != nil && !slices.ContainsFunc(st.channels, func(c string) bool { return strings.TrimSpace(c) == "source" }) && tr.Settings["signal-table"] != "" {
		// Debezium reads no signal table unless its source channel is on.
		tr.Ignored = append(tr.Ignored, IgnoredKey{"signal.data.collection", "signal.enabled.channels lacks source, so Debezium reads no signal table either"})
		delete(tr.Settings, "signal-table")
		delete(tr.From, "signal-table")
	}
	switch prefixes := st.prefixes; {
	case len(st.decoders) == 0:
		// Debezium would publish logical messages as change events to
		// <topic.prefix>.message; an outbox without the decoder has none.
		tr.Settings["message-prefix"], tr.Defaults["message-prefix"] = "", true
	case prefixes == nil:
		tr.Settings["message-prefix"], tr.Defaults["message-prefix"] = "*", true
	case len(prefixes) == 1 && !strings.ContainsAny(prefixes[0], `.*+?[](){}|^$\`):
		tr.set("message.prefix.include.list", "message-prefix", strings.TrimSpace(prefixes[0]))
	default:
		refuse("message.prefix.include.list", "walstream takes the logical messages of one prefix, named as it is, or of every prefix")
	}
	return tr, errors.Join(errs...)
}

// translating is a connector config on its way to walstream's settings.
type translating struct {
	tr                *Translation
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
				tr.set(key, RouterSettings[canon], v)
			}
		case st.decoders[name] && rest == "fields.null.include":
			tr.set(key, "message-fields-null-include", v)
		case st.decoders[name]:
			st.refuse(key, "not a setting of DecodeLogicalDecodingMessageContent")
		}
		return
	}
	if key == "predicates" || strings.HasPrefix(key, "predicates.") {
		return // checked by predicates
	}
	if known, err := tr.Registry.Add(key, v, func(setting, value string) { tr.set(key, setting, value) }); known {
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
	case ConnectKeys[key] != "":
		tr.set(key, ConnectKeys[key], v)
	case connectorSettings[key] != "":
		tr.set(key, connectorSettings[key], v)
	case key == "table.include.list":
		tables, err := includedTables(v)
		if err != nil {
			st.refuse(key, err.Error())
		}
		tr.set(key, "table", strings.Join(tables, ","))
	case key == "status.update.interval.ms":
		ms, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil {
			st.refuse(key, fmt.Sprintf("%q is not a number of milliseconds", v))
		}
		tr.set(key, "status-interval", fmt.Sprintf("%dms", ms))
	case key == "header.converter":
		if strings.TrimSpace(v) != simpleHeaders {
			st.refuse(key, fmt.Sprintf("is %q; walstream writes headers as %s does", v, simpleHeaders))
		}
	case key == "skipped.operations" && strings.Contains(strings.ToLower(v), "c"):
		st.refuse(key, "skips inserts, which are the outbox's events")
	case key == "skipped.operations":
		tr.Ignored = append(tr.Ignored, IgnoredKey{key, "the outbox router publishes inserts only"})
	case key == "signal.enabled.channels":
		st.channels = strings.Split(v, ",")
	case key == "message.prefix.include.list":
		st.prefixes = strings.Split(v, ",")
	case key == "message.prefix.exclude.list":
		st.refuse(key, "walstream takes the logical messages of one prefix, or of every prefix; name it in message.prefix.include.list")
	case strings.HasPrefix(key, "topic.creation."):
		tr.set("topic.creation.*", "topic-creation", tr.Settings["topic-creation"]+strings.TrimPrefix(key, "topic.creation.")+"="+v+";")
	case key == "snapshot.mode":
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "no_data", "never":
			tr.Ignored = append(tr.Ignored, IgnoredKey{key, "walstream streams from its slot's creation on, as no_data does"})
		case "initial", "when_needed":
			tr.Ignored = append(tr.Ignored, IgnoredKey{key, "walstream takes no snapshot: rows committed before its slot existed are not published (Debezium publishes them at the connector's first start)"})
		default:
			st.refuse(key, fmt.Sprintf("%q: walstream takes no snapshot", v))
		}
	case isRefused:
		if refused.ok == nil || !refused.ok(v) {
			st.refuse(key, fmt.Sprintf("%q: %s", v, refused.why))
		}
	case ignored:
		why, _ := byPrefix(ignoredKeys, key)
		tr.Ignored = append(tr.Ignored, IgnoredKey{key, why})
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
		case typ == MessageDecoder && len(routers) == 0:
			decoders[n] = true
		case typ == MessageDecoder:
			refuse("transforms", fmt.Sprintf("%s comes after the outbox router: the router would get the logical messages undecoded", n))
		case typ == "":
			refuse("transforms."+n+".type", "is missing")
		default:
			refuse("transforms."+n+".type", fmt.Sprintf("is %q; walstream applies %s (and, before it, %s) only", typ, decode.RouterType, MessageDecoder))
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
	var predicates []string // the list predicates= names
	if strings.TrimSpace(values["predicates"]) != "" {
		for _, name := range strings.Split(values["predicates"], ",") {
			predicates = append(predicates, strings.TrimSpace(name))
		}
	}
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
		if !slices.Contains(predicates, name) {
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
		for _, t := range tables {
			topic := strings.TrimSpace(values["topic.prefix"]) + "." + t
			if re.MatchString(topic) == negate {
				st.refuse(key, fmt.Sprintf("leaves out the records of outbox table %s (topic %s), which walstream routes as it does every outbox table's", t, topic))
			}
		}
		st.tr.Ignored = append(st.tr.Ignored, IgnoredKey{key, "walstream publishes the outbox tables' events only; Debezium also publishes the change events of the tables the predicate leaves out (such as the signal table's)"})
	}
	for _, name := range predicates {
		if !used[name] {
			st.refuse("predicates", fmt.Sprintf("predicate %s is not the outbox router's; walstream applies no other transform", name))
		}
	}
	for key := range values {
		if name, _, ok := strings.Cut(strings.TrimPrefix(key, "predicates."), "."); ok && strings.HasPrefix(key, "predicates.") && !slices.Contains(predicates, name) {
			st.refuse(key, fmt.Sprintf("predicate %s is not in predicates=%s", name, values["predicates"]))
		}
	}
}

// includedTables reads table.include.list, a list of regular expressions
// over schema.table, as the outbox tables it names: each must name one
// table, not a pattern.
func includedTables(list string) ([]string, error) {
	var tables []string
	for _, t := range strings.Split(list, ",") {
		t = strings.ReplaceAll(strings.TrimSpace(t), `\.`, ".")
		if t == "" {
			continue
		}
		if strings.ContainsAny(t, `*+?[](){}|^$\`) {
			return nil, fmt.Errorf("%q is a pattern; walstream streams named tables: list each as schema.table", t)
		}
		if !strings.Contains(t, ".") {
			return nil, fmt.Errorf("%q names no schema: Debezium matches schema.table", t)
		}
		tables = append(tables, t)
	}
	return tables, nil
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
