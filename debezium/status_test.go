package debezium

import (
	"context"
	"strings"
	"testing"
)

// records is a topic's records, oldest first, as a TopicReader.
type records [][2]string

func (r records) ReadTopic(_ context.Context, _ string, each func(key, value []byte)) error {
	for _, kv := range r {
		var v []byte
		if kv[1] != "" {
			v = []byte(kv[1])
		}
		each([]byte(kv[0]), v)
	}
	return nil
}

var _ TopicReader = records(nil)

// TestReadStatus: the last record of each key is its state, a tombstone
// deletes the connector with its tasks, or one task; other connectors'
// records, a name this one's is a prefix of among them, are not its.
func TestReadStatus(t *testing.T) {
	running := `{"state":"RUNNING","trace":null,"worker_id":"10.0.0.5:8083","generation":3}`
	topic := records{
		{"status-connector-outbox", running},
		{"status-task-outbox-0", running},
		{"status-task-outbox-1", running},
		{"status-connector-outbox-eu", running},
		{"status-task-outbox-eu-0", running},
		{"status-topic-outbox.event.order:connector-outbox", `{"topic":{"name":"outbox.event.order","connector":"outbox","task":0,"discoverTimestamp":1}}`},
	}
	for _, c := range []struct {
		name    string
		more    records
		stopped bool
		says    string
	}{
		{"running", nil, false, "connector outbox RUNNING (worker 10.0.0.5:8083, generation 3), task 0 RUNNING, task 1 RUNNING"},
		{"paused", records{{"status-connector-outbox", `{"state":"PAUSED","worker_id":"10.0.0.5:8083","generation":3}`},
			{"status-task-outbox-0", `{"state":"PAUSED","worker_id":"10.0.0.5:8083","generation":3}`}}, false, "connector outbox PAUSED"},
		{"stopped, a task still running", records{{"status-connector-outbox", `{"state":"STOPPED","worker_id":"10.0.0.5:8083","generation":4}`},
			{"status-task-outbox-1", ""}}, false, "connector outbox STOPPED (worker 10.0.0.5:8083, generation 4), task 0 RUNNING"},
		{"stopped", records{{"status-connector-outbox", `{"state":"STOPPED","worker_id":"10.0.0.5:8083","generation":4}`},
			{"status-task-outbox-0", ""}, {"status-task-outbox-1", ""}}, true, "connector outbox STOPPED (worker 10.0.0.5:8083, generation 4), no task"},
		{"deleted", records{{"status-connector-outbox", ""}}, true, "connector outbox deleted"},
		{"failed", records{{"status-connector-outbox", `{"state":"FAILED","trace":"java.lang.Exception","worker_id":"w","generation":4}`},
			{"status-task-outbox-0", ""}, {"status-task-outbox-1", ""}}, false, "connector outbox FAILED"},
	} {
		s, err := ReadStatus(context.Background(), append(topic[:len(topic):len(topic)], c.more...), "connect-status", "outbox")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.Stopped() != c.stopped || !strings.HasPrefix(s.String(), c.says) {
			t.Errorf("%s: %s, stopped %v; want %q, stopped %v", c.name, s, s.Stopped(), c.says, c.stopped)
		}
	}
	s, err := ReadStatus(context.Background(), topic, "connect-status", "orders")
	if err != nil || s.Found || s.Stopped() || s.String() != "no status of connector orders in topic connect-status" {
		t.Errorf("another connector's name: %s, %v; want none found, not stopped", s, err)
	}
	if _, err := ReadStatus(context.Background(), records{{"status-connector-outbox", "{"}}, "connect-status", "outbox"); err == nil ||
		!strings.Contains(err.Error(), "status topic connect-status") || !strings.Contains(err.Error(), "record status-connector-outbox") {
		t.Errorf("a record that is not JSON: %v, want an error naming it", err)
	}
}
