package decode

import (
	"errors"
	"strings"
	"testing"
)

// NewOutbox reads values as Debezium's EventRouterConfigDefinition does:
// each enum's parse() trims and ignores case; table.field.additional.missing
// (Debezium 3.6+) takes error or ignore, table.json.payload.null.behavior
// ignore or optional_bytes, table.json.payload.empty.array.behavior ignore
// or optional_string; Kafka's ConfigDef reads booleans trimmed, in any case.
func TestNewOutboxSettings(t *testing.T) {
	o, err := NewOutbox("public", "outbox", map[string]string{
		"table.field.additional.missing":          " IGNORE ",
		"table.json.payload.null.behavior":        "optional_bytes",
		"table.json.payload.empty.array.behavior": "Optional_String",
		"table.expand.json.payload":               " TRUE",
		"route.tombstone.on.empty.payload":        "true",
		"table.fields.additional.placement":       "type : header : eventType",
		"table.op.invalid.behavior":               " Fatal ",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !o.AdditionalOptional || !o.ExpandJSONNulls || !o.ExpandJSONEmptyArrays || !o.ExpandJSONPayload || !o.TombstoneOnEmptyPayload ||
		o.OnUpdate != OpFatal || len(o.Additional) != 1 || o.Additional[0].Alias != "eventType" {
		t.Fatalf("settings not applied: %+v", o)
	}
	// Defaults: EventRouterConfigDefinition's withDefault values; no
	// tracing column, so no traceparent header.
	d, err := NewOutbox("public", "outbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Columns != DefaultColumns() || d.AdditionalOptional || d.ExpandJSONNulls || d.ExpandJSONEmptyArrays || d.TopicRegex != DefaultTopicRegex ||
		d.TopicReplacement != DefaultTopicReplacement || d.Columns.Tracing != "" {
		t.Fatalf("defaults: %+v", d)
	}
	for _, tc := range []struct {
		settings map[string]string
		key      string
		want     string
	}{
		{map[string]string{"table.field.additional.missing": "skip"}, "table.field.additional.missing", "is not error or ignore"},
		{map[string]string{"table.json.payload.empty.array.behavior": "keep"}, "table.json.payload.empty.array.behavior", "is not ignore or optional_string"},
		{map[string]string{"table.json.payload.null.behavior": "null"}, "table.json.payload.null.behavior", "is not ignore or optional_bytes"},
		{map[string]string{"route.tombstone.on.empty.payload": "yes"}, "route.tombstone.on.empty.payload", "is not true or false"},
		{map[string]string{"route.topic.regex": "(?<routedByValue>.*)(?=x)"}, "route.topic.regex", "lookahead (?=...)"},
		{map[string]string{"route.topic.regex": "a*+"}, "route.topic.regex", "possessive quantifier *+"},
		{map[string]string{"table.field.event.key": ""}, "table.field.event.key", "must name a column"},
		{map[string]string{"table.field.additional.missing": "ignore", "table.fields.additional.error.on.missing": "true"},
			"table.fields.additional.error.on.missing", "both set"},
		{map[string]string{"route.topic.replacement": " "}, "route.topic.replacement", "is empty"},
		{map[string]string{"route.topic.replacement": "events.${kind}"}, "route.topic.replacement", `no group named "kind"`},
		{map[string]string{"route.topic.replacement": "events.$2"}, "route.topic.replacement", "no group 2"},
	} {
		_, err := NewOutbox("public", "outbox", tc.settings)
		var se *SettingError
		if !errors.As(err, &se) || se.Key != tc.key || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewOutbox(%v) = %v, want a SettingError for %s saying %q", tc.settings, err, tc.key, tc.want)
		}
	}
}

// A table's own settings override the shared ones, whichever name a
// connector config gives them; an unknown key is refused.
func TestNewOutboxLayers(t *testing.T) {
	shared := map[string]string{"route.by.field": "kind", "table.field.event.id": "event_id"}
	o, err := NewOutbox("billing", "outbox", shared, map[string]string{"transforms.outbox.route.by.field": "type", "table.field.payload": "body"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Columns.AggregateType != "type" || o.Columns.ID != "event_id" || o.Columns.Payload != "body" || o.Name() != "billing.outbox" {
		t.Errorf("outbox %+v: want the table's settings over the shared ones", o)
	}
	if shared["route.by.field"] != "kind" {
		t.Error("the shared settings were changed")
	}
	if _, err := NewOutbox("billing", "outbox", shared, map[string]string{"route.by.feld": "x"}); err == nil || !strings.Contains(err.Error(), `"route.by.feld"`) {
		t.Errorf("unknown key: %v", err)
	}
}

// java.util.regex constructs RE2 lacks are refused by name; what Go
// supports, named groups included, passes.
func TestJavaOnlyRegex(t *testing.T) {
	for re, want := range map[string]string{
		`(?<routedByValue>.*)`:   "",
		`[(?=]x\(?=`:             "",
		`a\*+`:                   "", // a literal * repeated, not a possessive quantifier
		`(?<=x)y`:                "lookbehind",
		`(?<!x)y`:                "negative lookbehind",
		`(?!x)y`:                 "negative lookahead",
		`(?>ab)`:                 "atomic group",
		`a{2}+`:                  "possessive quantifier }+",
		`(a)\1`:                  `backreference \1`,
		`\Gx`:                    `\G`,
		`(?<n>a)\k<n>`:           `\k<name>`,
		`.*?[a-z]+(?<g>[0-9])?$`: "",
	} {
		err := JavaOnlyRegex(re)
		switch {
		case want == "" && err != nil:
			t.Errorf("JavaOnlyRegex(%q) = %v, want nil", re, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("JavaOnlyRegex(%q) = %v, want it to name %q", re, err, want)
		}
	}
}

// The columns a mapping reads are required of its table, optional
// additional ones not.
func TestRequiredColumns(t *testing.T) {
	o, err := NewOutbox("public", "outbox", map[string]string{"table.field.event.timestamp": "created_at", "table.fields.additional.placement": "type:header"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.RequiredColumns(), ","); got != "id,aggregatetype,aggregateid,payload,created_at,type" {
		t.Errorf("required %s", got)
	}
	o.AdditionalOptional = true
	if got := strings.Join(o.RequiredColumns(), ","); got != "id,aggregatetype,aggregateid,payload,created_at" {
		t.Errorf("required with optional additional columns %s", got)
	}
}
