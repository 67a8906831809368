package replication

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/walstream/walstream/internal/testenv"
)

var capture = flag.Bool("capture", false, "capture pgoutput frames from a real Postgres into decode/testdata")

// captureCases are the SQL scripts whose pgoutput frames decode's tests
// read. Each runs in a fresh database with the outbox table and its
// publication.
var captureCases = map[string]string{
	"basic": `BEGIN;
INSERT INTO outbox VALUES ('11111111-1111-1111-1111-111111111111', 'Order', 'o-1', 'OrderCreated', '{"seq": 1, "total": 9.5}');
INSERT INTO outbox VALUES ('22222222-2222-2222-2222-222222222222', 'Order', 'o-2', 'OrderCreated', '{"seq": 2}');
COMMIT;
INSERT INTO outbox VALUES ('33333333-3333-3333-3333-333333333333', 'Customer', 'c-1', 'CustomerMoved', '{"seq": 3, "city": "Zürich"}');`,
	"multirow": `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
SELECT ('00000000-0000-0000-0000-' || lpad(i::text, 12, '0'))::uuid, 'Order', 'o-' || (i % 3), 'Created', jsonb_build_object('seq', i)
FROM generate_series(1, 5) i;`,
	"insert-delete-update": `BEGIN;
INSERT INTO outbox VALUES ('44444444-4444-4444-4444-444444444444', 'Order', 'o-4', 'Created', '{"seq": 4}');
DELETE FROM outbox WHERE id = '44444444-4444-4444-4444-444444444444';
INSERT INTO outbox VALUES ('55555555-5555-5555-5555-555555555555', 'Order', 'o-5', 'Created', '{"seq": 5}');
UPDATE outbox SET type = 'Changed' WHERE id = '55555555-5555-5555-5555-555555555555';
COMMIT;`,
	"other-table-and-messages": `BEGIN;
INSERT INTO audit VALUES (1, 'not an outbox row');
SELECT pg_logical_emit_message(true, 'walstream', '{"hello": 1}');
INSERT INTO outbox VALUES ('66666666-6666-6666-6666-666666666666', 'Order', 'o-6', 'Created', '{"seq": 6}');
COMMIT;
SELECT pg_logical_emit_message(false, 'other', 'x');`,
	"null-aggregatetype": `INSERT INTO outbox VALUES ('77777777-7777-7777-7777-777777777777', NULL, 'o-7', 'Created', '{"seq": 7}');`,
	"null-type-column":   `INSERT INTO outbox VALUES ('88888888-8888-8888-8888-888888888888', 'Order', 'o-8', NULL, '{"seq": 8}');`,
	"logical-message": `BEGIN;
INSERT INTO outbox VALUES ('99999999-9999-9999-9999-999999999999', 'Order', 'o-9', 'OrderPlaced', '{"seq": 9}');
SELECT pg_logical_emit_message(true, 'walstream', '{"id": "m-1", "aggregatetype": "Order", "aggregateid": "o-9", "type": "OrderShipped", "payload": {"carrier": "DHL", "seq": 10}, "headers": {"x-source": "shipping"}}');
SELECT pg_logical_emit_message(true, 'walstream', '{"id": "m-2", "aggregatetype": "Note", "aggregateid": "n-1", "type": "Text", "payload": "plain \"text\""}');
COMMIT;
SELECT pg_logical_emit_message(false, 'walstream', '{"id": "m-3", "aggregatetype": "Order", "aggregateid": "o-9", "payload": {}}');`,
	"tracing": `ALTER TABLE outbox ADD COLUMN tracingspancontext text;
INSERT INTO outbox VALUES ('aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa', 'Order', 'o-10', 'OrderPlaced', '{"seq": 11}',
  E'#Thu Nov 23 2026\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n');`,
	"additional-fields": `ALTER TABLE outbox ADD COLUMN shard int, ADD COLUMN created_at timestamptz, ADD COLUMN occurred_at timestamp,
  ADD COLUMN urgent boolean, ADD COLUMN note text;
INSERT INTO outbox VALUES ('cccccccc-cccc-cccc-cccc-cccccccccccc', 'Order', 'o-11', 'OrderPlaced', '{"seq": 12}',
  2, '2026-11-23 07:00:00.123456+01', '2026-11-23 06:00:01', true, E'two\nlines "quoted"');
INSERT INTO outbox VALUES ('dddddddd-dddd-dddd-dddd-dddddddddddd', 'Order', 'o-12', 'OrderPaid', '{"seq": 13}',
  NULL, NULL, NULL, NULL, NULL);`,
	"several-tables": `CREATE SCHEMA orders;
CREATE SCHEMA billing;
CREATE TABLE orders.outbox (LIKE outbox);
CREATE TABLE billing.outbox (event_id text PRIMARY KEY, kind text, invoice_id text, body text);
ALTER PUBLICATION walstream_outbox ADD TABLE orders.outbox, billing.outbox;
BEGIN;
INSERT INTO orders.outbox VALUES ('eeeeeeee-eeee-eeee-eeee-eeeeeeeeeeee', 'Order', 'o-20', 'OrderPlaced', '{"seq": 20}');
INSERT INTO billing.outbox VALUES ('inv-evt-1', 'Invoice', 'inv-1', 'invoice for o-20');
INSERT INTO outbox VALUES ('ffffffff-ffff-ffff-ffff-ffffffffffff', 'Order', 'o-21', 'NotAnOutboxHere', '{"seq": 21}');
COMMIT;`,
	"debezium-types": `CREATE SCHEMA dbz;
CREATE TABLE dbz.outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid bigint NOT NULL, type text, payload jsonb,
  amount numeric(10,2) DEFAULT 12.5, ratio double precision, status text DEFAULT 'pending', attempts int DEFAULT 3,
  urgent boolean DEFAULT true, note text);
CREATE TABLE dbz.textbox (id text PRIMARY KEY, aggregatetype text, aggregateid integer, payload text DEFAULT 'none');
ALTER PUBLICATION walstream_outbox ADD TABLE dbz.outbox, dbz.textbox;
BEGIN;
INSERT INTO dbz.outbox VALUES ('d0000000-0000-0000-0000-000000000001', 'Order', 4711, 'Placed',
  '{"seq": 1, "price": 10.50, "big": 12345678.9, "none": null, "tags": [], "nested": {"a": null, "b": [1, 2]}, "small": 0.001, "long": 3000000000}',
  1234.50, 0.1, NULL, NULL, NULL, 'n');
INSERT INTO dbz.outbox (id, aggregatetype, aggregateid, type, payload, ratio) VALUES ('d0000000-0000-0000-0000-000000000002', 'Order', -5, 'Deleted', NULL, 1e7);
INSERT INTO dbz.outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('d0000000-0000-0000-0000-000000000003', '', 9, 'Empty', '{"items": [{"n": 1}, {"n": 2}], "mixed": [1, "a"]}');
COMMIT;
BEGIN;
INSERT INTO dbz.textbox VALUES ('t-1', 'Text', 1, '   ');
INSERT INTO dbz.textbox VALUES ('t-2', 'Text', 2, E'\x01\t');
INSERT INTO dbz.textbox VALUES ('t-3', 'Text', 3, U&'\00A0');
INSERT INTO dbz.textbox VALUES ('t-4', 'Text', 4, U&'\3000');
INSERT INTO dbz.textbox VALUES ('t-5', 'Text', 5, U&'\0085');
INSERT INTO dbz.textbox VALUES ('t-6', 'Text', 6, NULL);
COMMIT;`,
	"bytea-payload": `CREATE TABLE bin.outbox (id text PRIMARY KEY, aggregatetype text, aggregateid text, payload bytea);
ALTER PUBLICATION walstream_outbox ADD TABLE bin.outbox;
INSERT INTO bin.outbox VALUES ('b-1', 'Blob', 'k-1', '\x00ff10'::bytea);`,
}

