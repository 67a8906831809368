package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/walstream/walstream/decode"
)

// routerFlagNames names the flag of each outbox router setting.
var routerFlagNames = map[string]string{
	"table.field.event.id":                     "event-id-column",
	"table.field.event.key":                    "event-key-column",
	"table.field.event.payload":                "payload-column",
	"table.field.event.timestamp":              "timestamp-column",
	"table.field.event.schema.version":         "schema-version-column",
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

// connectKeys are Kafka Connect and Debezium connector settings that
// walstream's config file and a pasted connector config both hold as a
// connector config has them, with the flag each sets.
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

// registrySetting is what walstream does with one schema registry setting
// of an Avro converter: set a flag, keep a secret (which has no flag), or
// take it with one value only, for the reason why.
type registrySetting struct {
	flag      string
	only, why string
}

// registrySettings are the schema registry settings of Confluent's and
// Apicurio's Avro converters, as a connector config has them under
// key.converter. and value.converter.: one registry serves keys and
// values, so the two must agree.
var registrySettings = map[string]registrySetting{
	"schema.registry.url":             {flag: "schema-registry-url"},
	"apicurio.registry.url":           {flag: "schema-registry-url"},
	"auto.register.schemas":           {flag: "auto-register-schemas"},
	"apicurio.registry.auto-register": {flag: "auto-register-schemas"},
	"use.latest.version":              {flag: "use-latest-version"},
	"apicurio.registry.find-latest":   {flag: "use-latest-version"},
	"basic.auth.user.info":            {flag: "schema-registry-user"}, // user:password
	"apicurio.registry.auth.username": {flag: "schema-registry-user"},
	"apicurio.registry.auth.password": {}, // a secret
	"bearer.auth.token":               {}, // a secret
	// Apicurio 2.x's converter writes the Confluent wire format only with
	// these; 3.x writes it by default. walstream writes nothing else.
	"apicurio.registry.as-confluent":    {only: "true", why: confluentWire},
	"apicurio.registry.use-id":          {only: "contentId", why: confluentWire},
	"apicurio.registry.headers.enabled": {only: "false", why: confluentWire},
	"apicurio.registry.avro.encoding":   {only: "BINARY", why: "walstream writes the Avro binary encoding"},
	// Apicurio 3.x registers a nested record (an expanded payload in an
	// envelope) as a reference unless told not to; walstream writes it
	// inline, as 2.x does.
	"apicurio.registry.dereference-schema": {only: "true", why: "walstream writes a nested record inline, not as a schema reference"},
	// AvroData's settings, which change the schema text and so the ids.
	"connect.meta.data":              {only: "true", why: "walstream's schemas carry the connect.* properties, as the converter's default writes them"},
	"enhanced.avro.schema.support":   {only: "false", why: "walstream writes the schemas of the converter's default"},
	"basic.auth.credentials.source":  {only: "USER_INFO", why: "walstream takes the user and password of basic.auth.user.info"},
	"bearer.auth.credentials.source": {only: "STATIC_TOKEN", why: "walstream takes the token of bearer.auth.token"},
}

const confluentWire = "walstream writes the Confluent wire format"

// converterSetting splits key.converter.<rest> and value.converter.<rest>.
func converterSetting(key string) (rest string, ok bool) {
	for _, prefix := range []string{"key.converter.", "value.converter."} {
		if rest, ok := strings.CutPrefix(key, prefix); ok {
			return rest, true
		}
	}
	return "", false
}

// registryKeys takes the converters' schema registry settings of one
// config, whichever form it has: walstream's config file or a pasted
// connector config.
type registryKeys struct {
	seen            map[string]string // the value of each setting, by the key without its converter
	password, token string            // the secrets, which have no flags
}

// add takes one key: it sets its flag through set, keeps its secret, or
// says why walstream refuses its value. ok is false when the key is no
// schema registry setting.
func (rk *registryKeys) add(key, value string, set func(flag, value string)) (ok bool, err error) {
	rest, ok := converterSetting(key)
	s, known := registrySettings[rest]
	if !ok || !known {
		return false, nil
	}
	if s.only != "" {
		if !strings.EqualFold(strings.TrimSpace(value), s.only) {
			return true, fmt.Errorf("is %q; %s, which %s=%s gives", value, s.why, rest, s.only)
		}
		return true, nil
	}
	if prev, ok := rk.seen[rest]; ok {
		if prev != value {
			return true, errors.New("differs from the other converter's: walstream writes keys and values through one schema registry")
		}
		return true, nil
	}
	if rk.seen == nil {
		rk.seen = make(map[string]string)
	}
	rk.seen[rest] = value
	switch rest {
	case "basic.auth.user.info":
		user, password, found := strings.Cut(value, ":")
		if !found {
			return true, errors.New("want user:password")
		}
		rk.password, value = password, user
	case "apicurio.registry.auth.password":
		rk.password = value
	case "bearer.auth.token":
		rk.token = value
	}
	if s.flag != "" {
		set(s.flag, value)
	}
	return true, nil
}

// routerFlag is a flag that sets one outbox router setting in m.
type routerFlag struct {
	m          map[string]string
	key, def   string
	isBoolFlag bool
}

var _ flag.Value = (*routerFlag)(nil)

func (f *routerFlag) String() string {
	if v, ok := f.m[f.key]; ok {
		return v
	}
	return f.def
}

func (f *routerFlag) Set(v string) error {
	if _, err := strconv.ParseBool(v); f.isBoolFlag && err != nil {
		return errors.New("is not true or false")
	}
	f.m[f.key] = v
	return nil
}

func (f *routerFlag) IsBoolFlag() bool { return f.isBoolFlag }

// routerFlags defines a flag for each outbox router setting, setting m.
func routerFlags(fs *flag.FlagSet, m map[string]string) {
	for _, k := range append(decode.RouterKeys(), decode.RouterKey{Key: "table.fields.additional.error.on.missing", Default: "true", Bool: true,
		Doc: "walstream's earlier form of table.field.additional.missing: false is ignore"}) {
		name := routerFlagNames[k.Key]
		usage := k.Doc + " (Debezium's " + k.Key + ") ($" + envName(name) + ")"
		fs.Var(&routerFlag{m: m, key: k.Key, def: k.Default, isBoolFlag: k.Bool}, name, usage)
	}
}

// outboxes builds every table's mapping, and the one logical messages use.
// Errors in the shared settings name their flags; when those are wrong,
// every table's are too.
func (c *Config) outboxes() []error {
	var err error
	c.Messages, err = decode.NewOutbox("", "logical message "+c.MessagePrefix, c.Router)
	if c.Messages != nil {
		c.Messages.MessageNullFields = c.MessageNullFields
	}
	if err != nil {
		var out []error
		for _, e := range unjoin(err) {
			var se *decode.SettingError
			if errors.As(e, &se) && routerFlagNames[se.Key] != "" {
				f := routerFlagNames[se.Key]
				e = fmt.Errorf("--%s ($%s, Debezium's %s): %q: %w", f, envName(f), se.Key, se.Value, se.Err)
			}
			out = append(out, e)
		}
		return out
	}
	var errs []error
	listed := make(map[string]bool)
	c.Outboxes = nil
	for _, t := range c.Names.Tables {
		listed[t.String()] = true
		o, err := decode.NewOutbox(t.Schema, t.Name, c.Router, c.TableSettings[t.String()])
		if err != nil {
			errs = append(errs, fmt.Errorf("tables.%s: %w", t, err))
		}
		c.Outboxes = append(c.Outboxes, o)
	}
	for _, name := range slices.Sorted(maps.Keys(c.TableSettings)) {
		if !listed[name] {
			errs = append(errs, fmt.Errorf("tables.%s: is not one of the outbox tables %q", name, c.Table))
		}
	}
	return errs
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
