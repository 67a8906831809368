package debezium

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"
)

// TestTranslate: a connector config's keys become walstream's settings by
// their names, each with the key that set it (a router key by its
// setting's name, the database.* keys one connection string), Debezium's
// defaults where walstream's differ noted as such; the schema registry's
// password is kept apart, and an ignored key keeps its reason.
func TestTranslate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.properties")
	cc, ok, err := ReadConnector(path, []byte(`connector.class=`+PostgresConnector+`
database.hostname=db
database.dbname=app
topic.prefix=dbz
table.include.list=public\.outbox
slot.name=outbox
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.route.by.field=kind
value.converter.basic.auth.user.info=app:s3cret
tasks.max=1
`))
	if !ok || err != nil {
		t.Fatalf("reading the connector config: %v, %v", ok, err)
	}
	tr, err := Translate(cc, ResolveLocal)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{
		"slot": "outbox", "publication": "dbz_publication", "extended-headers": "true", "table": "public.outbox", "topic-prefix": "dbz",
		"route-by-column": "kind", "schema-registry-user": "app", "pg-url": "dbname='app' host='db' port='5432'", "message-prefix": "",
	}
	if !maps.Equal(tr.Settings, settings) {
		t.Errorf("settings %v, want %v", tr.Settings, settings)
	}
	from := map[string]string{"slot": "slot.name", "topic-prefix": "topic.prefix", "route-by-column": "transforms.outbox.route.by.field",
		"schema-registry-user": "value.converter.basic.auth.user.info", "table": "table.include.list", "pg-url": "database.*"}
	if !maps.Equal(tr.From, from) {
		t.Errorf("keys %v, want %v", tr.From, from)
	}
	if defaults := map[string]bool{"publication": true, "extended-headers": true, "message-prefix": true}; !maps.Equal(tr.Defaults, defaults) {
		t.Errorf("defaults %v, want %v", tr.Defaults, defaults)
	}
	if tr.Registry.Password != "s3cret" || tr.Registry.Token != "" {
		t.Errorf("registry password %q, token %q", tr.Registry.Password, tr.Registry.Token)
	}
	if want := []IgnoredKey{{"tasks.max", ignoredKeys["tasks.max"]}}; !slices.Equal(tr.Ignored, want) {
		t.Errorf("ignored %v, want %v", tr.Ignored, want)
	}
}
