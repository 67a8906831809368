package debezium

import (
	"path/filepath"
	"testing"
)

// TestReadConnectorTwice: a key given twice is refused, naming the key and
// the line of its first setting (a continued line counted as the lines it
// spans); in a Strimzi KafkaConnector, metadata.name and spec.tasksMax
// are name and tasks.max, which spec.config may not set again.
func TestReadConnectorTwice(t *testing.T) {
	for _, tc := range []struct{ name, file, body, want string }{
		{"properties", "c.properties", "connector.class=" + PostgresConnector + "\n# a comment\nslot.name=a\nslot.name = b\n",
			"line 3: slot.name is set twice"},
		{"continued", "c.properties", "table.include.list=public.outbox,\\\n  public.other\nslot.name=a\nslot.name=b\n",
			"line 3: slot.name is set twice"},
		{"Strimzi spec", "c.yaml", "kind: KafkaConnector\nmetadata:\n  name: outbox\nspec:\n  class: " + PostgresConnector + "\n  tasksMax: 1\n  config:\n    tasks.max: 1\n",
			"line 6: tasks.max is set twice"},
		{"Strimzi name", "c.yaml", "kind: KafkaConnector\nmetadata:\n  name: outbox\nspec:\n  config:\n    name: other\n",
			"line 3: name is set twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.file)
			_, ok, err := ReadConnector(path, []byte(tc.body))
			if want := "connector config " + path + ", " + tc.want; !ok || err == nil || err.Error() != want {
				t.Errorf("a connector config: %v, error %v; want %q", ok, err, want)
			}
		})
	}
}

// TestReadPropertiesLastLineContinued: a backslash at the end of the
// file's last line continues it into nothing, and the line is kept, as
// Java's Properties.load keeps it.
func TestReadPropertiesLastLineContinued(t *testing.T) {
	for name, tc := range map[string]struct{ body, key, want string }{
		"without a newline":       {"slot.name=a\ntable.include.list=public.outbox,\\", "table.include.list", "public.outbox,"},
		"with a newline":          {"slot.name=a\ntable.include.list=public.outbox,\\\n", "table.include.list", "public.outbox,"},
		"continued twice":         {"slot.name=a\ntable.include.list=public.outbox,\\\n  public.other\\\n", "table.include.list", "public.outbox,public.other"},
		"an escaped backslash":    {"slot.name=a\nsslrootcert=C:\\\\certs\\\\", "sslrootcert", `C:\certs\`},
		"a blank line after it":   {"table.include.list=public.outbox\\\n\nslot.name=a\n", "table.include.list", "public.outbox"},
		"a comment continued":     {"slot.name=a\ntopic.prefix=dbz\\\n# not a comment\n", "topic.prefix", "dbz# not a comment"},
		"the only line continued": {"slot.name=a\\", "slot.name", "a"},
	} {
		t.Run(name, func(t *testing.T) {
			c, ok, err := ReadConnector(filepath.Join(t.TempDir(), "c.properties"), []byte(tc.body))
			if !ok || err != nil {
				t.Fatalf("reading: %v, %v", ok, err)
			}
			if got, found := c.Values[tc.key]; !found || got != tc.want {
				t.Errorf("%s = %q (set: %v), want %q; values %q", tc.key, got, found, tc.want, c.Values)
			}
		})
	}
}
