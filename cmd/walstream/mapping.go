package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
)

// Mapping is how outbox rows become records: the settings of Debezium's
// outbox event router, each also a flag. Config holds the mapping of every
// table; a config file's tables section overrides it per table.
type Mapping struct {
	EventIDColumn       string
	EventKeyColumn      string
	PayloadColumn       string
	TimestampColumn     string
	RouteByColumn       string
	TopicRegex          string
	TopicTemplate       string
	Tombstones          bool
	AdditionalPlacement string
	AdditionalOnMissing bool
	OnUpdate            string
	ExpandJSON          bool
	TracingColumn       string
}

// debeziumKey is a router setting: its Debezium name and the flag it sets.
type debeziumKey struct{ key, flag string }

// debeziumKeys are the router settings walstream takes, in the order
// Debezium documents them.
var debeziumKeys = []debeziumKey{
	{"table.field.event.id", "event-id-column"},
	{"table.field.event.key", "event-key-column"},
	{"table.field.event.payload", "payload-column"},
	{"table.field.event.timestamp", "timestamp-column"},
	{"table.fields.additional.placement", "additional-placement"},
	{"table.fields.additional.error.on.missing", "additional-error-on-missing"},
	{"table.op.invalid.behavior", "on-update"},
	{"table.expand.json.payload", "expand-json-payload"},
	{"route.by.field", "route-by-column"},
	{"route.topic.regex", "topic-regex"},
	{"route.topic.replacement", "topic-template"},
	{"route.tombstone.on.empty.payload", "tombstone-on-empty-payload"},
	{"tracing.span.context.field", "tracing-column"},
}

// debeziumAliases are other names of the same settings: older Debezium
// releases' names, and the short name walstream's issue tracker used.
var debeziumAliases = map[string]string{
	"table.field.payload":            "table.field.event.payload",
	"debezium.op.invalid.behavior":   "table.op.invalid.behavior",
	"table.field.additional.missing": "table.fields.additional.error.on.missing",
}

// unsupportedKeys are Debezium router settings walstream refuses rather
// than ignores, with the reason.
var unsupportedKeys = map[string]string{
	"table.field.event.schema.version":   "walstream writes no Kafka Connect schemas",
	"table.field.schema.version":         "walstream writes no Kafka Connect schemas",
	"table.json.payload.null.behavior":   "walstream writes no Kafka Connect schemas; a NULL payload is bad input or, with route.tombstone.on.empty.payload, a tombstone",
	"table.field.event.type":             "removed in Debezium 2.0; use table.fields.additional.placement=type:header:eventType",
	"table.field.payload.id":             "removed in Debezium 2.0; use table.field.event.key",
	"tracing.operation.name":             "walstream copies the trace context into a traceparent header and opens no spans",
	"tracing.with.context.field.only":    "walstream copies the trace context into a traceparent header and opens no spans",
	"route.topic.regex.replacement.case": "not an outbox router setting",
	"predicate":                          "walstream applies the router to exactly the outbox tables it is given",
	"negate":                             "walstream applies the router to exactly the outbox tables it is given",
}

// canonicalKey strips the transforms.<name>. prefix a connector config
// carries, so that router settings can be copied as they are, and resolves
// aliases. It returns the flag the key sets, or an error saying why the key
// is refused.
func canonicalKey(key string) (string, error) {
	k := key
	if rest, ok := strings.CutPrefix(k, "transforms."); ok {
		if _, after, ok := strings.Cut(rest, "."); ok {
			k = after
		}
	}
	if a, ok := debeziumAliases[k]; ok {
		k = a
	}
	for _, dk := range debeziumKeys {
		if dk.key == k {
			return dk.flag, nil
		}
	}
	if why, ok := unsupportedKeys[k]; ok {
		return "", fmt.Errorf("outbox key %q is not supported: %s", key, why)
	}
	return "", fmt.Errorf("outbox key %q is not a Debezium outbox router setting walstream knows (see README, Debezium compatibility)", key)
}

// routerType is the one value of a copied transforms.<name>.type key.
const routerType = "io.debezium.transforms.outbox.EventRouter"

