package config

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/decode"
	"go.yaml.in/yaml/v3"
)

// envRef is ${NAME} or ${NAME:-default} in a config file value.
var envRef = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

// expandEnv replaces ${NAME} with the environment variable, so that secrets
// stay out of the file; ${NAME:-default} has a fallback, and $$ is a
// dollar. An unset variable without a default is an error, not an empty
// string: an empty password or URL would fail later and less clearly.
func expandEnv(s string) (string, error) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		if ref == "$$" {
			return "$"
		}
		m := envRef.FindStringSubmatch(ref)
		if v, ok := os.LookupEnv(m[1]); ok {
			return v
		}
		if m[2] != "" {
			return m[2][2:]
		}
		missing = append(missing, m[1])
		return ref
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variable %s is not set", strings.Join(missing, ", "))
	}
	return out, nil
}

// configFile is a config file as read: a Debezium connector config, or
// walstream's YAML, whose streams: list, when it has one, makes each entry
// a stream of its own.
type configFile struct {
	path string
	// connector is set when the file is a Debezium connector config.
	connector *debezium.Connector
	// top is the YAML's top mapping, nil for an empty file; streams the
	// entries of its streams: list.
	top     *yaml.Node
	streams []*yaml.Node
}

// readConfigFile reads and parses path; its settings are applied by
// applyFile.
func readConfigFile(path string) (*configFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	f := &configFile{path: path}
	if cc, ok, err := debezium.ReadConnector(path, b); err != nil {
		return nil, err
	} else if ok {
		f.connector = cc
		return f, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	// A second document (after ---) would be ignored whole, its settings
	// and its mistakes with it. An empty one, as a file that ends in ---
	// or a template's joins leave, holds nothing to ignore.
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		if len(more.Content) > 0 && !isNull(more.Content[0]) {
			return nil, fmt.Errorf("config file %s, line %d: a second YAML document; walstream's config is one (several streams go in a streams: list)", path, more.Content[0].Line)
		}
	}
	if len(doc.Content) == 0 { // an empty file
		return f, nil
	}
	f.top = doc.Content[0]
	if f.top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config file %s, line %d: want a mapping of settings", path, f.top.Line)
	}
	if list := mappingValue(f.top, "streams"); list != nil {
		if list.Kind != yaml.SequenceNode || len(list.Content) == 0 {
			return nil, fmt.Errorf("config file %s, line %d: streams must be a list of streams, each a mapping of its settings", path, list.Line)
		}
		f.streams = list.Content
	}
	return f, nil
}

// isNull says whether n is YAML's null: key:, key: ~ or key: null. Its
// text is "~" or "null", which no setting means: a null is the empty
// value, as key: alone is.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// mappingValue is the value of key in mapping n, nil when n lacks it.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// Settings of a config file with a streams: list that only a stream's
// entry may give (each names one stream: two streams with one would take
// each other's place, or skip another's event), and those only the top
// level, the command line or the environment may give (the process has
// one of each).
var (
	streamOnly  = []string{"stream", "checkpoint-key", "transactional-id", "skip-event", "accept-recreated-table", "from-debezium-offset", "debezium-connector"}
	processWide = []string{"config", "http-addr", "http-config-file", "pprof-addr", "log-level", "log-format",
		"fleet", "fleet-group", "fleet-session-timeout", "fleet-heartbeat-interval", "fleet-rebalance-timeout"}
)

// applyFile sets every flag the command line and the environment left
// unset from the config file: flags win over the environment, the
// environment over the file, a table's own router settings included. For
// the stream at index stream of its streams: list (-1: a file without
// one), the stream's entry comes first, then the Debezium connector config
// it names (connector:), then the file's top level, which every stream
// shares; a setting the command line or the environment gives may not be
// in a stream's entry too.
//
//	pg-url: ${PG_URL}              # any flag, by its name
//	kafka-brokers: kafka:9092
//	outbox:                        # Debezium outbox router settings, for every table
//	  route.by.field: aggregatetype
//	tables:                        # the outbox tables, each with its own settings
//	  orders.outbox: {}
//	  billing.outbox:
//	    table.field.event.key: invoice_id
func (c *Config) applyFile(fs *flag.FlagSet, set map[string]bool, f *configFile, stream int) error {
	if f.connector != nil {
		return errors.Join(c.applyConnector(fs, set, f.connector, "", nil), unsetConverters(set, f.connector.Path))
	}
	if f.top == nil {
		return nil
	}
	l := &loader{c: c, fs: fs, set: set, path: f.path, cli: maps.Clone(set), streams: f.streams != nil}
	var tables []string
	var own, shared debezium.RegistryKeys
	// named refuses a layer that names its tables both ways, or whose
	// tables: the command line's --table would silently replace.
	named := func(tables []string, tableKey bool) {
		if len(tables) > 0 && (tableKey || l.cli["table"]) {
			l.errs = append(l.errs, fmt.Errorf("config file %s: its tables section and --table ($%s, or table:) both name the outbox tables; keep one", f.path, EnvName("table")))
		}
	}
	if stream >= 0 {
		l.layer = fmt.Sprintf("streams[%d]", stream)
		var tableKey bool
		var connector *yaml.Node
		tables, tableKey, connector = l.mapping(f.streams[stream], &own)
		named(tables, tableKey)
		if connector != nil {
			l.connector(connector)
		}
		// A stream's tables (its tables:, table: or connector's
		// table.include.list) are named over the top level's.
		l.tablesSet = len(tables) > 0 || set["table"] && !l.cli["table"]
		if len(tables) > 0 {
			set["table"] = true
		}
		l.layer = ""
	}
	topTables, tableKey, _ := l.mapping(f.top, &shared)
	named(topTables, tableKey)
	if len(tables) == 0 {
		tables = topTables
	}
	if l.connectorPath != "" {
		l.errs = append(l.errs, unsetConverters(set, l.connectorPath))
	}
	// A stream's own secrets, then its connector config's, then the shared.
	c.registryPassword, c.registryToken = cmp.Or(own.Password, c.registryPassword, shared.Password), cmp.Or(own.Token, c.registryToken, shared.Token)
	if len(tables) > 0 {
		c.Table = strings.Join(tables, ",")
	}
	return errors.Join(l.errs...)
}

