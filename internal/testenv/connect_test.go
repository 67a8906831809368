package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestConnect: Debezium's Postgres connector with the outbox router runs
// in a standalone worker and in a distributed exactly-once one, streams
// an outbox row to Kafka, reports its offsets, and after a clean stop, a
// kill and a KIP-875 stop and resume streams on from where it was without
// losing a row. Each worker's time to start and to stream and its memory
// are logged.
func TestConnect(t *testing.T) {
	broker := StartBrokerAsync(t, TestBroker())
	pg := StartPostgres(t)
	kafka := broker()
	for _, mode := range []ConnectMode{ConnectStandalone, ConnectDistributed} {
		pg.Exec("postgres", fmt.Sprintf(`CREATE TABLE outbox%d (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
			type text NOT NULL, payload jsonb NOT NULL)`, mode))
	}
	for _, mode := range []ConnectMode{ConnectStandalone, ConnectDistributed} {
		t.Run(mode.String(), func(t *testing.T) {
			// Each worker has its table, slot, connector and topics.
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cc := ConnectConfig{Mode: mode, Kafka: kafka.Addr()}
			if mode == ConnectStandalone {
				// The port picked for it taken before the worker binds it:
				// it starts again on another.
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				cc.port = ln.Addr().(*net.TCPAddr).Port
			}
			start := time.Now()
			c := StartConnect(t, cc)
			started := time.Since(start)
			if cc.port != 0 && c.Port == cc.port {
				t.Fatalf("the worker's REST API is on port %d, which another listener holds", c.Port)
			}
			name := fmt.Sprintf("outbox-%d", mode)
			cfg := c.DebeziumConnector(pg, "postgres", name, fmt.Sprintf("dbz_%d", mode), fmt.Sprintf("dbz_%d", mode), fmt.Sprintf("public.outbox%d", mode))
			cfg["transforms.outbox.route.topic.replacement"] = name + ".${routedByValue}"
			cfg["key.converter"] = "org.apache.kafka.connect.storage.StringConverter"
			cfg["value.converter"] = "org.apache.kafka.connect.storage.StringConverter"
			if err := c.CreateConnector(ctx, name, cfg); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitStreaming(ctx, name, 0, 2*time.Minute); err != nil {
				t.Fatal(err)
			}
			rss, err := c.Process().RSS()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: REST up in %s, streaming %s after launch, RSS %d MiB", c, started.Round(10*time.Millisecond),
				time.Since(start).Round(10*time.Millisecond), rss>>20)

			topic := name + ".Order"
			conn, err := pgx.Connect(ctx, pg.URL("postgres", "postgres"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			insert := func(n int) {
				if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO outbox%d VALUES ('00000000-0000-0000-0000-%012d', 'Order', 'o-%d', 'Placed', '{"n": %d}')`,
					mode, n, n, n)); err != nil {
					t.Fatal(err)
				}
			}
			insert(1)
			recs := waitRecords(ctx, t, kafka.Addr(), topic, 1)
			if r := recs[0]; string(r.Key) != "o-1" || string(r.Value) != `{"n": 1}` || header(r, "id") != "00000000-0000-0000-0000-000000000001" {
				t.Fatalf("record %q=%q headers %v: want the row as the outbox router writes it", r.Key, r.Value, r.Headers)
			}
			if r := recs[0]; (mode == ConnectDistributed) != r.Attrs.IsTransactional() || r.ProducerID < 0 {
				t.Errorf("record transactional=%v producer id %d in %s mode: want an idempotent producer, transactional when exactly-once",
					r.Attrs.IsTransactional(), r.ProducerID, mode)
			}
			offsets := waitOffsets(ctx, t, c, name)
			t.Logf("offsets after the first row: %+v", offsets)

			for i, restart := range []func() error{
				func() error { return c.Restart(ctx, syscall.SIGTERM) },
				func() error { return c.Restart(ctx, syscall.SIGKILL) },
				func() error {
					if err := c.StopConnector(ctx, name, time.Minute); err != nil {
						return err
					}
					if _, err := c.Offsets(ctx, name); err != nil {
						return err
					}
					return c.ResumeConnector(ctx, name)
				},
			} {
				before := 0 // a restarted worker's log starts empty
				if i == 2 {
					before = c.Streamed(name)
				}
				start := time.Now()
				if err := restart(); err != nil {
					t.Fatal(err)
				}
				if err := c.WaitStreaming(ctx, name, before, 2*time.Minute); err != nil {
					t.Fatal(err)
				}
				t.Logf("restart %d: streaming after %s", i+1, time.Since(start).Round(10*time.Millisecond))
				insert(i + 2)
				waitRecords(ctx, t, kafka.Addr(), topic, i+2)
			}
			// A killed standalone worker may publish again what it had not
			// flushed the offsets of: at least once. Every row is there, and
			// the exactly-once worker has each once.
			recs = waitRecords(ctx, t, kafka.Addr(), topic, 4)
			var dups int
			seen := map[string]int{}
			for _, r := range recs {
				seen[string(r.Key)]++
			}
			for n := 1; n <= 4; n++ {
				if k := fmt.Sprintf("o-%d", n); seen[k] == 0 || mode == ConnectDistributed && seen[k] != 1 {
					t.Errorf("row %s published %d times", k, seen[k])
				} else {
					dups += seen[k] - 1
				}
			}
			t.Logf("4 rows, %d records (%d published again after a restart)", len(recs), dups)
		})
	}
}

// waitRecords reads topic until it holds the record of row n (key o-n).
func waitRecords(ctx context.Context, t *testing.T, broker, topic string, n int) []*kgo.Record {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	key := fmt.Sprintf("o-%d", n)
	for {
		var recs []*kgo.Record
		found := false
		err := ReadCommitted(ctx, broker, topic, func(r *kgo.Record) {
			recs = append(recs, r)
			found = found || string(r.Key) == key
		})
		if err == nil && found {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d records, none of row %d (%v)", topic, len(recs), n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitOffsets waits until the connector has committed an offset, which
// Connect does every offset.flush.interval.ms.
func waitOffsets(ctx context.Context, t *testing.T, c *Connect, name string) []ConnectOffset {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		offsets, err := c.Offsets(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(offsets) == 1 && offsets[0].Offset["lsn"] != nil {
			if got, want := fmt.Sprint(offsets[0].Partition), fmt.Sprintf("map[server:%s]", name); got != want {
				t.Errorf("offset partition %s, want %s", got, want)
			}
			if _, err := offsets[0].Offset["lsn"].(json.Number).Int64(); err != nil {
				t.Errorf("offset lsn %v is not a number", offsets[0].Offset["lsn"])
			}
			return offsets
		}
		if time.Now().After(deadline) {
			t.Fatalf("no offset committed within a minute: %+v", offsets)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func header(r *kgo.Record, key string) string {
	var vals []string
	for _, h := range r.Headers {
		if h.Key == key {
			vals = append(vals, string(h.Value))
		}
	}
	return strings.Join(vals, ",")
}
