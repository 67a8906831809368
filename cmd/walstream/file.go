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

// applyFile sets every flag the command line and the environment left
// unset from the YAML config file: flags win over the environment, the
// environment over the file.
//
//	pg-url: ${PG_URL}              # any flag, by its name
//	kafka-brokers: kafka:9092
//	outbox:                        # Debezium outbox router settings, for every table
//	  route.by.field: aggregatetype
//	tables:                        # the outbox tables, each with its own settings
//	  orders.outbox: {}
//	  billing.outbox:
//	    table.field.event.key: invoice_id
func (c *Config) applyFile(fs *flag.FlagSet, set map[string]bool) error {
	b, err := os.ReadFile(c.ConfigFile)
	if err != nil {
		return fmt.Errorf("reading config file: %w", err)
	}
	if cc, ok, err := readConnector(c.ConfigFile, b); err != nil {
		return err
	} else if ok {
		return c.applyConnector(fs, set, cc)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", c.ConfigFile, err)
	}
	if len(doc.Content) == 0 { // an empty file
		return nil
	}
	var errs []error
	at := func(n *yaml.Node, format string, a ...any) {
		errs = append(errs, fmt.Errorf("config file %s, line %d: %s", c.ConfigFile, n.Line, fmt.Sprintf(format, a...)))
	}
	// each calls f with every key of mapping n and its value. yaml.v3
	// refuses a duplicate key only when decoding into a map or a struct,
	// not into a Node: without this check the first value would win.
	each := func(n *yaml.Node, notMapping string, f func(k, v *yaml.Node)) {
		if n.Kind != yaml.MappingNode {
			at(n, "%s", notMapping)
			return
		}
		seen := make(map[string]*yaml.Node)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if first, ok := seen[k.Value]; ok {
				at(k, "%s is set twice, first at line %d", k.Value, first.Line)
				continue
			}
			seen[k.Value] = k
			f(k, n.Content[i+1])
		}
	}
	// scalar reads one value, expanding ${VAR} but in the settings whose
	// ${...} refer to regex groups, ${routedByValue} above all.
	scalar := func(k, v *yaml.Node, router bool) (string, bool) {
		if v.Kind != yaml.ScalarNode {
			at(v, "%s: want a single value", k.Value)
			return "", false
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
			at(v, "%s: %v", k.Value, err)
		}
		return value, err == nil
	}
	setFlag := func(k *yaml.Node, flagName, value string) {
		switch f := fs.Lookup(flagName); {
		case set[flagName]:
		case f == nil:
			at(k, "unknown setting %q (settings are flag names, like kafka-brokers)", k.Value)
		default:
			if err := fs.Set(flagName, value); err != nil {
				at(k, "%s=%q: %s", k.Value, value, expected(f, err))
			}
			set[flagName] = true
		}
	}
	apply := func(k, v *yaml.Node, flagName string, router bool) {
		if value, ok := scalar(k, v, router); ok {
			setFlag(k, flagName, value)
		}
	}
	var tables []string
	var registry registryKeys
	each(doc.Content[0], "want a mapping of settings", func(k, v *yaml.Node) {
		switch k.Value {
		case "config":
			at(k, "a config file cannot name another")
		case "outbox":
			each(v, "outbox must be a mapping of settings", func(k, v *yaml.Node) {
				// type, or transforms.<name>.type in a copied connector config.
				if k.Value == "type" || strings.HasPrefix(k.Value, "transforms.") && strings.HasSuffix(k.Value, ".type") && strings.Count(k.Value, ".") == 2 {
					if value, ok := scalar(k, v, false); ok && value != decode.RouterType {
						at(k, "%s is %q; walstream is %s", k.Value, value, decode.RouterType)
					}
				} else if key, err := decode.CanonicalRouterKey(k.Value); err != nil {
					at(k, "%v (see docs/debezium.md, Refused settings)", err)
				} else {
					apply(k, v, routerFlagNames[key], true)
				}
			})
		case "tables":
			c.TableSettings = make(map[string]map[string]string)
			each(v, "tables must map each outbox table to its outbox settings", func(name, settings *yaml.Node) {
				tables = append(tables, name.Value)
				own := make(map[string]string)
				c.TableSettings[name.Value] = own
				if settings.Kind == yaml.ScalarNode && (settings.Value == "" || settings.Tag == "!!null") {
					return // a table with the shared settings
				}
				each(settings, "tables."+name.Value+" must be a mapping of settings", func(k, v *yaml.Node) {
					if value, ok := scalar(k, v, true); ok {
						own[k.Value] = value
					}
				})
			})
		default:
			if f, ok := connectKeys[k.Value]; ok {
				apply(k, v, f, false)
			} else if _, ok := converterSetting(k.Value); !ok {
				apply(k, v, k.Value, false)
			} else if value, ok := scalar(k, v, false); ok {
				if known, err := registry.add(k.Value, value, func(f, value string) { setFlag(k, f, value) }); err != nil {
					at(k, "%s %v", k.Value, err)
				} else if !known {
					at(k, "%s is not a converter setting walstream knows (it takes schemas.enable, and the Avro converters' schema registry settings)", k.Value)
				}
			}
		}
	})
	c.registryPassword, c.registryToken = registry.password, registry.token
	if len(tables) > 0 {
		if set["table"] {
			errs = append(errs, fmt.Errorf("config file %s: its tables section and --table ($%s, or table:) both name the outbox tables; keep one", c.ConfigFile, envName("table")))
		}
		c.Table = strings.Join(tables, ",")
	}
	return errors.Join(errs...)
}