// flags defines the mapping's flags with str and boolean, which are
// Config.flags' helpers: each flag's usage then names its environment
// variable, and here its Debezium key too.
func (m *Mapping) flags(str func(*string, string, string, string), boolean func(*bool, string, bool, string)) {
	d := decode.DefaultColumns()
	key := func(flagName string) string {
		for _, dk := range debeziumKeys {
			if dk.flag == flagName {
				return " (Debezium's " + dk.key + ")"
			}
		}
		return ""
	}
	s := func(p *string, name, def, usage string) { str(p, name, def, usage+key(name)) }
	b := func(p *bool, name string, def bool, usage string) { boolean(p, name, def, usage+key(name)) }
	s(&m.EventIDColumn, "event-id-column", d.ID, "column of the event id, sent as the id header")
	s(&m.EventKeyColumn, "event-key-column", d.AggregateID, "column of the record key")
	s(&m.PayloadColumn, "payload-column", d.Payload, "column of the record value")
	s(&m.TimestampColumn, "timestamp-column", "", "timestamp or timestamptz column that becomes the record timestamp; empty: the time Kafka receives it")
	s(&m.RouteByColumn, "route-by-column", d.AggregateType, "column whose value names the topic")
	s(&m.TopicRegex, "topic-regex", publish.DefaultTopicRegex, "regex over the route-by value, whose groups --topic-template may use; an unmatched value is the topic itself")
	s(&m.TopicTemplate, "topic-template", publish.DefaultTopicReplacement, "topic of an event: "+publish.RoutedByValue+" is its route-by value, $1 a regex group")
	b(&m.Tombstones, "tombstone-on-empty-payload", false, "a NULL or empty payload becomes a tombstone (no value) instead of bad input")
	s(&m.AdditionalPlacement, "additional-placement", "", "more columns in the record: comma-separated column:header|envelope|partition[:alias]")
	b(&m.AdditionalOnMissing, "additional-error-on-missing", true, "refuse a table that lacks a column of --additional-placement; false skips it")
	s(&m.OnUpdate, "on-update", "warn", "an UPDATE of an outbox row: warn or error (log it and go on) or fatal (stop)")
	b(&m.ExpandJSON, "expand-json-payload", false, "with --converter=json, write a JSON payload as JSON rather than as a JSON string")
	s(&m.TracingColumn, "tracing-column", d.Tracing, "column of a W3C trace context (Debezium's properties text or a traceparent), sent as the traceparent header")
}

// outbox builds the decode mapping of one table; t is empty for the
// mapping of logical messages.
func (m *Mapping) outbox(t replication.Table) (*decode.Outbox, error) {
	var errs []error
	additional, err := decode.ParseAdditional(m.AdditionalPlacement)
	if err != nil {
		errs = append(errs, fmt.Errorf("--additional-placement: %w", err))
	}
	onUpdate, err := decode.ParseInvalidOp(m.OnUpdate)
	if err != nil {
		errs = append(errs, fmt.Errorf("--on-update: %w", err))
	}
	if _, err := publish.NewRoute(m.TopicRegex, m.TopicTemplate); err != nil {
		errs = append(errs, fmt.Errorf("--topic-regex/--topic-template: %w", err))
	}
	for _, c := range []struct{ flag, v string }{{"event-id-column", m.EventIDColumn}, {"event-key-column", m.EventKeyColumn},
		{"payload-column", m.PayloadColumn}, {"route-by-column", m.RouteByColumn}} {
		if c.v == "" {
			errs = append(errs, fmt.Errorf("--%s: must name a column", c.flag))
		}
	}
	o := &decode.Outbox{
		Schema: t.Schema, Table: t.Name,
		Columns: decode.Columns{ID: m.EventIDColumn, AggregateType: m.RouteByColumn, AggregateID: m.EventKeyColumn,
			Type: decode.DefaultColumns().Type, Payload: m.PayloadColumn, Timestamp: m.TimestampColumn, Tracing: m.TracingColumn},
		Additional: additional, AdditionalOptional: !m.AdditionalOnMissing, OnUpdate: onUpdate,
		TombstoneOnEmptyPayload: m.Tombstones, TopicRegex: m.TopicRegex, TopicReplacement: m.TopicTemplate, ExpandJSONPayload: m.ExpandJSON,
	}
	return o, errors.Join(errs...)
}

// override returns the mapping with a table's own router settings applied.
func (m Mapping) override(settings map[string]string) (Mapping, error) {
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var scratch Mapping
	scratch.flags(func(p *string, name, def, usage string) { fs.StringVar(p, name, def, usage) },
		func(p *bool, name string, def bool, usage string) { fs.BoolVar(p, name, def, usage) })
	scratch = m // the flags point into scratch: start from the shared mapping
	var errs []error
	for _, k := range sortedKeys(settings) {
		flagName, err := canonicalKey(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := fs.Set(flagName, settings[k]); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", k, settings[k], err))
		}
	}
	return scratch, errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// tables are the outbox tables, from --table.
func (c *Config) tables() ([]replication.Table, error) {
	var out []replication.Table
	for _, s := range strings.Split(c.Table, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		t, err := replication.ParseTable(s)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// outboxes builds every table's mapping, and the one logical messages use.
func (c *Config) outboxes() (tables []*decode.Outbox, messages *decode.Outbox, err error) {
	// The shared mapping first: when it is wrong, every table's is too.
	if messages, err = c.Mapping.outbox(replication.Table{}); err != nil {
		return nil, nil, err
	}
	ts, err := c.tables()
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	listed := make(map[string]bool)
	for _, t := range ts {
		listed[t.String()] = true
		m, err := c.Mapping.override(c.TableSettings[t.String()])
		if err == nil {
			var o *decode.Outbox
			o, err = m.outbox(t)
			tables = append(tables, o)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("tables.%s: %w", t, err))
		}
	}
	for _, name := range sortedKeys(c.TableSettings) {
		if !listed[name] {
			errs = append(errs, fmt.Errorf("tables.%s: is not one of the outbox tables %q", name, c.Table))
		}
	}
	return tables, messages, errors.Join(errs...)
}
