package main

import (
	"strings"
	"testing"
)

// badRows are outbox rows walstream cannot publish as they are, with what
// the error must name.
var badRows = []struct {
	name  string
	setup string // SQL run before walstream starts
	row   string // SQL inserting the bad row
	args  []string
	want  []string
}{
	{"null aggregatetype", "ALTER TABLE outbox ALTER COLUMN aggregatetype DROP NOT NULL",
		`INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000b1', NULL, 'a', 'T', '{}')`, nil,
		[]string{"event id 00000000-0000-0000-0000-0000000000b1", "column aggregatetype", "no topic can be derived"}},
	{"topic Kafka rejects", "",
		`INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000b5', 'Bad Type!', 'a', 'T', '{}')`, nil,
		[]string{"event id 00000000-0000-0000-0000-0000000000b5", `topic name "outbox.event.Bad Type!"`, "ASCII letters"}},
	{"record over --max-record-bytes", "",
		`INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000b6', 'Order', 'a', 'T', jsonb_build_object('pad', repeat('x', 3000)))`,
		[]string{"--max-record-bytes", "2000"},
		[]string{"event id 00000000-0000-0000-0000-0000000000b6", "over the 2000 bytes allowed"}},
	// Random hex, so that even compressed it exceeds the broker's 1 MB.
	{"record over the broker's max.message.bytes", "",
		`INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000b7', 'Order', 'a', 'T',
			jsonb_build_object('pad', (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 80000))))`,
		[]string{"--max-record-bytes", "4000000"},
		[]string{"event id 00000000-0000-0000-0000-0000000000b7", "topic outbox.event.Order", "MESSAGE_TOO_LARGE"}},
	{"column renamed mid-stream", "",
		`ALTER TABLE outbox RENAME COLUMN aggregateid TO aggregate_id;
		 INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000b8', 'Order', 'a', 'T', '{}')`, nil,
		[]string{"table public.outbox", "column aggregateid", "outbox column is missing"}},
	{"column dropped mid-stream", "",
		`ALTER TABLE outbox DROP COLUMN payload;
		 INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000b9', 'Order', 'a', 'T')`, nil,
		[]string{"table public.outbox", "column payload", "outbox column is missing"}},
}

// TestBadInputFails: with --on-error=fail (the default) each bad row stops
// walstream with an error naming the LSN and what is wrong, the slot does
// not confirm the bad row's transaction, and a restart stops there again.
func TestBadInputFails(t *testing.T) {
	t.Parallel()
	for _, tc := range badRows {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSharedEnv(t)
			// The messages name the test's topics.
			want := make([]string, len(tc.want))
			for i, w := range tc.want {
				want[i] = strings.ReplaceAll(w, "outbox.event.", e.topic("outbox.event."))
			}
			if tc.setup != "" {
				e.pg.Exec("postgres", tc.setup)
			}
			p := e.start(tc.args).streaming(t)
			seq := 0
			e.delivered(p, "Order", 3, 2, &seq)
			e.pg.Exec("postgres", tc.row)
			after := e.currentLSN()
			msg := exitMessage(t, p)
			wantAll(t, msg, append([]string{"at LSN 0/"}, want...)...)
			// The slot may confirm a keepalive position inside the bad
			// transaction (Postgres resends transactions committing after
			// it), never its end.
			if got := e.confirmedLSN("walstream"); got >= after {
				t.Fatalf("confirmed_flush_lsn %s reached %s, past a row that was not delivered", got, after)
			}
			// A restart stops at the same row: nothing is skipped silently.
			wantAll(t, exitMessage(t, e.start(tc.args)), want...)
		})
	}
}

// TestBadInputDeadLetter: with --on-error=dead-letter each bad row goes to
// the DLQ topic with its reason, source LSN and event id, in the same
// Kafka transaction as the good rows around it, and streaming goes on. A
// NULL payload is not bad: it is published with a null value, as Debezium
// does.
func TestBadInputDeadLetter(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "ALTER TABLE outbox ALTER COLUMN aggregatetype DROP NOT NULL, ALTER COLUMN payload DROP NOT NULL")
	p := e.start([]string{"--on-error", "dead-letter", "--max-record-bytes", "2000"}).streaming(t)
	seq := 0
	e.insertTx("Order", 3, 2, &seq, false)
	e.pg.Exec("postgres", `BEGIN;
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000d1', NULL, 'a-1', 'T', '{"seq": 1001}');
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000d2', 'Bad Type!', 'a-2', 'T', '{"seq": 1002}');
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000d3', 'Order', 'a-3', 'T', NULL);
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000d4', 'Order', 'a-4', 'T', jsonb_build_object('pad', repeat('x', 3000)));
		COMMIT`)
	e.delivered(p, "Order", 3, 2, &seq)

	dlq := e.kcat("walstream.dlq")
	want := map[string][]string{
		"00000000-0000-0000-0000-0000000000d1": {"walstream.error.reason=aggregate type is NULL", "walstream.error.column=aggregatetype"},
		"00000000-0000-0000-0000-0000000000d2": {"walstream.error.reason=no valid topic", "walstream.source.aggregatetype=Bad Type!"},
		"00000000-0000-0000-0000-0000000000d4": {"over the 2000 bytes allowed", "walstream.error.value.bytes="},
	}
	if len(dlq) != len(want) {
		t.Fatalf("%d dead letters, want %d: %+v", len(dlq), len(want), dlq)
	}
	for _, r := range dlq {
		id := between(r.Headers, "id=", ",")
		parts, ok := want[id]
		if !ok {
			t.Errorf("unexpected dead letter %q", r.Headers)
			continue
		}
		delete(want, id)
		wantAll(t, r.Headers, append(parts, "walstream.source.lsn=0/", "walstream.source.table=public.outbox")...)
	}
	// The good rows, and only they, are in their topic, once each; the
	// NULL payload's record has no value.
	good := e.readAll("Order")
	if len(good) != 7 {
		t.Fatalf("%d records in outbox.event.Order, want the 6 good rows and the NULL payload", len(good))
	}
	nulls := 0
	for _, r := range good {
		if strings.Contains(r.Headers, "id=00000000-0000-0000-0000-0000000000d3") && r.Value == "" && r.Key == "a-3" {
			nulls++
		}
	}
	if nulls != 1 {
		t.Errorf("the NULL payload was not published once with no value: %+v", good)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, to)
	return v
}

// TestInvalidUTF8 uses a SQL_ASCII database, the one kind where Postgres
// stores text that is not valid UTF-8: such an aggregate id cannot be a key
// that consumers decode as text.
func TestInvalidUTF8(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "CREATE DATABASE ascii TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'")
	e.pg.Exec("ascii", outboxDDL)
	p := e.start([]string{"--pg-url", e.pg.URL("postgres", "ascii")}).streaming(t)
	e.pg.Exec("ascii", `INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000c1', 'Order', convert_from('\xff61'::bytea, 'SQL_ASCII'), 'T', '{}')`)
	wantAll(t, exitMessage(t, p), "event id 00000000-0000-0000-0000-0000000000c1", "column aggregateid", "not valid UTF-8")
}
