package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/internal/testenv"
)

// tableOID is the outbox table's pg_class OID now.
func (e *env) tableOID() int64 { return e.sqlInt("SELECT 'public.outbox'::regclass::oid::bigint") }

// TestTableRecreated: the outbox table dropped and created again, and
// added to the publication in a later transaction: Postgres never sends
// the rows committed in between. walstream stops at the new table's first
// row, naming the table, both OIDs and the LSN, confirms nothing past it,
// stops again at startup (the checkpoint recorded the old OID), and goes
// on once the new table is accepted.
func TestTableRecreated(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	// A slow slot monitor: the stream, not the poll, must find it.
	p := e.start([]string{"--slot-poll-interval", "1h"}).streaming(t)
	seq := 0
	e.delivered(p, "Order", 4, 2, &seq)
	oldOID := e.tableOID()
	e.pg.Exec("postgres", "DROP TABLE outbox")
	e.pg.Exec("postgres", outboxDDL)
	newOID := e.tableOID()
	lost := 100
	e.insertTx("Lost", 3, 1, &lost, false) // never sent by Postgres
	e.pg.Exec("postgres", "ALTER PUBLICATION walstream_outbox ADD TABLE outbox")
	e.insertTx("Order", 2, 2, &seq, false)
	after := e.currentLSN()

	msg := exitMessage(t, p)
	t.Logf("stop: %s", msg)
	wantAll(t, msg, "table public.outbox was dropped and recreated", fmt.Sprintf("OID %d, now %d", oldOID, newOID),
		"in the stream at LSN 0/", "in one transaction", fmt.Sprintf("--accept-recreated-table public.outbox=%d", newOID))
	if got := e.confirmedLSN("walstream"); got >= after {
		t.Fatalf("confirmed_flush_lsn %s reached %s, past rows that were not delivered", got, after)
	}
	// The checkpoint recorded the old table: a restart stops before
	// streaming.
	wantAll(t, exitMessage(t, e.start(nil)), "found in the catalog at startup", fmt.Sprintf("OID %d, now %d", oldOID, newOID))

	goesOnAccepted(e, newOID, &seq, 8) // the 4 before the drop and the 4 after the table was added
}

// TestTableDroppedWhileStopped: the outbox table dropped while walstream
// is stopped, and walstream started before the table is back, as a
// supervisor would restart it. The checkpoint recorded the table's OID, so
// the stop names the gap: the table, its OID and the checkpoint; then,
// with the table created again but not yet in the publication, the
// recreated table. Nothing is confirmed meanwhile. A first start without
// a checkpoint only says the table is missing.
func TestTableDroppedWhileStopped(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "DROP TABLE outbox")
	msg := exitMessage(t, e.start(nil))
	wantAll(t, msg, `table "public"."outbox": does not exist; create it, and add it to the publication in the same transaction`)
	if strings.Contains(msg, "dropped") {
		t.Errorf("a first start names a drop: %s", msg)
	}
	e.pg.Exec("postgres", outboxDDL)

	seq := 0
	e.deliveredStopped("Order", 4, 2, &seq)
	cp, record := e.lastCheckpoint()
	oldOID := e.tableOID()
	if cp.Notes == nil || int64(cp.Notes.Tables["public.outbox"]) != oldOID {
		t.Fatalf("last checkpoint %s does not record public.outbox as OID %d", record, oldOID)
	}
	confirmed := e.confirmedLSN("walstream")

	e.pg.Exec("postgres", "DROP TABLE outbox")
	msg = exitMessage(t, e.start(nil))
	t.Logf("stop: %s", msg)
	wantAll(t, msg, `table "public"."outbox": was dropped after checkpoint `+cp.String()+fmt.Sprintf(" (OID %d)", oldOID),
		`before it is added to publication "walstream_outbox" are never sent`, "see docs/postgres.md, A recreated outbox table", "in one transaction")
	if got := e.confirmedLSN("walstream"); got != confirmed {
		t.Fatalf("confirmed_flush_lsn moved from %s to %s", confirmed, got)
	}

	// Created again, the way that loses rows: not yet in the publication.
	e.pg.Exec("postgres", outboxDDL)
	newOID := e.tableOID()
	lost := 100
	e.insertTx("Lost", 3, 1, &lost, false)
	msg = exitMessage(t, e.start(nil))
	t.Logf("stop: %s", msg)
	wantAll(t, msg, "table public.outbox was dropped and recreated", fmt.Sprintf("OID %d, now %d", oldOID, newOID),
		"in the catalog at startup, after checkpoint "+cp.String(), fmt.Sprintf("--accept-recreated-table public.outbox=%d", newOID))
	if got := e.confirmedLSN("walstream"); got != confirmed {
		t.Fatalf("confirmed_flush_lsn moved from %s to %s", confirmed, got)
	}

	// The operator's way on: add the table, accept it. The acceptance is
	// logged once.
	e.pg.Exec("postgres", "ALTER PUBLICATION walstream_outbox ADD TABLE outbox")
	p := e.start([]string{"--accept-recreated-table", fmt.Sprintf("public.outbox=%d", newOID)}).streaming(t)
	if n := strings.Count(p.Log(), "recreated since the checkpoint: accepted"); n != 1 {
		t.Errorf("the acceptance was logged %d times, want once", n)
	}
	e.delivered(p, "Order", 2, 2, &seq)
	if got := len(e.readAll("Order")); got != 6 {
		t.Fatalf("%d records, want the 4 before the drop and the 2 after the table was added", got)
	}
}

