package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
)

// fromOffset makes the first checkpoint of a takeover, or refuses what
// would lose events, naming the slot's position and the offset.
func TestFromOffset(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	commit := now.Add(-time.Second)
	off := debezium.Offset{Connector: "outbox", Server: "dbz", LSN: 0x2000, Proc: 0x2000, Commit: 0x1800, TxID: 9, HasTxID: true,
		CommitTime: commit, MessageType: "INSERT", Raw: []byte(`{"lsn":8192}`)}
	tk := Takeover{Source: debezium.Source{Kind: debezium.SourceTopic, Topic: "connect-offsets"}, Lookback: time.Minute}
	own := checkpoint.Identity{SystemID: "7", Timeline: 1, Database: "app"}
	for _, c := range []struct {
		name           string
		off            debezium.Offset
		slot, until    pglogrepl.LSN
		allowSlotAhead bool
		want           pglogrepl.LSN // the checkpoint's LSN; 0: refused
		refusal        string
		slotAhead      bool
	}{
		{name: "slot behind the offset", off: off, slot: 0x1000, until: 0x3000, want: 0x1800},
		{name: "slot at the offset", off: off, slot: 0x1800, until: 0x3000, want: 0x1800},
		{name: "slot ahead", off: off, slot: 0x1900, until: 0x3000, refusal: "slot confirmed_flush_lsn 0/1900, Debezium's offset lsn_commit 0/1800", slotAhead: true},
		{name: "slot ahead, allowed", off: off, slot: 0x1900, until: 0x3000, allowSlotAhead: true, want: 0x1900},
		{name: "offset past the server's WAL", off: off, slot: 0x1000, until: 0x1700, refusal: "past the server's WAL flush position 0/1700"},
		{name: "no lsn_commit", off: debezium.Offset{LSN: 0x2000, Proc: 0x1F00}, slot: 0x1000, until: 0x3000, want: 0x1F00},
		{name: "a snapshot", off: debezium.Offset{Snapshot: true}, slot: 0x1000, until: 0x3000, refusal: "snapshot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp, err := fromOffset(c.off, tk, c.slot, c.until, c.allowSlotAhead, own, now)
			if c.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), c.refusal) {
					t.Fatalf("fromOffset = %s, %v; want a refusal naming %q", cp, err, c.refusal)
				}
				if errors.Is(err, ErrSlotAhead) != c.slotAhead {
					t.Errorf("errors.Is(ErrSlotAhead) = %v, want %v", !c.slotAhead, c.slotAhead)
				}
				return
			}
			if err != nil || cp.LSN != c.want || cp.Identity != own {
				t.Fatalf("fromOffset = %s (%v), %v; want %s", cp, cp.Identity, err, c.want)
			}
			tr := cp.Notes.Takeover
			if tr == nil || tr.Until != c.until || tr.Source != "kafka:connect-offsets" || string(tr.Offset) != string(c.off.Raw) || !tr.Time.Equal(now) {
				t.Fatalf("takeover = %+v", tr)
			}
			if want := c.off.CommitTime.Add(-time.Minute); !c.off.CommitTime.IsZero() && !tr.Since.Equal(want) {
				t.Errorf("Since = %s, want %s", tr.Since, want)
			}
			if c.off.CommitTime.IsZero() && !tr.Since.IsZero() {
				t.Errorf("Since = %s without a commit time, want zero: read every record", tr.Since)
			}
			if gap := cp.Gap; c.slot > c.off.Resume() && (gap.Kind != checkpoint.GapSlotAhead || gap.From != c.off.Resume() || gap.To != c.slot) {
				t.Errorf("Gap = %+v, want the slot ahead from the offset to the slot", gap)
			}
		})
	}
}

// A takeover's errors stop walstream: the operator is at hand.
func TestTakeoverErrorsArePermanent(t *testing.T) {
	for _, err := range []error{
		&TakeoverError{Slot: "s", Err: debezium.ErrNoOffset},
		&TakeoverError{Slot: "s", Err: errors.Join(ErrSlotAhead, errors.New("x"))},
	} {
		if f := classifyFailure(err); !f.permanent {
			t.Errorf("classifyFailure(%v) = %+v, want permanent", err, f)
		}
	}
	if f := classifyFailure(&TakeoverError{Err: errors.New("x")}); f.kind != kindTakeover {
		t.Errorf("kind = %s, want %s", f.kind, kindTakeover)
	}
}