// streamCaptureCases are the cases whose frames come with streaming of
// in-progress transactions on (protocol version 2), from a server whose
// logical_decoding_work_mem is 64kB, so that a few hundred rows are
// streamed: each is SQL for several sessions, run one statement at a time
// in the order given, so that transactions interleave.
var streamCaptureCases = map[string][]sessionSQL{
	// Two outbox transactions streamed interleaved; one rolls back a
	// subtransaction, the other aborts whole; a plain transaction and a
	// large transaction on another table commit in between.
	"streamed": {
		{0, "BEGIN"}, {1, "BEGIN"},
		{0, bulk("a", 1, 400)},
		{1, bulk("b", 1, 400)},
		{0, "SAVEPOINT s"},
		{0, bulk("a-discarded", 1, 300)},
		{2, "INSERT INTO outbox VALUES ('c0000000-0000-0000-0000-000000000001', 'Order', 'c', 'Plain', '{\"seq\": 1}')"},
		{0, "ROLLBACK TO SAVEPOINT s"},
		{1, bulk("b", 401, 800)},
		{2, "CREATE TABLE big (x text)"},
		{2, "INSERT INTO big SELECT repeat('x', 200) FROM generate_series(1, 2000)"},
		{0, bulk("a", 401, 405)},
		{1, "ROLLBACK"},
		{0, "COMMIT"},
	},
	// A transaction that rolls its first rows back to a savepoint before
	// it goes on.
	"streamed-subabort": {
		{0, "BEGIN"},
		{0, "SAVEPOINT s"},
		{0, bulk("d-discarded", 1, 300)},
		{0, "ROLLBACK TO SAVEPOINT s"},
		{0, bulk("d", 1, 300)},
		{0, "COMMIT"},
	},
}