// TestTableRecreatedIdle: dropped, created and added again in one
// transaction, with no row after it: no row flows to show it, and the slot
// monitor, which reads the table's OID at each poll, stops walstream.
func TestTableRecreatedIdle(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	p := e.start([]string{"--slot-poll-interval", "200ms"}).streaming(t)
	oldOID := e.tableOID()
	e.pg.Exec("postgres", "BEGIN; DROP TABLE outbox; "+outboxDDL+"; ALTER PUBLICATION walstream_outbox ADD TABLE outbox; COMMIT")
	wantAll(t, exitMessage(t, p), `table "public"."outbox"`, fmt.Sprintf("was dropped and recreated while streaming (OID %d, now %d)", oldOID, e.tableOID()))
}

// TestTableRecreatedSchemaPublication: with a publication FOR TABLES IN
// SCHEMA, a recreated table is in it from its CREATE TABLE on, no row is
// lost, and walstream goes on.
func TestTableRecreatedSchemaPublication(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "CREATE PUBLICATION walstream_outbox FOR TABLES IN SCHEMA public "+publicationOptions("insert, update"))
	p := e.start([]string{"--slot-poll-interval", "200ms"}).streaming(t)
	seq := 0
	e.insertTx("Order", 3, 1, &seq, false)
	// In one transaction, so that the slot monitor never finds the table
	// missing; no ALTER PUBLICATION is needed.
	e.pg.Exec("postgres", "BEGIN; DROP TABLE outbox; "+outboxDDL+"; COMMIT")
	e.delivered(p, "Order", 3, 1, &seq)
	if got := len(e.readAll("Order")); got != 6 {
		t.Fatalf("%d records, want 6", got)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestFirstStuckRow: a row only publishing finds bad (a topic Kafka
// rejects) committed before a row decoding finds bad (a NULL aggregate
// type): the stop names the first, where the stream is stuck.
func TestFirstStuckRow(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "ALTER TABLE outbox ALTER COLUMN aggregatetype DROP NOT NULL")
	p := e.start(nil).streaming(t)
	seq := 0
	e.delivered(p, "Order", 3, 2, &seq)
	before := e.currentLSN()
	e.pg.Exec("postgres", `INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000f1', 'Bad Type!', 'a', 'T', '{}')`)
	e.pg.Exec("postgres", `INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000f2', NULL, 'a', 'T', '{}')`)
	msg := exitMessage(t, p)
	t.Logf("stop: %s", msg)
	wantAll(t, msg, "at LSN 0/", "table public.outbox", "event id 00000000-0000-0000-0000-0000000000f1", "no valid topic", "--skip-event")
	if strings.Contains(msg, "0000000000f2") {
		t.Errorf("message %q names the later row", msg)
	}
	if got := e.confirmedLSN("walstream"); got > before {
		t.Fatalf("confirmed_flush_lsn %s passed %s, the first undelivered row", got, before)
	}
	wantAll(t, exitMessage(t, e.start(nil)), "event id 00000000-0000-0000-0000-0000000000f1")
}

// TestMappingCheckedAtStartup: a mapping the table cannot satisfy stops
// walstream at startup, with no row in the outbox, naming the table and
// the column; a required column renamed while the outbox is idle stops it
// at the next slot poll.
func TestMappingCheckedAtStartup(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--timestamp-column", "created_at"}, []string{"column created_at", "timestamp column"}},
		{[]string{"--route-by-column", "kind"}, []string{"column kind", "outbox column is missing"}},
		{[]string{"--additional-placement", "tenant:header"}, []string{"column tenant", "additional column"}},
	} {
		msg := exitMessage(t, e.start(tc.args))
		t.Logf("stop: %s", msg)
		wantAll(t, msg, append([]string{"checking table public.outbox", "at startup", "table public.outbox"}, tc.want...)...)
		if strings.Contains(msg, "LSN 0/0") {
			t.Errorf("message %q names LSN 0/0", msg)
		}
	}
	p := e.start([]string{"--slot-poll-interval", "200ms"}).streaming(t)
	e.pg.Exec("postgres", "ALTER TABLE outbox RENAME COLUMN aggregateid TO aggregate_id")
	wantAll(t, exitMessage(t, p), "while streaming", "column aggregateid", "outbox column is missing")
}