// A takeover from Debezium on a table whose event ids repeat and may be
// null: refused without a unique index unless accepted; then, across a
// session that stops within the stretch Debezium may have published
// (at a bad row) and one that goes on, every row is in Kafka: each row
// with an id exactly once, one with a null id at least once.
// Debezium published the first transaction's two events, whose id and
// whose key and value come again later, and before its offset an event of
// a null id with that key and value; walstream's own x comes again too.
// The slot is not confirmed past the takeover's start until Kafka holds
// the whole stretch, so that the second session reads the stretch again
// and each event claims its record.
func TestTakeoverRepeatedIDs(t *testing.T) {
	pg := testenv.StartPostgres(t)
	broker := testenv.StartKfake(t).Addr()
	ctx := context.Background()
	conn := pg.Connect("postgres")
	pg.Exec("postgres", `CREATE TABLE public.outbox (id text, aggregatetype text, aggregateid text, type text, payload jsonb);
		CREATE PUBLICATION walstream_outbox FOR TABLE public.outbox WITH (publish = 'insert, update')`)
	pg.Exec("postgres", "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')")
	lsn := func() pglogrepl.LSN { return queryLSN(t, conn, "SELECT pg_current_wal_insert_lsn()::text") }
	slotConfirmed := func() pglogrepl.LSN {
		return queryLSN(t, conn, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'walstream'")
	}
	// Debezium published this before its offset: the lookback reads it,
	// and no event of the stretch claims it.
	pg.Exec("postgres", `INSERT INTO public.outbox VALUES (NULL, 'Order', 'k', 'Created', '"same"')`)
	offset := lsn()
	for _, rows := range []string{
		`('r', 'Order', 'o-1', 'Created', '{"n": 1}'), (NULL, 'Order', 'k', 'Created', '"same"')`, // Debezium published these
		`('x', 'Order', 'o-1', 'Created', '{"n": 2}')`,
		`('bad', NULL, 'o-1', 'Created', '{"n": 3}')`, // no aggregatetype: the first session stops here
		`('r', 'Order', 'o-1', 'Created', '{"n": 4}')`,
		`(NULL, 'Order', 'k', 'Created', '"same"')`,
		`('x', 'Order', 'o-1', 'Created', '{"n": 6}')`,
		`('r', 'Order', 'o-1', 'Created', '{"n": 7}')`,
	} {
		pg.Exec("postgres", "INSERT INTO public.outbox VALUES "+rows)
	}
	// Everything committed is flushed, and so was sent to Debezium (the
	// server may run with synchronous_commit off).
	written := lsn()
	testenv.Eventually(t, 30*time.Second, "the rows flushed", func() bool {
		var flushed bool
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn", written.String()).Scan(&flushed); err != nil {
			t.Fatal(err)
		}
		return flushed
	})
	// Debezium's records of the first transaction, as StringConverter
	// writes them, with its processing time.
	dbz, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer dbz.Close()
	if err := dbz.ProduceSync(ctx,
		&kgo.Record{Topic: "outbox.event.Order", Key: []byte("k"), Value: []byte(`"same"`), Headers: []kgo.RecordHeader{{Key: format.HeaderID}}},
		&kgo.Record{Topic: "outbox.event.Order", Key: []byte("o-1"), Value: []byte(`{"n": 1}`), Headers: []kgo.RecordHeader{{Key: format.HeaderID, Value: []byte("r")}}},
		&kgo.Record{Topic: "outbox.event.Order", Key: []byte("k"), Value: []byte(`"same"`), Headers: []kgo.RecordHeader{{Key: format.HeaderID}}},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "offsets.json")
	answer := fmt.Sprintf(`{"offsets":[{"partition":{"server":"dbz"},"offset":{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":1,"ts_usec":%d}}]}`,
		offset, offset, offset, time.Now().UnixMicro())
	if err := os.WriteFile(file, []byte(answer), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, pg, broker)
	cfg.Encoding = format.Encoding{Key: format.String, Value: format.String}
	cfg.Takeover = Takeover{Source: debezium.Source{Kind: debezium.SourceFile, Path: file}, Selector: debezium.Selector{Server: "dbz"}, Lookback: time.Minute}
	cfg.MaxBatchEvents = 1 // a Kafka transaction per event: x is in Kafka when the first session stops
	run := func(cfg Config, done func() bool) error {
		t.Helper()
		p := New(cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)), nil)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- p.Run(rctx) }()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			select {
			case err := <-errc:
				return err
			case <-time.After(100 * time.Millisecond):
			}
			if done() {
				cancel()
				return <-errc
			}
		}
		t.Fatal("Run went on for 30s")
		return nil
	}
	never := func() bool { return false }

	// No unique index on id: refused, saying how to go on.
	err = run(cfg, never)
	if !errors.Is(err, ErrRepeatedIDs) || !strings.Contains(err.Error(), `table "public"."outbox"`) || !strings.Contains(err.Error(), "CREATE UNIQUE INDEX") {
		t.Fatalf("Run = %v, want a refusal naming the table's id column without a unique index", err)
	}

	cfg.Takeover.AcceptRepeatedIDs = true
	err = run(cfg, never)
	var bad *decode.Error
	if !errors.As(err, &bad) || string(bad.Event.ID) != "bad" {
		t.Fatalf("Run = %v, want a stop at the row without aggregatetype", err)
	}
	if got := slotConfirmed(); got > offset {
		t.Fatalf("slot confirmed %s within the stretch, past the takeover's start %s", got, offset)
	}
	until := lsn()

	cfg.SkipEvent, cfg.SkipTopic = bad.Event.Ref(), "walstream.dlq"
	// Confirmed past the stretch once Kafka holds all of it.
	if err := run(cfg, func() bool { return slotConfirmed() >= until }); err != nil {
		t.Fatalf("Run = %v", err)
	}
	recs, err := testenv.ReadRecords(ctx, broker, "outbox.event.Order")
	if err != nil {
		t.Fatal(err)
	}
	ids := make(map[string]int)
	for _, r := range recs {
		ids[strings.TrimPrefix(r.Headers, "id=")]++
	}
	// Debezium's null (before its offset), r and null, walstream's x, r,
	// null, x, r: each row with an id once. An event with a null id is
	// never looked up: walstream publishes the first transaction's again,
	// and the later one, whose key and value Debezium's null records have
	// too, is not taken for one of them.
	if want := map[string]int{"r": 3, "": 4, "x": 2}; !maps.Equal(ids, want) {
		t.Fatalf("records by id %v, want %v", ids, want)
	}
}

