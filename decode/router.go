package decode

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// RouterKey is one setting of Debezium's outbox event router
// (io.debezium.transforms.outbox.EventRouter) that walstream takes.
type RouterKey struct {
	// Key is Debezium's name, without the transforms.<name>. prefix.
	Key string
	// Default is Debezium's default, in the form a config file writes it;
	// tracing.span.context.field is the exception, see Doc.
	Default string
	// Bool is set for true/false settings.
	Bool bool
	Doc  string
}

// routerKeys are the router settings walstream takes, in the order
// Debezium's EventRouterConfigDefinition documents them.
var routerKeys = []RouterKey{
	{Key: "table.field.event.id", Default: "id", Doc: "column of the event id, sent as the id header"},
	{Key: "table.field.event.key", Default: "aggregateid", Doc: "column of the record key"},
	{Key: "table.field.event.payload", Default: "payload", Doc: "column of the record value"},
	{Key: "table.field.event.timestamp", Doc: "timestamp or timestamptz column that becomes the record timestamp; empty: the time Kafka receives it"},
	{Key: "table.field.event.schema.version", Doc: "integer column whose value is the version of an envelope's value schema under a JSON converter with schemas; empty: none"},
	{Key: "table.fields.additional.placement", Doc: "more columns in the record: comma-separated column:header|envelope|partition[:alias]"},
	{Key: "table.field.additional.missing", Default: "error", Doc: "a column of table.fields.additional.placement the table lacks: error (refuse the table) or ignore (skip it)"},
	{Key: "table.op.invalid.behavior", Default: "warn", Doc: "an UPDATE of an outbox row: warn or error (log it and go on) or fatal (stop)"},
	{Key: "table.expand.json.payload", Default: "false", Bool: true, Doc: "under a JSON value converter, write a JSON object payload as JSON rather than as a JSON string"},
	{Key: "table.json.payload.null.behavior", Default: "ignore", Doc: "null fields of an expanded payload: ignore (drop them) or optional_bytes (keep them as null)"},
	{Key: "table.json.payload.empty.array.behavior", Default: "ignore", Doc: "empty arrays of an expanded payload: ignore (drop them) or optional_string (keep them)"},
	{Key: "route.by.field", Default: "aggregatetype", Doc: "column whose value names the topic"},
	{Key: "route.topic.regex", Default: DefaultTopicRegex, Doc: "regex over the route-by value, whose groups route.topic.replacement may use; an unmatched value is the topic itself"},
	{Key: "route.topic.replacement", Default: DefaultTopicReplacement, Doc: "topic of an event: ${routedByValue} is its route-by value, $1 a regex group"},
	{Key: "route.tombstone.on.empty.payload", Default: "false", Bool: true, Doc: "a NULL or blank payload becomes a tombstone (no value); otherwise it is published as a null value"},
	{Key: "tracing.span.context.field", Doc: "column of a W3C trace context (Debezium's properties text or a traceparent), sent as the traceparent header; empty: no traceparent header, as in Debezium without OpenTelemetry"},
}

// RouterType is the router's class, the one value of a connector
// config's transforms.<name>.type that walstream takes.
const RouterType = "io.debezium.transforms.outbox.EventRouter"

// Debezium's routing defaults.
const (
	DefaultTopicRegex       = `(?<routedByValue>.*)`
	DefaultTopicReplacement = "outbox.event.${routedByValue}"
)

// RouterKeys returns the router settings walstream takes.
func RouterKeys() []RouterKey { return append([]RouterKey(nil), routerKeys...) }

// routerAliases are other names of the same settings: older Debezium
// releases' names.
var routerAliases = map[string]string{
	"table.field.payload":          "table.field.event.payload",
	"table.field.schema.version":   "table.field.event.schema.version",
	"debezium.op.invalid.behavior": "table.op.invalid.behavior",
}

// legacyMissingKey is walstream's earlier boolean form of
// table.field.additional.missing: true is error, false is ignore.
const legacyMissingKey = "table.fields.additional.error.on.missing"

// unsupportedKeys are Debezium router settings walstream refuses rather
// than ignores, with the reason.
var unsupportedKeys = map[string]string{
	"table.field.event.type":             "removed in Debezium 2.0; use table.fields.additional.placement=type:header:eventType",
	"table.field.payload.id":             "removed in Debezium 2.0; use table.field.event.key",
	"tracing.operation.name":             "walstream copies the trace context into a traceparent header and opens no spans",
	"tracing.with.context.field.only":    "walstream copies the trace context into a traceparent header and opens no spans",
	"route.topic.regex.replacement.case": "not an outbox router setting",
	"predicate":                          "walstream applies the router to exactly the outbox tables it is given",
	"negate":                             "walstream applies the router to exactly the outbox tables it is given",
}