var skipHint = regexp.MustCompile(`--skip-event ([0-9A-F]+/[0-9A-F]+:[0-9]+)`)

// TestSkipEvent: the stop message names the event; restarted with
// --skip-event naming it, walstream sends that one row to the DLQ with its
// reason, records the skip in the checkpoint and the log, publishes the
// rows around it, and stops again at the next bad row.
func TestSkipEvent(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "ALTER TABLE outbox ALTER COLUMN aggregatetype DROP NOT NULL")
	p := e.start(nil).streaming(t)
	seq := 0
	e.insertTx("Order", 3, 2, &seq, false)
	e.pg.Exec("postgres", `BEGIN;
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000e0', 'Order', 'a', 'T', '{"seq": 100}');
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000e1', NULL, 'a', 'T', '{"seq": 101}');
		INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000e2', 'Order', 'a', 'T', '{"seq": 102}');
		COMMIT`)
	e.insertTx("Order", 3, 2, &seq, false)
	msg := exitMessage(t, p)
	wantAll(t, msg, "event id 00000000-0000-0000-0000-0000000000e1", "column aggregatetype")
	m := skipHint.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("message %q names no --skip-event", msg)
	}
	ref := m[1]

	p = e.start([]string{"--skip-event", ref}).streaming(t)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	wantAll(t, p.Log(), "skipping the event named to skip", "event="+ref, "event_id=00000000-0000-0000-0000-0000000000e1")
	dlq := e.kcat("walstream.dlq")
	if len(dlq) != 1 || !strings.Contains(dlq[0].Headers, "id=00000000-0000-0000-0000-0000000000e1") ||
		!strings.Contains(dlq[0].Headers, "aggregate type is NULL") {
		t.Fatalf("dead letters %+v, want the one skipped row with its reason", dlq)
	}
	if got := len(e.readAll("Order")); got != 8 {
		t.Fatalf("%d records, want the 8 good rows", got)
	}
	cps := e.kcat("walstream.checkpoints")
	if last := cps[len(cps)-1].Value; !strings.Contains(last, `"skipped":{"event":"`+ref+`"`) || !strings.Contains(last, `"tables":{"public.outbox":`) {
		t.Fatalf("last checkpoint %s does not record the skip and the table", last)
	}
	// Nothing else is skipped: the next bad row stops walstream.
	e.pg.Exec("postgres", `INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000e3', NULL, 'a', 'T', '{"seq": 103}')`)
	wantAll(t, exitMessage(t, p), "event id 00000000-0000-0000-0000-0000000000e3")
}

