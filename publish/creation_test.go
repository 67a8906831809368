package publish

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
)

// cluster starts a kfake cluster of n brokers, without topic
// auto-creation unless opts add it.
func cluster(t *testing.T, n int, opts ...kfake.Opt) (kafka.Settings, *kadm.Client) {
	t.Helper()
	brokers, adm := testenv.KfakeCluster(t, n, opts...)
	return kafka.Settings{Brokers: brokers}, adm
}

// With broker auto-creation off, a producer with TopicCreation creates the
// outbox and dead-letter topics it writes to with their group's settings,
// and leaves an existing topic as it is, warning how it differs.
func TestProducerCreatesTopics(t *testing.T) {
	conn, adm := cluster(t, 3)
	ctx := context.Background()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "outbox.event.Customer"); err != nil {
		t.Fatal(err)
	}
	tc, err := kafka.ParseTopicCreation(map[string]string{
		"default.replication.factor": "3", "default.partitions": "4", "default.retention.ms": "3600000",
		"groups": "dlq", "dlq.include": `walstream\.dlq`, "dlq.partitions": "1", "dlq.retention.ms": "-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.LogBuffer
	p := producerOn(t, conn, tc, "walstream.dlq", log.Logger())
	bad := event(3, "c")
	bad.Bad = &decode.Error{Reason: "test"}
	customer := event(2, "b")
	customer.AggregateType = []byte("Customer")
	runUntil(t, p, checkpoint.Checkpoint{LSN: 0x2000}, &decode.Tx{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true,
		Events: []decode.Event{event(1, "a"), customer, bad}, Bytes: 10})
	for _, c := range []struct {
		topic                string
		replicas, partitions int
		retention            string
	}{
		{"outbox.event.Order", 3, 4, "3600000"},
		{"walstream.dlq", 3, 1, "-1"},
		{"outbox.event.Customer", 1, 2, "604800000"}, // existed: untouched
	} {
		replicas, partitions, retention := testenv.TopicSettings(t, adm, c.topic, "retention.ms")
		if replicas != c.replicas || partitions != c.partitions || retention != c.retention {
			t.Errorf("%s: %d replicas, %d partitions, retention.ms %s; want %d, %d, %s", c.topic, replicas, partitions, retention, c.replicas, c.partitions, c.retention)
		}
	}
	if out := log.String(); !strings.Contains(out, "topic=outbox.event.Order topic_creation_group=default partitions=4 replication_factor=3") ||
		!strings.Contains(out, "topic=walstream.dlq topic_creation_group=dlq") || strings.Contains(out, `"created topic" topic=outbox.event.Customer`) ||
		!strings.Contains(out, `level=WARN msg="topic exists with other settings than its topic.creation group's: walstream leaves it as it is" topic=outbox.event.Customer topic_creation_group=default differences="2 partitions, the group says 4; replication factor 1, the group says 3; retention.ms \"604800000\", the group says \"3600000\""`) {
		t.Errorf("log:\n%s", out)
	}
}

// Without TopicCreation and with broker auto-creation off, a record to a
// missing topic stops the producer before it is produced, naming the topic
// and the event: nothing is committed or confirmed (docs/kafka.md).
func TestProducerWithoutAutoCreation(t *testing.T) {
	conn, _ := cluster(t, 1)
	p := producerOn(t, conn, nil, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := NewQueue(1 << 20)
	p.Start(&fakePositions{at: time.Now(), committed: func(cp checkpoint.Checkpoint) {
		t.Errorf("committed %s", cp)
	}})
	if err := q.Put(ctx, &decode.Tx{CommitLSN: 0x1000, EndLSN: 0x2000, Final: true, Events: []decode.Event{event(1, "a")}, Bytes: 5}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := p.Run(ctx, q)
	var te *kafka.TopicError
	if !errors.As(err, &te) || !errors.Is(err, kafka.ErrTopicMissing) || te.Topic != "outbox.event.Order" || !strings.Contains(err.Error(), "event id a") {
		t.Fatalf("Run = %v, want the topic outbox.event.Order missing, naming event a", err)
	}
	if !Permanent(err) {
		t.Errorf("%v is not permanent", err)
	}
	t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// producerOn is a producer on conn whose checkpoint topic exists.
func producerOn(t *testing.T, conn kafka.Settings, tc *kafka.TopicCreation, dlq string, log *slog.Logger) *Producer {
	t.Helper()
	ctx := context.Background()
	p, err := New(Config{Outboxes: []*decode.Outbox{testOutbox},
		Kafka: conn, TransactionalID: "tx-topics", CheckpointTopic: "walstream.checkpoints", CheckpointKey: "slot-a",
		Slot: "slot-a", MaxBatchEvents: 100, MaxBatchBytes: 1 << 20, DeadLetterTopic: dlq, TopicCreation: tc,
		Linger: time.Millisecond, IdleInterval: 50 * time.Millisecond, CommitTimeout: 10 * time.Second, MaxRecordBytes: 1 << 20,
	}, log, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if _, err := kafka.EnsureCheckpointTopic(ctx, p.client, "walstream.checkpoints", nil, log); err != nil {
		t.Fatal(err)
	}
	if err := p.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}