// loader applies the mappings of one config file to one stream's flags.
type loader struct {
	c    *Config
	fs   *flag.FlagSet
	set  map[string]bool
	path string
	// cli are the flags the command line and the environment set; layer
	// is the stream entry being applied ("streams[1]"), empty for the top
	// level.
	cli   map[string]bool
	layer string
	errs  []error
	// streams: the file has a streams: list.
	streams bool
	// tablesSet: a layer applied before named the outbox tables, which
	// later ones then leave alone.
	tablesSet bool
	// connectorPath is the connector config a stream's entry named.
	connectorPath string
}

// at records an error at node n.
func (l *loader) at(n *yaml.Node, format string, a ...any) {
	where := ""
	if l.layer != "" {
		where = " (" + l.layer + ")"
	}
	l.errs = append(l.errs, fmt.Errorf("config file %s, line %d%s: %s", l.path, n.Line, where, fmt.Sprintf(format, a...)))
}

// each calls f with every key of mapping n and its value. yaml.v3 refuses
// a duplicate key only when decoding into a map or a struct, not into a
// Node: without this check the first value would win.
func (l *loader) each(n *yaml.Node, notMapping string, f func(k, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		l.at(n, "%s", notMapping)
		return
	}
	seen := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if first, ok := seen[k.Value]; ok {
			l.at(k, "%s is set twice, first at line %d", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		f(k, n.Content[i+1])
	}
}

// scalar reads one value, expanding ${VAR} but in the settings whose ${...}
// refer to regex groups, ${routedByValue} above all.
func (l *loader) scalar(k, v *yaml.Node, router bool) (string, bool) {
	if v.Kind != yaml.ScalarNode {
		l.at(v, "%s: want a single value", k.Value)
		return "", false
	}
	if isNull(v) {
		return "", true
	}
	key := k.Value
	if router {
		key, _ = decode.CanonicalRouterKey(key)
	}
	if key == "topic-template" || key == "route.topic.replacement" {
		return v.Value, true
	}
	value, err := expandEnv(v.Value)
	if err != nil {
		l.at(v, "%s: %v", k.Value, err)
	}
	return value, err == nil
}

// overridden says whether the command line or the environment set flag,
// which key k of the file also sets: they win over the file's top level,
// and in a stream's entry the two are an error, since the entry's value
// would be lost without a word. what names the key in the error.
func (l *loader) overridden(k *yaml.Node, what, flagName string) bool {
	if !l.cli[flagName] {
		return false
	}
	if l.layer != "" {
		l.at(k, "%s is also set by --%s or $%s, which a stream's own settings cannot override; keep one", what, flagName, EnvName(flagName))
	}
	return true
}

// setFlag sets a flag that nothing more specific set: in a stream's entry,
// one the command line or the environment set too is an error, since it
// would be lost without a word.
func (l *loader) setFlag(k *yaml.Node, flagName, value string) {
	switch f := l.fs.Lookup(flagName); {
	case l.layer != "" && l.overridden(k, k.Value, flagName):
	case l.set[flagName]:
	case f == nil:
		l.at(k, "unknown setting %q (settings are flag names, like kafka-brokers)", k.Value)
	default:
		if err := l.fs.Set(flagName, value); err != nil {
			l.at(k, "%s", refused(k.Value, "=", f, value, err))
		}
		l.set[flagName] = true
	}
}

func (l *loader) apply(k, v *yaml.Node, flagName string, router bool) {
	if value, ok := l.scalar(k, v, router); ok {
		l.setFlag(k, flagName, value)
	}
}

// mapping applies one mapping of settings: the file's top level or a
// stream's entry. It returns the outbox tables its tables: section names, whether it has a table: key, and a stream's
// connector: value, which its caller applies after the stream's own keys.
func (l *loader) mapping(n *yaml.Node, registry *debezium.RegistryKeys) (tables []string, tableKey bool, connector *yaml.Node) {
	l.each(n, "want a mapping of settings", func(k, v *yaml.Node) {
		switch {
		case k.Value == "streams" && l.layer == "":
			// Each entry is applied as a stream of its own.
		case k.Value == "streams", k.Value == "config":
			l.at(k, "a config file cannot name another here (a stream's Debezium connector config goes under connector:)")
		case k.Value == "connector" && l.layer != "":
			connector = v
		case l.layer != "" && slices.Contains(processWide, k.Value):
			l.at(k, "%s is the process's, not a stream's: set it at the top level", k.Value)
		case l.layer == "" && l.streams && slices.Contains(streamOnly, k.Value):
			l.at(k, "%s names one stream: set it in the stream's entry under streams:", k.Value)
		case k.Value == "outbox":
			l.each(v, "outbox must be a mapping of settings", func(k, v *yaml.Node) {
				// type, or transforms.<name>.type in a copied connector config.
				if k.Value == "type" || strings.HasPrefix(k.Value, "transforms.") && strings.HasSuffix(k.Value, ".type") && strings.Count(k.Value, ".") == 2 {
					if value, ok := l.scalar(k, v, false); ok && value != decode.RouterType {
						l.at(k, "%s is %q; walstream is %s", k.Value, value, decode.RouterType)
					}
				} else if key, err := decode.CanonicalRouterKey(k.Value); err != nil {
					l.at(k, "%v (see docs/debezium.md, Refused settings)", err)
				} else {
					l.apply(k, v, debezium.RouterSettings[key], true)
				}
			})
		case k.Value == "tables":
			if l.tablesSet {
				return // a stream's own tables
			}
			l.tablesSet = true
			l.c.TableSettings = make(map[string]map[string]string)
			l.each(v, "tables must map each outbox table to its outbox settings", func(name, settings *yaml.Node) {
				tables = append(tables, name.Value)
				own := make(map[string]string)
				l.c.TableSettings[name.Value] = own
				if isNull(settings) || settings.Kind == yaml.ScalarNode && settings.Value == "" {
					return // a table with the shared settings
				}
				l.each(settings, "tables."+name.Value+" must be a mapping of settings", func(k, v *yaml.Node) {
					value, ok := l.scalar(k, v, true)
					if !ok {
						return
					}
					// A table's own value is the file's too: the router
					// flag given for every table (shadow mode's
					// --topic-template) replaces it. An unknown key is
					// kept for NewOutbox to name.
					if key, err := decode.CanonicalRouterKey(k.Value); err == nil &&
						l.overridden(k, "tables."+name.Value+": "+k.Value, debezium.RouterSettings[key]) {
						return
					}
					own[k.Value] = value
				})
			})
		default:
			tableKey = tableKey || k.Value == "table"
			if f, ok := debezium.ConnectKeys[k.Value]; ok {
				l.apply(k, v, f, false)
			} else if _, ok := debezium.ConverterSetting(k.Value); !ok {
				l.apply(k, v, k.Value, false)
			} else if value, ok := l.scalar(k, v, false); ok {
				if known, err := registry.Add(k.Value, value, func(f, value string) { l.setFlag(k, f, value) }); err != nil {
					l.at(k, "%s %v", k.Value, err)
				} else if !known {
					l.at(k, "%s is not a converter setting walstream knows (it takes schemas.enable, and the Avro converters' schema registry settings)", k.Value)
				}
			}
		}
	})
	return tables, tableKey, connector
}

// connector applies a stream's Debezium connector config: pasted as a
// mapping of its keys, or the path of its file (.json, .properties or a
// Strimzi KafkaConnector), relative to the config file's directory.
func (l *loader) connector(n *yaml.Node) {
	var cc *debezium.Connector
	switch n.Kind {
	case yaml.MappingNode:
		var err error
		if cc, err = debezium.ConnectorFromYAML(l.path, n); err != nil {
			l.errs = append(l.errs, err)
			return
		}
	case yaml.ScalarNode:
		text := n.Value
		if isNull(n) {
			text = ""
		}
		path, err := expandEnv(text)
		if err != nil {
			l.at(n, "connector: %v", err)
			return
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(l.path), path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			l.at(n, "connector: %v", err)
			return
		}
		var ok bool
		if cc, ok, err = debezium.ReadConnector(path, b); err != nil {
			l.errs = append(l.errs, err)
			return
		} else if !ok {
			l.at(n, "connector: %s is not a Debezium connector config (JSON, properties, or YAML with connector.class)", path)
			return
		}
	default:
		l.at(n, "connector: want a Debezium connector config's keys, or the path of its file")
		return
	}
	// Part of the stream's entry: its keys, as the entry's own, may not
	// be set by the command line or the environment too.
	l.connectorPath = cc.Path
	l.errs = append(l.errs, l.c.applyConnector(l.fs, l.set, cc, l.layer, l.cli))
}