// TestSkipNonTransactionalMessage: pg_logical_emit_message(false, ...)
// reaches walstream outside any transaction, so it cannot be published
// exactly once; the stop names it by its LSN and ordinal 0, and
// --skip-event sends it to the DLQ and goes on past it.
func TestSkipNonTransactionalMessage(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	p := e.start(nil).streaming(t)
	seq := 0
	e.insertTx("Order", 2, 1, &seq, false)
	e.pg.Exec("postgres", `SELECT pg_logical_emit_message(false, 'walstream', '{"id": "m-1", "aggregatetype": "Order", "aggregateid": "o-1", "payload": {}}')`)
	after := e.currentLSN()
	e.insertTx("Order", 2, 1, &seq, false)
	msg := exitMessage(t, p)
	t.Logf("stop: %s", msg)
	wantAll(t, msg, "logical message walstream", "event id m-1", "is not transactional", "pg_logical_emit_message(true")
	m := skipHint.FindStringSubmatch(msg)
	if m == nil || !strings.HasSuffix(m[1], ":0") {
		t.Fatalf("message %q names no --skip-event with ordinal 0", msg)
	}
	if got := e.confirmedLSN("walstream"); got >= after {
		t.Fatalf("confirmed_flush_lsn %s passed %s, an undelivered message", got, after)
	}
	p = e.start([]string{"--skip-event", m[1]}).streaming(t)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	if dlq := e.kcat("walstream.dlq"); len(dlq) != 1 || !strings.Contains(dlq[0].Headers, "id=m-1") {
		t.Fatalf("dead letters %+v, want the message", dlq)
	}
	if got := len(e.readAll("Order")); got != 4 {
		t.Fatalf("%d records, want the 4 rows", got)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestInvalidUTF8PayloadJSON: in a SQL_ASCII database a text payload may
// hold bytes that are not UTF-8; under the JSON converter, with or without
// expand, that row is bad input, never malformed JSON.
func TestInvalidUTF8PayloadJSON(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	e.pg.Exec("postgres", "CREATE DATABASE ascii TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'")
	e.pg.Exec("ascii", strings.Replace(outboxDDL, "payload jsonb", "payload text", 1))
	for i, args := range [][]string{{"--converter", "json"}, {"--converter", "json", "--expand-json-payload"}} {
		p := e.start(append([]string{"--pg-url", e.pg.URL("postgres", "ascii")}, args...)).streaming(t)
		id := fmt.Sprintf("00000000-0000-0000-0000-0000000000c%d", i)
		// {"a":"<0xff>"}
		e.pg.Exec("ascii", `INSERT INTO outbox VALUES ('`+id+`', 'Order', 'a', 'T', convert_from('\x7b2261223a22ff227d'::bytea, 'SQL_ASCII'))`)
		after := e.currentLSN()
		wantAll(t, exitMessage(t, p), "event id "+id, "column payload", "not valid UTF-8")
		if got := e.confirmedLSN("walstream"); got >= after {
			t.Fatalf("confirmed_flush_lsn %s passed %s, an undelivered row", got, after)
		}
		if i == 0 {
			// Past it for the next case, the way an operator would.
			p = e.start([]string{"--pg-url", e.pg.URL("postgres", "ascii"), "--skip-event", skipHint.FindStringSubmatch(p.Log())[1]}).streaming(t)
			e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestTableLeftPublicationWhileStopped: the outbox table removed from the
// publication while walstream is stopped, rows committed, and the table
// added again before the next start. Postgres never sends those rows; the
// checkpoint recorded the publication's entry for the table, so the start
// stops naming the table, both entries and the checkpoint, confirming
// nothing, until the operator accepts the table by its OID.
func TestTableLeftPublicationWhileStopped(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	seq := 0
	e.deliveredStopped("Order", 3, 1, &seq)
	cp, record := e.lastCheckpoint()
	if cp.Notes == nil || len(cp.Notes.Entries["public.outbox"]) == 0 {
		t.Fatalf("last checkpoint %s records no publication entry for public.outbox", record)
	}
	confirmed := e.confirmedLSN("walstream")

	e.pg.Exec("postgres", "ALTER PUBLICATION walstream_outbox DROP TABLE outbox")
	lost := 100
	e.insertTx("Lost", 2, 1, &lost, false) // never sent by Postgres
	e.pg.Exec("postgres", "ALTER PUBLICATION walstream_outbox ADD TABLE outbox")
	oid := e.tableOID()
	msg := exitMessage(t, e.start(nil))
	t.Logf("stop: %s", msg)
	wantAll(t, msg, fmt.Sprintf("table public.outbox (OID %d) left publication \"walstream_outbox\" and came back after checkpoint %s", oid, cp),
		fmt.Sprintf("its entries in the publication %v, now", cp.Notes.Entries["public.outbox"]), "never sent the rows committed to it while it was out",
		"A table out of the publication", fmt.Sprintf("--accept-recreated-table public.outbox=%d", oid))
	if got := e.confirmedLSN("walstream"); got != confirmed {
		t.Fatalf("confirmed_flush_lsn moved from %s to %s", confirmed, got)
	}

	goesOnAccepted(e, oid, &seq, 5) // the 3 before and the 2 after
}

// goesOnAccepted starts walstream accepting the outbox table as OID oid,
// delivers two rows and wants Kafka to hold want Order records; the
// checkpoint then records what was accepted, so the start after goes on
// without the flag.
func goesOnAccepted(e *env, oid int64, seq *int, want int) {
	e.t.Helper()
	p := e.start([]string{"--accept-recreated-table", fmt.Sprintf("public.outbox=%d", oid)}).streaming(e.t)
	e.delivered(p, "Order", 2, 2, seq)
	if got := len(e.readAll("Order")); got != want {
		e.t.Fatalf("%d Order records once accepted, want %d", got, want)
	}
	if err := p.stop(); err != nil {
		e.t.Fatal(err)
	}
	p = e.start(nil).streaming(e.t)
	e.delivered(p, "Order", 1, 1, seq)
}

// lastCheckpoint is the last checkpoint record in the checkpoint topic,
// decoded and as it is.
func (e *env) lastCheckpoint() (checkpoint.Checkpoint, string) {
	e.t.Helper()
	cps := e.kcat("walstream.checkpoints")
	if len(cps) == 0 {
		e.t.Fatal("no checkpoint in walstream.checkpoints")
	}
	record := cps[len(cps)-1].Value
	cp, _, err := checkpoint.Decode([]byte(record))
	if err != nil {
		e.t.Fatal(err)
	}
	return cp, record
}

// TestPublicationDroppedWayOn: the publication dropped and created again
// while walstream is stopped, with rows committed between. The start stops
// (at the table's new entry in the publication, before the stream reaches
// the WAL where the publication was missing); docs/postgres.md's way on
// goes on: the slot advanced past the publication's creation (advanced
// again while the WAL there is not flushed yet: the harness's Postgres
// commits asynchronously), then a start accepting the slot ahead and the
// table's new entry.
func TestPublicationDroppedWayOn(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	seq := 0
	e.deliveredStopped("Order", 3, 1, &seq)
	e.pg.Exec("postgres", "DROP PUBLICATION walstream_outbox")
	lost := 100
	e.insertTx("Lost", 2, 1, &lost, false)
	e.pg.Exec("postgres", "CREATE PUBLICATION walstream_outbox FOR TABLE public.outbox WITH (publish = 'insert, update')")
	created := e.currentLSN()
	oid := e.tableOID()
	msg := exitMessage(t, e.start(nil))
	wantAll(t, msg, `left publication "walstream_outbox"`, "never sent", fmt.Sprintf("--accept-recreated-table public.outbox=%d", oid))

	conn := e.pg.Connect("postgres")
	defer conn.Close(context.Background())
	testenv.Eventually(t, 10*time.Second, "the slot advanced past the publication's creation", func() bool {
		var end pglogrepl.LSN
		if err := conn.QueryRow(context.Background(), "SELECT end_lsn FROM pg_replication_slot_advance('walstream', pg_current_wal_lsn())").Scan(&end); err != nil {
			t.Fatal(err)
		}
		return end >= created
	})
	msg = exitMessage(t, e.start([]string{"--allow-slot-ahead"}))
	wantAll(t, msg, "left publication", fmt.Sprintf("--accept-recreated-table public.outbox=%d", oid))
	p := e.start([]string{"--allow-slot-ahead", "--accept-recreated-table", fmt.Sprintf("public.outbox=%d", oid)}).streaming(t)
	e.delivered(p, "Order", 2, 1, &seq)
	if got := len(e.readAll("Order")); got != 5 {
		t.Fatalf("%d records, want the 3 before the drop and the 2 after the way on", got)
	}
}
