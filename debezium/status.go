package debezium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// A connector's state as a distributed Kafka Connect worker records it in
// its status topic (status.storage.topic): a record keyed
// status-connector-<name> for the connector and status-task-<name>-<n>
// for each task, valued {"state": ..., "trace": ..., "worker_id": ...,
// "generation": ...} by Kafka Connect's JsonConverter without schemas; a
// null value (a tombstone) when the connector, or the task, is deleted.
// The last record of a key is its state, as Kafka Connect's
// KafkaStatusBackingStore reads it. Read through the Kafka cluster, it
// needs no access to Connect's REST API.

// Kafka Connect's states of a connector or task.
const (
	StateRunning    = "RUNNING"
	StatePaused     = "PAUSED"
	StateStopped    = "STOPPED"
	StateFailed     = "FAILED"
	StateUnassigned = "UNASSIGNED"
	StateRestarting = "RESTARTING"
)

// State is one status record's value.
type State struct {
	State string `json:"state"`
	// Trace is the failure's stack trace, for FAILED.
	Trace      string `json:"trace,omitempty"`
	WorkerID   string `json:"worker_id"`
	Generation int    `json:"generation"`
}

// ConnectorStatus is a connector's state in a status topic.
type ConnectorStatus struct {
	Name, Topic string
	// Found is false when the topic holds no record of the connector
	// (another name, another topic, or a standalone worker's connector,
	// whose state is kept in memory); Deleted when its last record is a
	// tombstone.
	Found, Deleted bool
	Connector      State
	// Tasks are the tasks' last states, by task number; a deleted task
	// is not among them.
	Tasks map[int]State
}

// Stopped reports whether the connector holds nothing and will take
// nothing back: stopped (PUT /connectors/<name>/stop, Strimzi's state:
// stopped) or deleted, with no task left running or paused.
func (s ConnectorStatus) Stopped() bool {
	if !s.Found || !s.Deleted && s.Connector.State != StateStopped {
		return false
	}
	for _, t := range s.Tasks {
		if t.State == StateRunning || t.State == StatePaused || t.State == StateRestarting {
			return false
		}
	}
	return true
}

func (s ConnectorStatus) String() string {
	switch {
	case !s.Found:
		return fmt.Sprintf("no status of connector %s in topic %s", s.Name, s.Topic)
	case s.Deleted:
		return fmt.Sprintf("connector %s deleted", s.Name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "connector %s %s (worker %s, generation %d)", s.Name, s.Connector.State, s.Connector.WorkerID, s.Connector.Generation)
	if len(s.Tasks) == 0 {
		b.WriteString(", no task")
	}
	for _, n := range slices.Sorted(maps.Keys(s.Tasks)) {
		fmt.Fprintf(&b, ", task %d %s", n, s.Tasks[n].State)
	}
	return b.String()
}

// ReadStatus reads connector name's state from Kafka Connect's status
// topic.
func ReadStatus(ctx context.Context, topics TopicReader, topic, name string) (ConnectorStatus, error) {
	s := ConnectorStatus{Name: name, Topic: topic, Tasks: make(map[int]State)}
	connectorKey, taskPrefix := "status-connector-"+name, "status-task-"+name+"-"
	var errs []error
	err := topics.ReadTopic(ctx, topic, func(key, value []byte) {
		k := string(key)
		task, isTask := strings.CutPrefix(k, taskPrefix)
		n, err := strconv.Atoi(task)
		switch {
		case k == connectorKey && value == nil:
			s.Found, s.Deleted, s.Connector = true, true, State{}
			clear(s.Tasks) // Kafka Connect forgets the tasks with it
		case k == connectorKey:
			var st State
			if err := json.Unmarshal(value, &st); err != nil {
				errs = append(errs, fmt.Errorf("record %s: %w", k, err))
				return
			}
			s.Found, s.Deleted, s.Connector = true, false, st
		case !isTask || err != nil:
			// Another connector's, whose name may begin with this one's
			// (status-task-<name>-<more>-<n>), or a topic's status.
		case value == nil:
			delete(s.Tasks, n)
		default:
			var st State
			if err := json.Unmarshal(value, &st); err != nil {
				errs = append(errs, fmt.Errorf("record %s: %w", k, err))
				return
			}
			s.Tasks[n] = st
		}
	})
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		return s, fmt.Errorf("reading the status of connector %s from Kafka Connect's status topic %s: %w", name, topic, err)
	}
	return s, nil
}
