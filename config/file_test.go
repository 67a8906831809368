package config

import (
	"bytes"
	"testing"

	"go.yaml.in/yaml/v3"
)

// yaml.v3 accepts a duplicate key when decoding into a Node, which is what
// the config file loader decodes into; this pins that behaviour, so that the
// loader's own check stays needed and stays tested.
func TestYAMLNodeAcceptsDuplicateKeys(t *testing.T) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("slot: a\nslot: b\n"), &n); err != nil {
		t.Fatalf("yaml.v3 now refuses duplicate keys in a Node (%v): the loader's duplicateKeys check may go", err)
	}
	var m map[string]string
	if err := n.Decode(&m); err == nil {
		t.Fatal("yaml.v3 decoded a duplicate key into a map")
	}
}

func TestConfigFileDuplicateKey(t *testing.T) {
	base := "pg-url: postgres://u@h/db\nkafka-brokers: k:9092\n"
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"top level", base + "slot: a\nslot: b\n", []string{"line 4", "slot is set twice, first at line 3"}},
		{"outbox section", base + "outbox:\n  route.by.field: a\n  route.by.field: b\n", []string{"line 5", "route.by.field is set twice, first at line 4"}},
		{"table", base + "tables:\n  public.outbox: {}\n  public.outbox: {}\n", []string{"line 5", "public.outbox is set twice, first at line 4"}},
		{"table setting", base + "tables:\n  public.outbox:\n    route.by.field: a\n    route.by.field: b\n", []string{"line 6", "route.by.field is set twice, first at line 5"}},
		{"section", base + "outbox: {}\noutbox: {}\n", []string{"line 4", "outbox is set twice, first at line 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(Run, []string{"--config", writeFile(t, tc.body)}, &bytes.Buffer{})
			wantRefused(t, err, tc.want...)
		})
	}
	// The same keys in different mappings are not duplicates.
	ok := base + "outbox:\n  route.by.field: a\ntables:\n  public.outbox:\n    route.by.field: b\n"
	if _, err := Parse(Run, []string{"--config", writeFile(t, ok)}, &bytes.Buffer{}); err != nil {
		t.Fatalf("a key repeated in another mapping: %v", err)
	}
}

// A YAML null (~, null) is what an empty value is: the empty string, in
// every mapping of the file, never the text "~" or "null".
func TestConfigFileNull(t *testing.T) {
	base := "pg-url: postgres://u@h/db\nkafka-brokers: k:9092\n"
	for _, null := range []string{"", " ~", " null", " Null", " NULL"} {
		t.Run("value"+null, func(t *testing.T) {
			body := base + "message-prefix:" + null + "\npprof-addr:" + null + "\noutbox:\n  table.field.event.timestamp:" + null +
				"\ntables:\n  public.outbox:\n    tracing.span.context.field:" + null + "\n"
			c, err := Parse(Run, []string{"--config", writeFile(t, body), "--timestamp-column", "created_at"}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if c.MessagePrefix != "" || c.PprofAddr != "" || c.Outboxes[0].Columns.Tracing != "" {
				t.Errorf("message prefix %q, pprof address %q, tracing column %q; want each empty", c.MessagePrefix, c.PprofAddr, c.Outboxes[0].Columns.Tracing)
			}
			// The slot's name is checked: a null is refused as an empty
			// name is, not taken as a slot named "~".
			_, err = Parse(Run, []string{"--config", writeFile(t, base+"slot:"+null+"\n")}, &bytes.Buffer{})
			wantRefused(t, err, `slot name ""`)
		})
	}
}

// A config file is one YAML document: a second one (after ---) would be
// ignored whole, its mistakes with it, so the file is refused, naming the
// line where the second's content starts; an empty one holds nothing to ignore.
func TestConfigFileOneDocument(t *testing.T) {
	base := "pg-url: postgres://u@h/db\nkafka-brokers: k:9092\n"
	for name, tc := range map[string]struct{ body, line string }{
		"second document":        {base + "---\nslot: other\nunknown-setting: x\n", "line 4"},
		"after a comment":        {base + "# the next stream\n--- \nslot: other\n", "line 5"},
		"second with bad syntax": {base + "---\nslot: [\n", "line 4"},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, tc.body)
			_, err := Parse(Run, []string{"--config", path}, &bytes.Buffer{})
			wantRefused(t, err, "config file "+path, tc.line)
		})
	}
	for name, body := range map[string]string{"a leading ---": "---\n" + base, "an end marker": base + "...\n",
		"an empty second": base + "---\n", "a comment after ---": base + "---\n# nothing\n"} {
		if _, err := Parse(Run, []string{"--config", writeFile(t, body)}, &bytes.Buffer{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
