package debezium

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// restAnswer is GET /connectors/dbz-outbox/offsets as Kafka Connect 4.3
// answered it for Debezium 3.6.1 (NOTES of the harness's first run).
const restAnswer = `{"offsets":[{"partition":{"server":"dbz"},"offset":{"lsn_proc":26373296,"messageType":"MESSAGE","lsn_commit":26373296,"lsn":26373480,"txId":733,"ts_usec":1795672925927011}}]}`

func TestParseOffset(t *testing.T) {
	o, err := ParseOffset([]byte(`{"lsn_proc":26650416,"messageType":"INSERT","lsn_commit":26650224,"lsn":26650416,"txId":742,"ts_usec":1795671585418974}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Offset{LSN: 0x196A730, Proc: 0x196A730, Commit: 0x196A670, TxID: 742, HasTxID: true,
		CommitTime: time.Date(2026, 11, 26, 5, 39, 45, 418974000, time.UTC), MessageType: "INSERT"}
	raw := o.Raw
	o.Raw = nil
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("ParseOffset = %+v, want %+v", o, want)
	}
	if string(raw) != `{"lsn":26650416,"lsn_commit":26650224,"lsn_proc":26650416,"messageType":"INSERT","ts_usec":1795671585418974,"txId":742}` {
		t.Errorf("Raw = %s, want the offset with its keys sorted", raw)
	}
	if got := o.Resume(); got != 0x196A670 {
		t.Errorf("Resume() = %s, want lsn_commit 0/196A670", got)
	}
	if s := o.String(); !strings.Contains(s, "lsn_commit 0/196A670, lsn 0/196A730") || !strings.Contains(s, "txId 742") {
		t.Errorf("String() = %q", s)
	}
	for _, c := range []struct {
		value string
		want  pglogrepl.LSN
	}{
		{`{"lsn":100,"lsn_proc":90}`, 90}, // no lsn_commit: lsn_proc, as Debezium
		{`{"lsn":100}`, 100},
	} {
		o, err := ParseOffset([]byte(c.value))
		if err != nil || o.Resume() != c.want {
			t.Errorf("ParseOffset(%s).Resume() = %s, %v; want %s", c.value, o.Resume(), err, c.want)
		}
	}
	snap, err := ParseOffset([]byte(`{"snapshot":true,"last_snapshot_record":false,"lsn":100}`))
	if err != nil || !snap.Snapshot {
		t.Errorf("a snapshot's offset = %+v, %v", snap, err)
	}
	if _, err := ParseOffset([]byte(`null`)); !errors.Is(err, ErrNoOffset) {
		t.Errorf("a tombstone: %v, want ErrNoOffset", err)
	}
	for _, bad := range []string{`{"lsn_commit":1}`, `{"lsn":-1}`, `{"lsn":"x"}`, `{"lsn":1,"txId":"x"}`, `[1]`, `{`} {
		if _, err := ParseOffset([]byte(bad)); err == nil {
			t.Errorf("ParseOffset(%s) succeeded", bad)
		}
	}
}

func TestParseKey(t *testing.T) {
	for _, c := range []struct {
		key string
		ok  bool
		k   Key
	}{
		{`["dbz-outbox",{"server":"dbz"}]`, true, Key{"dbz-outbox", "dbz"}},
		{`["dbz-outbox",{"server":"dbz","extra":1}]`, false, Key{}},
		{`["other",{"filename":"/tmp/x"}]`, false, Key{}},
		{`{"server":"dbz"}`, false, Key{}},
		{`not json`, false, Key{}},
	} {
		k, ok := ParseKey([]byte(c.key))
		if ok != c.ok || ok && k != c.k {
			t.Errorf("ParseKey(%s) = %+v, %v; want %+v, %v", c.key, k, ok, c.k, c.ok)
		}
	}
}

func TestLatestChoose(t *testing.T) {
	l := make(Latest)
	l.Add([]byte(`["a",{"server":"p"}]`), []byte(`{"lsn":1}`))
	l.Add([]byte(`["a",{"server":"p"}]`), []byte(`{"lsn":2,"lsn_commit":2}`)) // the last one counts
	l.Add([]byte(`["b",{"server":"q"}]`), []byte(`{"lsn":3}`))
	l.Add([]byte(`["c",{"server":"r"}]`), []byte(`{"lsn":4}`))
	l.Add([]byte(`["c",{"server":"r"}]`), nil) // reset
	l.Add([]byte(`not a key`), []byte(`{"lsn":5}`))
	o, err := l.Choose(Selector{Connector: "a"}, "topic t")
	if err != nil || o.LSN != 2 || o.Connector != "a" || o.Server != "p" {
		t.Fatalf("Choose(a) = %+v, %v", o, err)
	}
	if _, err := l.Choose(Selector{Connector: "c"}, "topic t"); !errors.Is(err, ErrNoOffset) || !strings.Contains(err.Error(), "a (topic.prefix p), b (topic.prefix q)") {
		t.Errorf("Choose(c), reset: %v", err)
	}
	if _, err := l.Choose(Selector{}, "topic t"); err == nil || !strings.Contains(err.Error(), "name the connector") {
		t.Errorf("Choose() among two: %v", err)
	}
	if _, err := l.Choose(Selector{Connector: "a", Server: "q"}, "topic t"); !errors.Is(err, ErrNoOffset) {
		t.Errorf("Choose(a, q): %v", err)
	}
	if _, err := make(Latest).Choose(Selector{Connector: "a"}, "topic t"); !errors.Is(err, ErrNoOffset) {
		t.Errorf("Choose on nothing: %v", err)
	}
}

func TestParseREST(t *testing.T) {
	o, err := ParseREST([]byte(restAnswer), Selector{Connector: "dbz-outbox"}, "answer")
	if err != nil || o.Commit != 26373296 || o.LSN != 26373480 || o.Server != "dbz" || o.Connector != "dbz-outbox" || o.MessageType != "MESSAGE" {
		t.Fatalf("ParseREST = %+v, %v", o, err)
	}
	if !strings.Contains(string(o.Raw), `"lsn_commit":26373296`) {
		t.Errorf("Raw = %s", o.Raw)
	}
	if _, err := ParseREST([]byte(restAnswer), Selector{Server: "other"}, "answer"); !errors.Is(err, ErrNoOffset) {
		t.Errorf("another topic.prefix: %v", err)
	}
	if _, err := ParseREST([]byte(`{"offsets":[]}`), Selector{}, "answer"); !errors.Is(err, ErrNoOffset) {
		t.Errorf("no offsets: %v", err)
	}
	for _, bad := range []string{`{}`, `[]`, `{"offsets":{}}`, `x`} {
		if _, err := ParseREST([]byte(bad), Selector{}, "answer"); err == nil {
			t.Errorf("ParseREST(%s) succeeded", bad)
		}
	}
}

func TestParseSource(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Source
		name string
		err  bool
	}{
		{"http://connect:8083", Source{Kind: SourceREST, URL: "http://connect:8083"}, "", false},
		{"https://connect:8083/", Source{Kind: SourceREST, URL: "https://connect:8083"}, "", false},
		{"http://connect:8083/connectors/dbz-outbox", Source{Kind: SourceREST, URL: "http://connect:8083"}, "dbz-outbox", false},
		{"http://connect:8083/base/connectors/dbz%20x/offsets", Source{Kind: SourceREST, URL: "http://connect:8083/base"}, "dbz x", false},
		{"kafka:connect-offsets", Source{Kind: SourceTopic, Topic: "connect-offsets"}, "", false},
		{"/var/lib/connect/connect.offsets", Source{Kind: SourceFile, Path: "/var/lib/connect/connect.offsets"}, "", false},
		{"", Source{}, "", true},
		{"kafka:", Source{}, "", true},
		{"http://user:secret@connect:8083", Source{}, "", true},
		{"http://connect:8083/connectors/", Source{Kind: SourceREST, URL: "http://connect:8083"}, "", false},
		{"http://connect:8083/connectors/a/b", Source{}, "", true},
	} {
		got, name, err := ParseSource(c.in)
		if (err != nil) != c.err || got != c.want || name != c.name {
			t.Errorf("ParseSource(%q) = %+v, %q, %v; want %+v, %q, error %v", c.in, got, name, err, c.want, c.name, c.err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseSource(%q): the error shows the password: %v", c.in, err)
		}
	}
}
