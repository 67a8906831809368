package debezium

import (
	"errors"
	"fmt"
	"strings"
)

// The mapping of a connector config's keys onto walstream's settings,
// each named as its flag and its config file key are: the tables that
// walstream's config file shares with Translate.

// RouterSettings names walstream's setting of each outbox router key, by
// the key as decode.CanonicalRouterKey gives it.
var RouterSettings = map[string]string{
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

// ConnectKeys are Kafka Connect and Debezium connector settings that
// walstream's config file and a pasted connector config both hold as a
// connector config has them, with the setting each sets.
var ConnectKeys = map[string]string{
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

// RegistrySetting is what walstream does with one schema registry setting
// of an Avro converter: set one of its settings (Setting), keep a secret
// (which has no setting), or take it with one value only (Only), for the
// reason Why.
type RegistrySetting struct {
	Setting   string
	Only, Why string
}

// RegistrySettings are the schema registry settings of Confluent's and
// Apicurio's Avro converters, as a connector config has them under
// key.converter. and value.converter.: one registry serves keys and
// values, so the two must agree.
var RegistrySettings = map[string]RegistrySetting{
	"schema.registry.url":             {Setting: "schema-registry-url"},
	"apicurio.registry.url":           {Setting: "schema-registry-url"},
	"auto.register.schemas":           {Setting: "auto-register-schemas"},
	"apicurio.registry.auto-register": {Setting: "auto-register-schemas"},
	"use.latest.version":              {Setting: "use-latest-version"},
	"apicurio.registry.find-latest":   {Setting: "use-latest-version"},
	"basic.auth.user.info":            {Setting: "schema-registry-user"}, // user:password
	"apicurio.registry.auth.username": {Setting: "schema-registry-user"},
	"apicurio.registry.auth.password": {}, // a secret
	"bearer.auth.token":               {}, // a secret
	// Apicurio 2.x's converter writes the Confluent wire format only with
	// these; 3.x writes it by default. walstream writes nothing else.
	"apicurio.registry.as-confluent":    {Only: "true", Why: confluentWire},
	"apicurio.registry.use-id":          {Only: "contentId", Why: confluentWire},
	"apicurio.registry.headers.enabled": {Only: "false", Why: confluentWire},
	"apicurio.registry.avro.encoding":   {Only: "BINARY", Why: "walstream writes the Avro binary encoding"},
	// Apicurio 3.x registers a nested record (an expanded payload in an
	// envelope) as a reference unless told not to; walstream writes it
	// inline, as 2.x does.
	"apicurio.registry.dereference-schema": {Only: "true", Why: "walstream writes a nested record inline, not as a schema reference"},
	// AvroData's settings, which change the schema text and so the ids.
	"connect.meta.data":              {Only: "true", Why: "walstream's schemas carry the connect.* properties, as the converter's default writes them"},
	"enhanced.avro.schema.support":   {Only: "false", Why: "walstream writes the schemas of the converter's default"},
	"basic.auth.credentials.source":  {Only: "USER_INFO", Why: "walstream takes the user and password of basic.auth.user.info"},
	"bearer.auth.credentials.source": {Only: "STATIC_TOKEN", Why: "walstream takes the token of bearer.auth.token"},
}

const confluentWire = "walstream writes the Confluent wire format"

// ConverterSetting splits key.converter.<rest> and value.converter.<rest>.
func ConverterSetting(key string) (rest string, ok bool) {
	for _, prefix := range []string{"key.converter.", "value.converter."} {
		if rest, ok := strings.CutPrefix(key, prefix); ok {
			return rest, true
		}
	}
	return "", false
}

// RegistryKeys takes the converters' schema registry settings of one
// config, whichever form it has: walstream's config file or a pasted
// connector config.
type RegistryKeys struct {
	seen map[string]string // the value of each setting, by the key without its converter
	// Password and Token are the secrets, which have no settings.
	Password, Token string
}

// Add takes one key: it sets its setting through set, keeps its secret,
// or says why walstream refuses its value. ok is false when the key is no
// schema registry setting.
func (rk *RegistryKeys) Add(key, value string, set func(setting, value string)) (ok bool, err error) {
	rest, ok := ConverterSetting(key)
	s, known := RegistrySettings[rest]
	if !ok || !known {
		return false, nil
	}
	if s.Only != "" {
		if !strings.EqualFold(strings.TrimSpace(value), s.Only) {
			return true, fmt.Errorf("is %q; %s, which %s=%s gives", value, s.Why, rest, s.Only)
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
		rk.Password, value = password, user
	case "apicurio.registry.auth.password":
		rk.Password = value
	case "bearer.auth.token":
		rk.Token = value
	}
	if s.Setting != "" {
		set(s.Setting, value)
	}
	return true, nil
}
