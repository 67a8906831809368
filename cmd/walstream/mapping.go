package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
)

// Mapping is the outbox router settings every table shares, by their
// Debezium names (decode.RouterKeys); a setting not given has Debezium's
// default. Each is also a flag. A config file's tables section overrides
// them per table.
type Mapping map[string]string

// routerFlags names the flag of each router setting.
var routerFlags = map[string]string{
	"table.field.event.id":                     "event-id-column",
	"table.field.event.key":                    "event-key-column",
	"table.field.event.payload":                "payload-column",
	"table.field.event.timestamp":              "timestamp-column",
	"table.fields.additional.placement":        "additional-placement",
	"table.field.additional.missing":           "additional-missing",
	"table.fields.additional.error.on.missing": "additional-error-on-missing",
	"table.op.invalid.behavior":                "on-update",
	"table.expand.json.payload":                "expand-json-payload",
	"table.json.payload.null.behavior":         "json-payload-null-behavior",
	"table.json.payload.empty.array.behavior":  "json-payload-empty-array-behavior",
	"route.by.field":                           "route-by-column",
	"route.topic.regex":                        "topic-regex",
	"route.topic.replacement":                  "topic-template",
	"route.tombstone.on.empty.payload":         "tombstone-on-empty-payload",
	"tracing.span.context.field":               "tracing-column",
}

// routerType is the one value of a copied transforms.<name>.type key.
const routerType = "io.debezium.transforms.outbox.EventRouter"

// routerFlag is a flag that sets one router setting in a Mapping.
type routerFlag struct {
	m          Mapping
	key, def   string
	isBoolFlag bool
}

func (f *routerFlag) String() string {
	if v, ok := f.m[f.key]; ok {
		return v
	}
	return f.def
}

func (f *routerFlag) Set(v string) error {
	if f.isBoolFlag {
		if _, err := strconv.ParseBool(v); err != nil {
			return errors.New("is not true or false")
		}
	}
	f.m[f.key] = v
	return nil
}

func (f *routerFlag) IsBoolFlag() bool { return f.isBoolFlag }

// flags defines a flag for each router setting; env names the environment
// variable of a flag, for its usage.
func (m Mapping) flags(fs *flag.FlagSet, env func(string) string) {
	for _, k := range append(decode.RouterKeys(), decode.RouterKey{Key: "table.fields.additional.error.on.missing", Default: "true", Bool: true,
		Doc: "walstream's earlier form of table.field.additional.missing: false is ignore"}) {
		name := routerFlags[k.Key]
		usage := k.Doc + " (Debezium's " + k.Key + ") ($" + env(name) + ")"
		fs.Var(&routerFlag{m: m, key: k.Key, def: k.Default, isBoolFlag: k.Bool}, name, usage)
	}
}

// outbox builds the decode mapping of one table; t is the table, or for
// logical messages a name of their own. Errors name the flag of a setting
// where the setting came from the shared mapping.
func (m Mapping) outbox(t replication.Table) (*decode.Outbox, error) {
	o, err := decode.NewOutbox(t.Schema, t.Name, m)
	if err == nil {
		if strings.TrimSpace(o.TopicReplacement) == "" {
			// Checked here, not at the first row: no event could have a topic.
			err = &decode.SettingError{Key: "route.topic.replacement", Value: o.TopicReplacement, Err: errors.New("is empty: every event needs a topic")}
		} else if _, rerr := publish.NewRoute(o.TopicRegex, o.TopicReplacement); rerr != nil {
			err = &decode.SettingError{Key: "route.topic.replacement", Value: o.TopicReplacement, Err: rerr}
		}
	}
	return o, err
}

// named rewrites the setting errors of the shared mapping to name flags.
func named(err error) error {
	var out []error
	for _, e := range unjoin(err) {
		var se *decode.SettingError
		if errors.As(e, &se) {
			if f, ok := routerFlags[se.Key]; ok {
				e = fmt.Errorf("--%s ($%s, Debezium's %s): %q: %w", f, envName(f), se.Key, se.Value, se.Err)
			}
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// override returns the mapping with a table's own router settings applied.
func (m Mapping) override(settings map[string]string) (Mapping, error) {
	out := maps.Clone(m)
	var errs []error
	for _, k := range sortedKeys(settings) {
		key, err := decode.CanonicalRouterKey(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[key] = settings[k]
	}
	return out, errors.Join(errs...)
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

// messagesName names the mapping of logical messages, which have no table.
func (c *Config) messagesName() string { return "logical message " + c.MessagePrefix }

// outboxes builds every table's mapping, and the one logical messages use.
func (c *Config) outboxes() (tables []*decode.Outbox, messages *decode.Outbox, err error) {
	// The shared mapping first: when it is wrong, every table's is too.
	if messages, err = c.Mapping.outbox(replication.Table{Name: c.messagesName()}); err != nil {
		return nil, nil, named(err)
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
