package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
)

// Rows written to a partition of an outbox table while the publication
// sent them under the partition's name (publish_via_partition_root off, as
// earlier versions made it), decoded only after the partition was
// detached or dropped: the catalog no longer says whose they are. They
// stop the stream at the first of them, naming the relation and the
// event, after everything before it was published; rows of a table a
// wider publication publishes stay ignored.
func TestUnattachedPartitionRows(t *testing.T) {
	pg := testenv.StartPostgres(t)
	broker := testenv.StartKfake(t).Addr()
	// The rows, each in a transaction of its own, with the slot made
	// before them and walstream started after them and the DDL: decoded
	// after the catalog changed, as by a stream that lags.
	setup := func(t *testing.T, db, publication, ddl string) (Config, map[string]string) {
		t.Helper()
		pg.Exec("postgres", "CREATE DATABASE "+db)
		pg.Exec(db, `CREATE TABLE public.outbox (id text NOT NULL, aggregatetype text, aggregateid text, type text, payload jsonb,
			created_at timestamptz NOT NULL, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
			CREATE TABLE public.outbox_2010 PARTITION OF public.outbox FOR VALUES FROM ('2010-01-01') TO ('2011-01-01');
			CREATE TABLE public.outbox_now PARTITION OF public.outbox FOR VALUES FROM ('2020-01-01') TO (MAXVALUE);
			CREATE TABLE public.audit (LIKE public.outbox)`)
		pg.Exec(db, "CREATE PUBLICATION walstream_outbox "+publication+" WITH (publish = 'insert, update')")
		pg.Exec(db, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", db)
		oids := make(map[string]string)
		for _, r := range []struct{ id, table, at string }{{"a", "outbox", "2024-01-01"}, {"b", "outbox", "2010-06-01"}, {"audit-1", "audit", "2024-01-01"},
			{"c", "outbox", "2024-02-01"}, {"d", "outbox", "2010-07-01"}} {
			pg.Exec(db, "INSERT INTO public."+r.table+` VALUES ($1, 'Order', 'o-1', 'Created', jsonb_build_object('id', $1::text), $2)`, r.id, r.at)
		}
		var oid uint32
		if err := pg.Connect(db).QueryRow(context.Background(), "SELECT 'public.outbox_2010'::regclass::oid").Scan(&oid); err != nil {
			t.Fatal(err)
		}
		oids["outbox_2010"] = fmt.Sprint(oid)
		// The fix walstream asks for at startup; the rows above still come
		// under their partitions' names.
		pg.Exec(db, "ALTER PUBLICATION walstream_outbox SET (publish_via_partition_root = true)")
		pg.Exec(db, ddl)
		cfg := testConfig(t, pg, broker)
		cfg.Postgres.Database = db
		cfg.Names.Slot, cfg.CheckpointKey, cfg.TransactionalID = db, db, db
		cfg.Outboxes[0].TopicReplacement = "outbox." + db
		// A Kafka transaction per row: a stop aborts the one open, and the
		// row before the stop is then in Kafka whatever the timing.
		cfg.MaxBatchEvents = 1
		return cfg, oids
	}
	// run streams until Run returns, or until done says it has published
	// enough: the ids of the events in the outbox's topic.
	run := func(t *testing.T, cfg Config, done func(ids []string) bool) (ids []string, stop error) {
		t.Helper()
		p := New(cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)), nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- p.Run(ctx) }()
		read := func() {
			recs, err := testenv.ReadRecords(context.Background(), broker, cfg.Outboxes[0].TopicReplacement)
			if err != nil {
				t.Fatal(err)
			}
			ids = ids[:0]
			for _, r := range recs {
				ids = append(ids, strings.TrimPrefix(r.Headers, "id="))
			}
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			select {
			case stop = <-errc:
				read()
				return ids, stop
			case <-time.After(100 * time.Millisecond):
			}
			if read(); done(ids) || time.Now().After(deadline) {
				cancel()
				stop = <-errc
				// done may have seen a commit the read before it did not.
				read()
				return ids, stop
			}
		}
	}
	for _, c := range []struct {
		name, publication, ddl, gone string
	}{
		{"detached", "FOR TABLE public.outbox", "ALTER TABLE public.outbox DETACH PARTITION public.outbox_2010", "is no partition of public.outbox now and not in the publication"},
		{"dropped", "FOR TABLE public.outbox", "DROP TABLE public.outbox_2010", "was dropped after this row was written"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, oids := setup(t, c.name, c.publication, c.ddl)
			ids, stop := run(t, cfg, func(ids []string) bool { return len(ids) > 1 })
			var bad *decode.Error
			if !errors.As(stop, &bad) {
				t.Fatalf("Run = %v with %q published, want a stop at row b of the partition no longer attached", stop, ids)
			}
			for _, s := range []string{"table public.outbox_2010", "OID " + oids["outbox_2010"], "event id b", "at LSN ", c.gone,
				"docs/busy-primaries.md, Partitioned outbox tables"} {
				if !strings.Contains(stop.Error(), s) {
					t.Errorf("the stop %q does not say %q", stop, s)
				}
			}
			// Everything before the row, and nothing after it.
			if want := []string{"a"}; strings.Join(ids, ",") != strings.Join(want, ",") {
				t.Errorf("published %q, want %q", ids, want)
			}
		})
	}
	t.Run("dropped, dead-lettered", func(t *testing.T) {
		// The rows of a dropped partition go to the dead-letter topic
		// whole, and everything after them is published.
		cfg, oids := setup(t, "deadletter", "FOR TABLE public.outbox", "DROP TABLE public.outbox_2010")
		cfg.DeadLetterTopic = "deadletter.dlq"
		var dead []testenv.Record
		ids, stop := run(t, cfg, func([]string) bool {
			var err error
			if dead, err = testenv.ReadRecords(context.Background(), broker, cfg.DeadLetterTopic); err != nil {
				t.Fatal(err)
			}
			return len(dead) > 1
		})
		if stop != nil || strings.Join(ids, ",") != "a,c" {
			t.Fatalf("Run = %v with %q published, want a and c published, streaming on", stop, ids)
		}
		if len(dead) != 2 {
			t.Fatalf("%d dead letters, want b and d", len(dead))
		}
		for i, id := range []string{"b", "d"} {
			r := dead[i]
			if r.Key != "o-1" || r.Value != `{"id": "`+id+`"}` || !strings.Contains(r.Headers, "id="+id+",") ||
				!strings.Contains(r.Headers, "walstream.source.table=public.outbox_2010") || !strings.Contains(r.Headers, "(OID "+oids["outbox_2010"]+") was dropped") {
				t.Errorf("dead letter %d: %+v, want row %s of public.outbox_2010 with its key, payload and why", i, r, id)
			}
		}
	})
	t.Run("wider publication", func(t *testing.T) {
		// FOR ALL TABLES, as Debezium makes its publication: audit fits the
		// mapping but is a table of the publication, and a table dropped
		// with its rows in flight fits no mapping.
		cfg, _ := setup(t, "wider", "FOR ALL TABLES", `CREATE TABLE public.scratch (n int);
			INSERT INTO public.scratch VALUES (1);
			DROP TABLE public.scratch`)
		ids, stop := run(t, cfg, func(ids []string) bool { return len(ids) > 3 })
		if stop != nil {
			t.Fatalf("Run = %v, want it streaming past the other tables' rows", stop)
		}
		if want := []string{"a", "b", "c", "d"}; strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("published %q, want the outbox's rows %q, each once, and no other table's", ids, want)
		}
	})
}