// CanonicalRouterKey strips the transforms.<name>. prefix a connector
// config carries, so that router settings can be copied as they are, and
// resolves older names. It returns the setting's name, or an error saying
// why the key is refused.
func CanonicalRouterKey(key string) (string, error) {
	k := key
	if rest, ok := strings.CutPrefix(k, "transforms."); ok {
		if _, after, ok := strings.Cut(rest, "."); ok {
			k = after
		}
	}
	if a, ok := routerAliases[k]; ok {
		k = a
	}
	if k == legacyMissingKey {
		return k, nil
	}
	for _, rk := range routerKeys {
		if rk.Key == k {
			return k, nil
		}
	}
	if why, ok := unsupportedKeys[k]; ok {
		return "", fmt.Errorf("outbox key %q is not supported: %s", key, why)
	}
	return "", fmt.Errorf("outbox key %q is not a Debezium outbox router setting walstream knows", key)
}

// NewOutbox builds the mapping of one table from layers of router
// settings, each overriding the ones before it (a config's shared settings,
// then the table's own); a setting none gives has Debezium's default. Keys
// are taken as a connector config writes them (CanonicalRouterKey); values
// are read as Kafka's ConfigDef reads them: booleans and enumerations
// trimmed and in any case. The errors name the settings.
func NewOutbox(schema, table string, layers ...map[string]string) (*Outbox, error) {
	settings := make(map[string]string)
	var errs []error
	for _, layer := range layers {
		for _, k := range slices.Sorted(maps.Keys(layer)) {
			key, err := CanonicalRouterKey(k)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			settings[key] = layer[k]
		}
	}
	get := func(key string) string {
		if v, ok := settings[key]; ok {
			return v
		}
		for _, rk := range routerKeys {
			if rk.Key == key {
				return rk.Default
			}
		}
		return ""
	}
	bad := func(key string, err error) { errs = append(errs, &SettingError{Key: key, Value: get(key), Err: err}) }
	boolean := func(key string) bool {
		switch strings.ToLower(strings.TrimSpace(get(key))) {
		case "true":
			return true
		case "false":
			return false
		}
		bad(key, errors.New("is not true or false"))
		return false
	}
	enum := func(key string, values ...string) string {
		v := strings.ToLower(strings.TrimSpace(get(key)))
		for _, want := range values {
			if v == want {
				return v
			}
		}
		bad(key, fmt.Errorf("is not %s", strings.Join(values, " or ")))
		return values[0]
	}
	o := &Outbox{Schema: schema, Table: table, Columns: Columns{
		ID: get("table.field.event.id"), AggregateID: get("table.field.event.key"), Payload: get("table.field.event.payload"),
		Timestamp: get("table.field.event.timestamp"), SchemaVersion: get("table.field.event.schema.version"), AggregateType: get("route.by.field"), Type: "type",
		Tracing: get("tracing.span.context.field"),
	}}
	for _, c := range []struct{ key, v string }{{"table.field.event.id", o.Columns.ID}, {"table.field.event.key", o.Columns.AggregateID},
		{"table.field.event.payload", o.Columns.Payload}, {"route.by.field", o.Columns.AggregateType}} {
		if c.v == "" {
			bad(c.key, errors.New("must name a column"))
		}
	}
	var err error
	if o.Additional, err = ParseAdditional(get("table.fields.additional.placement")); err != nil {
		bad("table.fields.additional.placement", err)
	}
	o.AdditionalOptional = enum("table.field.additional.missing", "error", "ignore") == "ignore"
	if _, ok := settings[legacyMissingKey]; ok {
		if _, newer := settings["table.field.additional.missing"]; newer {
			bad(legacyMissingKey, errors.New("and table.field.additional.missing are both set; keep table.field.additional.missing"))
		} else {
			o.AdditionalOptional = !boolean(legacyMissingKey)
		}
	}
	if o.OnUpdate, err = ParseInvalidOp(get("table.op.invalid.behavior")); err != nil {
		bad("table.op.invalid.behavior", err)
	}
	o.ExpandJSONPayload = boolean("table.expand.json.payload")
	o.ExpandJSONNulls = enum("table.json.payload.null.behavior", "ignore", "optional_bytes") == "optional_bytes"
	o.ExpandJSONEmptyArrays = enum("table.json.payload.empty.array.behavior", "ignore", "optional_string") == "optional_string"
	o.TombstoneOnEmptyPayload = boolean("route.tombstone.on.empty.payload")
	o.TopicRegex, o.TopicReplacement = get("route.topic.regex"), get("route.topic.replacement")
	if err := JavaOnlyRegex(o.TopicRegex); err != nil {
		bad("route.topic.regex", err)
	} else if re, err := regexp.Compile(o.TopicRegex); err != nil {
		bad("route.topic.regex", err)
	} else if strings.TrimSpace(o.TopicReplacement) == "" {
		// Refused here, not at the first row: no event could have a topic.
		bad("route.topic.replacement", errors.New("is empty: every event needs a topic"))
	} else if _, err := TopicTemplate(o.TopicReplacement, re); err != nil {
		bad("route.topic.replacement", err)
	}
	return o, errors.Join(errs...)
}