// A takeover is refused, naming the table and column or the message
// prefix and why, when an event's id may be null (a unique index permits
// any number of nulls) or the stream takes logical messages, whose ids no
// index keeps unique; unless accepted.
func TestTakeoverRefusesUnguardedIDs(t *testing.T) {
	pg := testenv.StartPostgres(t)
	conn := pg.Connect("postgres")
	ctx := context.Background()
	cfg := testConfig(t, pg, "localhost:1")
	discard := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name, ddl, prefix string
		want              []string // in the refusal; none: accepted
	}{
		{"a unique nullable id", "id text UNIQUE", "", []string{`column id of table "public"."outbox" may be null`, "SET NOT NULL"}},
		{"a primary key", "id text PRIMARY KEY", "", nil},
		{"a unique id, not null", "id uuid UNIQUE NOT NULL", "", nil},
		{"logical messages", "id text PRIMARY KEY", "walstream", []string{`logical messages of prefix "walstream"`, "an empty message prefix"}},
	} {
		pg.Exec("postgres", "DROP TABLE IF EXISTS public.outbox; CREATE TABLE public.outbox ("+tc.ddl+", aggregatetype text, aggregateid text, type text, payload jsonb)")
		cfg.MessagePrefix, cfg.Takeover.AcceptRepeatedIDs = tc.prefix, false
		err := uniqueIDs(ctx, conn, &cfg, discard)
		if len(tc.want) == 0 && err != nil || len(tc.want) > 0 && !errors.Is(err, ErrRepeatedIDs) {
			t.Errorf("%s: uniqueIDs = %v; want refused %v", tc.name, err, len(tc.want) > 0)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
		cfg.Takeover.AcceptRepeatedIDs = true
		if err := uniqueIDs(ctx, conn, &cfg, discard); err != nil {
			t.Errorf("%s, accepted: uniqueIDs = %v", tc.name, err)
		}
	}
}

