package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/walstream/walstream/decode"
	"go.yaml.in/yaml/v3"
)

// configFile is a YAML config file:
//
//	pg-url: ${PG_URL}              # any flag, by its name
//	kafka-brokers: kafka:9092
//	outbox:                        # Debezium outbox router settings, for every table
//	  route.by.field: aggregatetype
//	tables:                        # the outbox tables, each with its own settings
//	  orders.outbox: {}
//	  billing.outbox:
//	    table.field.event.key: invoice_id
type configFile struct {
	settings []fileSetting // flags, by name
	outbox   []fileSetting // Debezium keys
	// tables are the outbox tables in file order, with their settings.
	tables   []string
	perTable map[string]map[string]string
}

type fileSetting struct {
	key, value string
	line       int
}

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

// noExpand are the settings whose ${...} are not environment variables:
// route.topic.replacement refers to regex groups, ${routedByValue} above all.
var noExpand = map[string]bool{"topic-template": true, "route.topic.replacement": true}

func loadConfigFile(path string) (*configFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	f := &configFile{perTable: make(map[string]map[string]string)}
	if len(doc.Content) == 0 { // an empty file
		return f, nil
	}
	at := func(n *yaml.Node, format string, a ...any) error {
		return fmt.Errorf("config file %s, line %d: %s", path, n.Line, fmt.Sprintf(format, a...))
	}
	var errs []error
	// yaml.v3 refuses a duplicate key only when decoding into a map or a
	// struct, not into a Node: without this the first value would win.
	for _, d := range duplicateKeys(doc.Content[0], nil) {
		errs = append(errs, at(d.again, "%s is set twice, first at line %d", d.again.Value, d.first.Line))
	}
	// scalar reads one setting, expanding ${VAR}; ok is false after an error.
	scalar := func(k, v *yaml.Node, expand func(key string) bool) (fileSetting, bool) {
		if v.Kind != yaml.ScalarNode {
			errs = append(errs, at(v, "%s: want a single value", k.Value))
			return fileSetting{}, false
		}
		value := v.Value
		if expand(k.Value) {
			var err error
			if value, err = expandEnv(value); err != nil {
				errs = append(errs, at(v, "%s: %v", k.Value, err))
				return fileSetting{}, false
			}
		}
		return fileSetting{k.Value, value, k.Line}, true
	}
	// scalars reads a mapping of settings.
	scalars := func(n *yaml.Node, what string, expand func(key string) bool) []fileSetting {
		if n.Kind != yaml.MappingNode {
			errs = append(errs, at(n, "%s must be a mapping of settings", what))
			return nil
		}
		var out []fileSetting
		for i := 0; i+1 < len(n.Content); i += 2 {
			if s, ok := scalar(n.Content[i], n.Content[i+1], expand); ok {
				out = append(out, s)
			}
		}
		return out
	}
	expandFlag := func(key string) bool { return !noExpand[key] }
	expandDebezium := func(key string) bool {
		k, err := decode.CanonicalRouterKey(key)
		return err != nil || !noExpand[k]
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, at(root, "want a mapping of settings")
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "outbox":
			f.outbox = scalars(v, "outbox", expandDebezium)
		case "tables":
			if v.Kind != yaml.MappingNode {
				errs = append(errs, at(v, "tables must map each outbox table to its outbox settings"))
				continue
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				name, settings := v.Content[j], v.Content[j+1]
				f.tables = append(f.tables, name.Value)
				m := make(map[string]string)
				if settings.Kind == yaml.ScalarNode && (settings.Value == "" || settings.Tag == "!!null") {
					f.perTable[name.Value] = m // a table with the shared settings
					continue
				}
				for _, s := range scalars(settings, "tables."+name.Value, expandDebezium) {
					m[s.key] = s.value
				}
				f.perTable[name.Value] = m
			}
		default:
			if s, ok := scalar(k, v, expandFlag); ok {
				f.settings = append(f.settings, s)
			}
		}
	}
	return f, errors.Join(errs...)
}

// duplicate is a mapping key given again in the same mapping.
type duplicate struct{ first, again *yaml.Node }

// duplicateKeys returns every key repeated within a mapping of n, nested
// mappings included, in file order.
func duplicateKeys(n *yaml.Node, out []duplicate) []duplicate {
	if n.Kind == yaml.MappingNode {
		seen := make(map[string]*yaml.Node)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				continue
			}
			if first, ok := seen[k.Value]; ok {
				out = append(out, duplicate{first, k})
			} else {
				seen[k.Value] = k
			}
		}
	}
	for _, c := range n.Content {
		out = duplicateKeys(c, out)
	}
	return out
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
			if s.value != decode.RouterType {
				errs = append(errs, fmt.Errorf("config file %s, line %d: %s is %q; walstream is %s", c.ConfigFile, s.line, s.key, s.value, decode.RouterType))
			}
			continue
		}
		key, err := decode.CanonicalRouterKey(s.key)
		if err != nil {
			errs = append(errs, fmt.Errorf("config file %s, line %d: %w (see README, Debezium compatibility)", c.ConfigFile, s.line, err))
			continue
		}
		apply(s, routerFlagNames[key])
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