// SettingError is a router setting NewOutbox refuses.
type SettingError struct {
	Key, Value string
	Err        error
}

func (e *SettingError) Error() string { return fmt.Sprintf("%s=%q: %v", e.Key, e.Value, e.Err) }
func (e *SettingError) Unwrap() error { return e.Err }

// javaOnly are java.util.regex constructs Go's RE2 lacks, by how they
// start, with their names.
var javaOnly = []struct{ prefix, name string }{
	{"(?<=", "lookbehind (?<=...)"},
	{"(?<!", "negative lookbehind (?<!...)"},
	{"(?=", "lookahead (?=...)"},
	{"(?!", "negative lookahead (?!...)"},
	{"(?>", "atomic group (?>...)"},
	{`\G`, `\G (end of the previous match)`},
	{`\Z`, `\Z (end of input but for a final line terminator)`},
	{`\R`, `\R (any line break)`},
	{`\X`, `\X (extended grapheme cluster)`},
	{`\h`, `\h (horizontal whitespace)`},
	{`\k<`, `\k<name> (named backreference)`},
}

// JavaOnlyRegex returns an error naming the first java.util.regex construct
// in re that Go's regexp lacks: lookaround, atomic groups, possessive
// quantifiers, backreferences and a few escapes. Go would refuse most of
// them too, but with messages (like "invalid nested repetition operator")
// that do not tell a Debezium user what to change.
func JavaOnlyRegex(re string) error {
	inClass := false
	for i := 0; i < len(re); i++ {
		rest := re[i:]
		if !inClass {
			for _, j := range javaOnly {
				if strings.HasPrefix(rest, j.prefix) {
					return fmt.Errorf("uses %s at offset %d, which Java supports and Go's regexp (RE2) does not", j.name, i)
				}
			}
			if len(rest) > 1 && rest[0] == '\\' && rest[1] >= '1' && rest[1] <= '9' {
				return fmt.Errorf("uses the backreference %s at offset %d, which Java supports and Go's regexp (RE2) does not", rest[:2], i)
			}
			if len(rest) > 1 && strings.IndexByte("*+?}", rest[0]) >= 0 && rest[1] == '+' && (i == 0 || re[i-1] != '\\') {
				return fmt.Errorf("uses the possessive quantifier %s at offset %d, which Java supports and Go's regexp (RE2) does not", rest[:2], i)
			}
		}
		switch re[i] {
		case '\\':
			i++ // the escaped character is literal
		case '[':
			inClass = true
		case ']':
			inClass = false
		}
	}
	return nil
}

// TopicTemplate turns route.topic.replacement, a java.util.regex
// replacement, into Go's Regexp.Expand syntax, checking that every group it
// names exists in re, the compiled route.topic.regex.
func TopicTemplate(s string, re *regexp.Regexp) ([]byte, error) {
	var out []byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("ends in a backslash")
			}
			i++
			if s[i] == '$' {
				out = append(out, '$', '$')
			} else {
				out = append(out, s[i])
			}
		case c == '$' && i+1 < len(s) && s[i+1] == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, errors.New("${ without a closing brace")
			}
			name := s[i+2 : i+end]
			if re.SubexpIndex(name) < 0 {
				return nil, fmt.Errorf("no group named %q in route.topic.regex %q", name, re.String())
			}
			out = append(out, s[i:i+end+1]...)
			i += end
		case c == '$':
			// Java takes the first digit, then more while the number is a group.
			j := i + 1
			if j == len(s) || s[j] < '0' || s[j] > '9' {
				return nil, fmt.Errorf("$ at offset %d is not followed by a group number or {name}", i)
			}
			n := int(s[j] - '0')
			for j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9' && n*10+int(s[j+1]-'0') <= re.NumSubexp() {
				j++
				n = n*10 + int(s[j]-'0')
			}
			if n > re.NumSubexp() {
				return nil, fmt.Errorf("no group %d in route.topic.regex %q", n, re.String())
			}
			out = fmt.Appendf(out, "${%d}", n)
			i = j
		default:
			out = append(out, c)
		}
	}
	return out, nil
}
