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
	apply := func(k, v *yaml.Node, flagName string, router bool) {
		value, ok := scalar(k, v, router)
		switch f := fs.Lookup(flagName); {
		case !ok || set[flagName]:
		case f == nil:
			at(k, "unknown setting %q (settings are flag names, like kafka-brokers)", k.Value)
		default:
			if err := fs.Set(flagName, value); err != nil {
				at(k, "%s=%q: %s", k.Value, value, expected(f, err))
			}
			set[flagName] = true
		}
	}
	var tables []string
	fromConverters := make(map[string]*yaml.Node) // the converter key that set a registry flag
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
			} else if f, ok := registryKey(k.Value); ok {
				c.applyRegistryKey(k, v, f, scalar, apply, at, fromConverters)
			} else {
				apply(k, v, k.Value, false)
			}
		}
	})
	if len(tables) > 0 {
		if set["table"] {
			errs = append(errs, fmt.Errorf("config file %s: its tables section and --table ($%s, or table:) both name the outbox tables; keep one", c.ConfigFile, envName("table")))
		}
		c.Table = strings.Join(tables, ",")
	}
	return errors.Join(errs...)
}

// connectKeys are Kafka Connect and Debezium connector settings a config
// file may hold at its top level as a connector config has them, with the
// flag each sets.
var connectKeys = map[string]string{
	"key.converter":                                                "key-converter",
	"value.converter":                                              "value-converter",
	"key.converter.schemas.enable":                                 "key-converter-schemas-enable",
	"value.converter.schemas.enable":                               "value-converter-schemas-enable",
	"topic.prefix":                                                 "topic-prefix",
	"key.converter.key.subject.name.strategy":                      "key-subject-name-strategy",
	"value.converter.value.subject.name.strategy":                  "value-subject-name-strategy",
	"key.converter.apicurio.registry.artifact-resolver-strategy":   "key-subject-name-strategy",
	"value.converter.apicurio.registry.artifact-resolver-strategy": "value-subject-name-strategy",
}

// registrySettings are the schema registry settings of Confluent's and
// Apicurio's Avro converters, as a connector config has them under
// key.converter. and value.converter., with the flag each sets: one
// registry serves keys and values, so the two must agree.
var registrySettings = map[string]string{
	"schema.registry.url":             "schema-registry-url",
	"apicurio.registry.url":           "schema-registry-url",
	"auto.register.schemas":           "auto-register-schemas",
	"apicurio.registry.auto-register": "auto-register-schemas",
	"use.latest.version":              "use-latest-version",
	"apicurio.registry.find-latest":   "use-latest-version",
	"basic.auth.user.info":            "schema-registry-user", // user:password
	"apicurio.registry.auth.username": "schema-registry-user",
	"apicurio.registry.auth.password": "", // the password, which has no flag
	"bearer.auth.token":               "", // the token, which has no flag
	// Apicurio 2.x's converter writes the Confluent wire format only with
	// these; 3.x writes it by default. walstream writes nothing else.
	"apicurio.registry.as-confluent":    "=true",
	"apicurio.registry.use-id":          "=contentId",
	"apicurio.registry.headers.enabled": "=false",
	// Apicurio 3.x registers a nested record (an expanded payload in an
	// envelope) as a reference unless told not to; walstream writes it
	// inline, as 2.x does.
	"apicurio.registry.dereference-schema": "=true",
	// Informational in a connector config.
	"basic.auth.credentials.source":  "=USER_INFO",
	"bearer.auth.credentials.source": "=STATIC_TOKEN",
}

// registryKey finds a converter's registry setting: its flag, or =value
// for a setting walstream takes with that one value.
func registryKey(key string) (string, bool) {
	for _, prefix := range []string{"key.converter.", "value.converter."} {
		if rest, ok := strings.CutPrefix(key, prefix); ok {
			f, ok := registrySettings[rest]
			return f, ok
		}
	}
	return "", false
}

// applyRegistryKey applies one converter's registry setting from the
// config file. Keys and values share walstream's one registry, so a
// setting given for both must be given alike.
func (c *Config) applyRegistryKey(k, v *yaml.Node, f string, scalar func(k, v *yaml.Node, router bool) (string, bool),
	apply func(k, v *yaml.Node, flagName string, router bool), at func(n *yaml.Node, format string, a ...any), from map[string]*yaml.Node) {
	value, ok := scalar(k, v, false)
	if !ok {
		return
	}
	rest := k.Value[strings.Index(k.Value, ".converter.")+len(".converter."):]
	if want, only := strings.CutPrefix(f, "="); only {
		if !strings.EqualFold(strings.TrimSpace(value), want) {
			at(k, "%s is %q; walstream writes the Confluent wire format, which %s=%s gives", k.Value, value, rest, want)
		}
		return
	}
	if prev, ok := from[rest]; ok {
		if prev.Value != v.Value {
			at(k, "%s differs from the other converter's, line %d: walstream writes keys and values through one schema registry", k.Value, prev.Line)
		}
		return
	}
	from[rest] = v
	switch rest {
	case "basic.auth.user.info":
		user, password, found := strings.Cut(value, ":")
		if !found {
			at(k, "%s: want user:password", k.Value)
			return
		}
		c.registryPassword = password
		v = &yaml.Node{Kind: yaml.ScalarNode, Value: user, Line: v.Line}
	case "apicurio.registry.auth.password":
		c.registryPassword = value
		return
	case "bearer.auth.token":
		c.registryToken = value
		return
	}
	apply(k, v, f, false)
}