// sessionSQL is one statement and the session (0, 1, 2) that runs it.
type sessionSQL struct {
	session int
	sql     string
}

// bulk inserts outbox rows first..last of aggregate agg, each with a
// payload of about 250 bytes.
func bulk(agg string, first, last int) string {
	return fmt.Sprintf(`INSERT INTO outbox SELECT ('00000000-0000-0000-%04x-' || lpad(i::text, 12, '0'))::uuid, 'Order', '%s', 'Created',
  jsonb_build_object('seq', i, 'agg', '%s', 'pad', repeat('p', 200)) FROM generate_series(%d, %d) i`, len(agg)*16+int(agg[0]), agg, agg, first, last)
}

// TestCaptureFrames regenerates decode/testdata/*/frames.txt:
//
//	go test ./replication -run TestCaptureFrames -capture
//
// Each line is the WAL start of a pgoutput message and its bytes in hex.
func TestCaptureFrames(t *testing.T) {
	if !*capture {
		t.Skip("run with -capture to regenerate decode/testdata frames")
	}
	pg := testenv.StartPostgres(t, testenv.Settings("logical_decoding_work_mem = '64kB'"))
	for name, steps := range streamCaptureCases {
		t.Run(name, func(t *testing.T) {
			db := strings.ReplaceAll(name, "-", "_")
			if _, err := connect(t, pg.URL("postgres", "postgres")).Exec(context.Background(), "CREATE DATABASE "+db); err != nil {
				t.Fatal(err)
			}
			sessions := []*pgx.Conn{connect(t, pg.URL("postgres", db)), connect(t, pg.URL("postgres", db)), connect(t, pg.URL("postgres", db))}
			exec := func(s int, sql string) {
				t.Helper()
				if _, err := sessions[s].Exec(context.Background(), sql); err != nil {
					t.Fatalf("session %d: %s: %v", s, sql, err)
				}
			}
			exec(0, `CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text NOT NULL, type text, payload jsonb NOT NULL);
CREATE PUBLICATION walstream_outbox FOR TABLE outbox WITH (publish = 'insert, update')`)
			exec(0, "SELECT pg_create_logical_replication_slot('"+db+"', 'pgoutput')")
			var script []string
			for _, st := range steps {
				exec(st.session, st.sql)
				script = append(script, fmt.Sprintf("session %d: %s", st.session, st.sql))
			}
			var end string
			if err := sessions[0].QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&end); err != nil {
				t.Fatal(err)
			}
			endLSN, _ := pglogrepl.ParseLSN(end)
			frames := captureFramesWith(t, pg.URL("postgres", db), db, endLSN, true)
			writeFrames(t, name, "# pgoutput frames captured, streaming in-progress transactions (protocol version 2), from Postgres 15 with logical_decoding_work_mem 64kB by replication.TestCaptureFrames; sessions:\n# "+
				strings.ReplaceAll(strings.Join(script, "\n"), "\n", "\n# ")+"\n", frames)
		})
	}
	for name, script := range captureCases {
		t.Run(name, func(t *testing.T) {
			db := strings.ReplaceAll(name, "-", "_")
			if _, err := connect(t, pg.URL("postgres", "postgres")).Exec(context.Background(), "CREATE DATABASE "+db); err != nil {
				t.Fatal(err)
			}
			conn := connect(t, pg.URL("postgres", db))
			exec := execOn(t, conn)
			exec(`CREATE SCHEMA bin;
CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text NOT NULL, type text, payload jsonb NOT NULL);
CREATE TABLE audit (n int, note text);
CREATE PUBLICATION walstream_outbox FOR TABLE outbox, audit WITH (publish = 'insert, update, delete')`)
			exec("SELECT pg_create_logical_replication_slot('" + db + "', 'pgoutput')")
			exec(script)
			var end string
			if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&end); err != nil {
				t.Fatal(err)
			}
			endLSN, _ := pglogrepl.ParseLSN(end)
			frames := captureFramesWith(t, pg.URL("postgres", db), db, endLSN, false)
			writeFrames(t, name, "# pgoutput frames captured from Postgres 15 by replication.TestCaptureFrames; script:\n# "+
				strings.ReplaceAll(script, "\n", "\n# ")+"\n", frames)
			dir := filepath.Join("..", "decode", "testdata", name)
			if err := os.WriteFile(filepath.Join(dir, "catalog.txt"), []byte(captureCatalog(t, conn)), 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// captureCatalog writes what DescribeTables reads of each published
// table's columns: one line per column, table, column, NOT NULL and
// default, tab-separated.
func captureCatalog(t *testing.T, conn *pgx.Conn) string {
	rows, err := conn.Query(context.Background(), "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = 'walstream_outbox' ORDER BY 1, 2")
	if err != nil {
		t.Fatal(err)
	}
	var tables []Table
	var tb Table
	if _, err := pgx.ForEachRow(rows, []any{&tb.Schema, &tb.Name}, func() error { tables = append(tables, tb); return nil }); err != nil {
		t.Fatal(err)
	}
	infos, err := DescribeTables(context.Background(), conn, Names{Publication: "walstream_outbox", Tables: tables})
	if err != nil {
		t.Fatal(err)
	}
	out := "# the catalog of the published tables, read by replication.DescribeTables: table, column, NOT NULL, default\n"
	for _, info := range infos {
		cols := slices.SortedFunc(slices.Values(info.Columns), func(a, b Column) int { return strings.Compare(a.Name, b.Name) })
		for _, c := range cols {
			out += fmt.Sprintf("%s\t%s\t%v\t%s\n", info.Table, c.Name, c.NotNull, c.Default)
		}
	}
	return out
}

// writeFrames writes decode/testdata/<name>/frames.txt: the header, then
// the frames.
func writeFrames(t *testing.T, name, header string, frames []string) {
	t.Helper()
	dir := filepath.Join("..", "decode", "testdata", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "frames.txt"), []byte(header+strings.Join(frames, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// captureFramesWith receives the slot's frames up to end, with streaming
// of in-progress transactions when stream is set.
func captureFramesWith(t *testing.T, url, slot string, end pglogrepl.LSN, stream bool) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	args := []string{"proto_version '1'", "publication_names 'walstream_outbox'", "messages 'true'"}
	if stream {
		args = []string{"proto_version '2'", "publication_names 'walstream_outbox'", "messages 'true'", "streaming 'on'"}
	}
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	var frames []string
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			t.Fatalf("unexpected %T", msg)
		}
		switch cd.Data[0] {
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, fmt.Sprintf("%s %s", x.WALStart, hex.EncodeToString(x.WALData)))
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				t.Fatal(err)
			}
			if ka.ServerWALEnd >= end {
				return frames
			}
		}
	}
}