// takeOverAgain keeps the stream's checkpoint when Debezium's offset is
// at or behind it (the offset of the first takeover), or cannot be read
// (a connector deleted since), unless the slot is ahead of the
// checkpoint: then the offset's failure is said with the slot's.
func TestTakeOverAgainKeepsTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	saved := filepath.Join(dir, "offsets.json")
	if err := os.WriteFile(saved, []byte(`{"offsets":[{"partition":{"server":"dbz"},"offset":{"lsn":6144,"lsn_proc":6144,"lsn_commit":6144,"ts_usec":1}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Names: replication.Names{Slot: "debezium"}, CheckpointKey: "app/debezium",
		Takeover: Takeover{Source: debezium.Source{Kind: debezium.SourceFile, Path: saved}, Selector: debezium.Selector{Server: "dbz"}}}
	log := slog.New(slog.DiscardHandler)
	cp := checkpoint.Checkpoint{LSN: 0x1800, Events: 7, Counted: true}
	slotAhead := fmt.Errorf("%w: slot", ErrSlotAhead)
	for _, c := range []struct {
		name    string
		lsn     pglogrepl.LSN
		source  string
		resumed error
		want    string // in the error; "" for none
	}{
		{name: "offset at the checkpoint", lsn: 0x1800, source: saved},
		{name: "offset behind the checkpoint", lsn: 0x2000, source: saved},
		{name: "offset behind, slot ahead", lsn: 0x2000, source: saved, resumed: slotAhead, want: "slot is ahead"},
		{name: "no offset", lsn: 0x1800, source: filepath.Join(dir, "gone.json")},
		{name: "no offset, slot ahead", lsn: 0x1800, source: filepath.Join(dir, "gone.json"), resumed: slotAhead, want: "whether Debezium streamed from the slot since, its offset would say"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg.Takeover.Source.Path = c.source
			in := cp
			in.LSN = c.lsn
			got, inKafka, err := takeOverAgain(context.Background(), nil, cfg, replication.Slot{}, replication.Server{}, in, true, c.resumed, log)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("takeOverAgain: %v, want an error saying %q", err, c.want)
			}
			if got.LSN != in.LSN || !inKafka || got.Notes != nil {
				t.Errorf("takeOverAgain = %s, in Kafka %v; want the checkpoint %s kept", got, inKafka, in)
			}
		})
	}
}

// holdSlot streams slot on a replication connection of its own, named
// app, as Debezium's task does, until the returned func releases it.
func holdSlot(t *testing.T, pg *testenv.Postgres, slot, publication, app string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, pg.URL("postgres", "postgres")+"&replication=database&application_name="+url.PathEscape(app))
	if err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + publication + "'"}}); err != nil {
		conn.Close(ctx)
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { conn.Close(ctx) }) }
	t.Cleanup(release)
	return release
}

// A takeover refuses a slot Debezium still streams from, naming the
// holder, where it would wait as a standby for another instance of the
// stream; once the holder lets go, the standby takes over.
func TestTakeoverRefusesAStreamingConnector(t *testing.T) {
	pg := testenv.StartPostgres(t)
	broker := testenv.StartKfake(t).Addr()
	pg.Exec("postgres", `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload jsonb);
		CREATE PUBLICATION walstream_outbox FOR TABLE public.outbox WITH (publish = 'insert, update')`)
	pg.Exec("postgres", "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')")
	offset := queryLSN(t, pg.Connect("postgres"), "SELECT pg_current_wal_insert_lsn()::text")
	file := filepath.Join(t.TempDir(), "offsets.json")
	answer := fmt.Sprintf(`{"offsets":[{"partition":{"server":"dbz"},"offset":{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"ts_usec":%d}}]}`,
		offset, offset, offset, time.Now().UnixMicro())
	if err := os.WriteFile(file, []byte(answer), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, pg, broker)
	cfg.Takeover = Takeover{Source: debezium.Source{Kind: debezium.SourceFile, Path: file}, Selector: debezium.Selector{Server: "dbz"}, Lookback: time.Minute}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))

	release := holdSlot(t, pg, "walstream", "walstream_outbox", "Debezium Streaming")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := New(cfg, log, nil).Run(ctx)
	var streaming *StreamingError
	if !errors.Is(err, ErrTakeover) || !errors.As(err, &streaming) {
		t.Fatalf("Run = %v, want a takeover refused while Debezium streams", err)
	}
	for _, want := range []string{`slot "walstream" is held by pid `, "application Debezium Streaming", "client 127.0.0.1:", `not this stream's ("walstream")`,
		"Kafka holds no checkpoint of this stream", "spec.state: stopped", "delete the connector", "PUT /connectors/<name>/stop"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run = %v\nwant it to say %q", err, want)
		}
	}
	// walstream status says the same, and that it stops once the slot is
	// free.
	in, err := Inspect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := in.Debezium; d == nil || d.Stopped() || d.Other == nil || d.Other.Application != "Debezium Streaming" || d.Pending == "" ||
		!slices.ContainsFunc(in.Problems, func(p string) bool {
			return strings.Contains(p, "Debezium's connector (any name), topic.prefix dbz has not stopped")
		}) {
		t.Errorf("Inspect while Debezium streams: %+v, problems %q", in.Debezium, in.Problems)
	}
	release()
	testenv.Eventually(t, 30*time.Second, "Inspect saying the connector stopped", func() bool {
		in, err := Inspect(ctx, cfg)
		return err == nil && in.Debezium != nil && in.Debezium.Stopped() && in.Debezium.Pending != "" && len(in.Problems) == 0
	})

	// Another walstream of the stream holds it: a standby waits, then
	// takes over once the slot is free.
	release = holdSlot(t, pg, "walstream", "walstream_outbox", replication.ApplicationName)
	p := New(cfg, log, nil)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, "a standby waiting for the slot", func() bool { return p.state.standbyAt.Load() != 0 })
	release()
	testenv.Eventually(t, 30*time.Second, "the standby streaming after it took over", func() bool {
		_, ok := p.state.streaming(time.Now())
		return ok
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
