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
