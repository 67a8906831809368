package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/internal/testenv"
)

// deadlines records the read deadlines set on it.
type deadlines struct{ set []time.Time }

func (d *deadlines) SetReadDeadline(t time.Time) error { d.set = append(d.set, t); return nil }

// confirmAt always confirms one position; confirmAt(0) has none yet, so
// that a status update sends nothing and needs no connection.
type confirmAt pglogrepl.LSN

func (c confirmAt) Confirm() (pglogrepl.LSN, bool) { return pglogrepl.LSN(c), false }
func (confirmAt) ServerWALEnd(pglogrepl.LSN)       {}

// ConfirmSoon moves the read deadline Run blocks on to ConfirmInterval
// after the last status update, and only once per update however many
// commits ask: a busy stream sends a few updates a second, not one per
// Kafka transaction. The next status update puts it back to
// StatusInterval.
func TestConfirmSoonCoalesces(t *testing.T) {
	const status, confirm = time.Hour, 200 * time.Millisecond
	rd := &deadlines{}
	s := &Stream{cfg: StreamConfig{StatusInterval: status, ConfirmInterval: confirm}, rd: rd}
	s.ConfirmSoon() // before Run's first status update: nothing to move
	if len(rd.set) != 0 {
		t.Fatalf("ConfirmSoon before Run set deadlines %v", rd.set)
	}
	ctx := t.Context()
	if _, err := s.statusDue(ctx, confirmAt(0)); err != nil {
		t.Fatal(err)
	}
	sent := s.lastStatus
	if got, want := rd.set, []time.Time{sent.Add(status)}; len(got) != 1 || !got[0].Equal(want[0]) {
		t.Fatalf("deadlines after a status update = %v, want %v", got, want)
	}
	for range 1000 {
		s.ConfirmSoon()
	}
	if got, want := len(rd.set), 2; got != want {
		t.Fatalf("1000 ConfirmSoon calls set %d deadlines in all, want %d: they must coalesce", got, want)
	}
	if got, want := rd.set[1], sent.Add(confirm); !got.Equal(want) {
		t.Fatalf("ConfirmSoon deadline = %v, want the last status update + ConfirmInterval %v", got, want)
	}
	if _, err := s.statusDue(ctx, confirmAt(0)); err != nil {
		t.Fatal(err)
	}
	if got, want := rd.set[2], s.lastStatus.Add(status); !got.Equal(want) {
		t.Fatalf("deadline after the next update = %v, want %v", got, want)
	}
	// Long after the last update, a commit is confirmed at once: the
	// deadline is already past.
	s.lastStatus = time.Now().Add(-time.Minute)
	s.ConfirmSoon()
	if got := rd.set[len(rd.set)-1]; !got.Before(time.Now()) {
		t.Fatalf("deadline %v for a commit long after the last update, want one already past", got)
	}

	off := &deadlines{}
	s = &Stream{cfg: StreamConfig{StatusInterval: status}, rd: off}
	if _, err := s.statusDue(ctx, confirmAt(0)); err != nil {
		t.Fatal(err)
	}
	s.ConfirmSoon()
	if len(off.set) != 1 {
		t.Fatalf("with no ConfirmInterval, ConfirmSoon set deadlines %v", off.set[1:])
	}
}

// keepalivesOnly consumes a stream that carries no outbox rows.
type keepalivesOnly struct{}

func (keepalivesOnly) WAL(pglogrepl.LSN, []byte) (Ready, error) { return Ready{}, nil }
func (keepalivesOnly) Keepalive(pglogrepl.LSN) Ready            { return Ready{} }
func (keepalivesOnly) TryHandOn() bool                          { return true }
func (keepalivesOnly) HandOn(context.Context) error             { return nil }

// TestCloseAfterTheServerDropped: when the walsender is terminated, Run
// fails and pgconn closes the connection, sending its Terminate from a
// goroutine of its own. Close then closes without a status update, which
// would fail on the closed socket or, under -race, be the data race CI once
// caught in a failover test.
func TestCloseAfterTheServerDropped(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin, start := outboxSlot(t, ctx, pg, false)
	conn, s := openStream(t, ctx, pg, &testenv.LogBuffer{})
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx, keepalivesOnly{}, confirmAt(start)) }()

	var terminated bool
	for !terminated {
		if err := admin.QueryRow(ctx, "SELECT coalesce(bool_or(pg_terminate_backend(active_pid)), false) FROM pg_replication_slots WHERE slot_name = $1 AND active", names.Slot).Scan(&terminated); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-ran; err == nil || ctx.Err() != nil {
		t.Fatalf("Run after the walsender was terminated = %v (test context: %v), want its error", err, ctx.Err())
	}
	if !conn.IsClosed() {
		t.Fatal("the connection is not closed after Run failed on it")
	}
	if err := s.Close(ctx, confirmAt(start)); err != nil {
		t.Fatalf("Close after the server dropped the stream: %v", err)
	}
}

// outboxSlot creates the outbox table, its publication and slot
// names.Slot on pg, a failover slot when failover is set, and returns a
// connection to pg and where the slot starts.
func outboxSlot(t *testing.T, ctx context.Context, pg *testenv.Postgres, failover bool) (*pgx.Conn, pglogrepl.LSN) {
	t.Helper()
	admin := connect(t, pg.URL("postgres", "postgres"))
	for _, sql := range []string{outboxDDL, names.PublicationSQL(false)} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var start pglogrepl.LSN
	create := "SELECT lsn FROM pg_create_logical_replication_slot($1, 'pgoutput')"
	if failover { // Postgres 17 and later: temporary false, two-phase false, failover true
		create = "SELECT lsn FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)"
	}
	if err := admin.QueryRow(ctx, create, names.Slot).Scan(&start); err != nil {
		t.Fatal(err)
	}
	return admin, start
}

// openStream starts streaming slot names.Slot of pg on a replication
// connection of its own, logging to log; the connection is closed at the
// test's end.
func openStream(t *testing.T, ctx context.Context, pg *testenv.Postgres, log *testenv.LogBuffer) (*pgconn.PgConn, *Stream) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(pg.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	s, err := Start(ctx, conn, StreamConfig{Names: names, StatusInterval: time.Hour}, slog.New(slog.NewTextHandler(log, nil)), NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	return conn, s
}

// startStream starts streaming slot names.Slot of pg from start, logging
// to log, and runs it in the background: Run's error comes on the channel.
// The connection is closed when Run returns.
func startStream(t *testing.T, ctx context.Context, pg *testenv.Postgres, start pglogrepl.LSN, log *testenv.LogBuffer) <-chan error {
	t.Helper()
	conn, s := openStream(t, ctx, pg, log)
	ran := make(chan error, 1)
	go func() {
		err := s.Run(ctx, keepalivesOnly{}, confirmAt(start))
		conn.Close(context.Background())
		ran <- err
	}()
	return ran
}

// A walsender's warning is logged and the stream goes on: on Postgres 17,
// synchronized_standby_slots naming a slot no standby streams holds a
// failover slot's WAL back, warning at each wait.
func TestStreamWarning(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.Version(17), testenv.Settings("synchronized_standby_slots = 'standby1'"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	admin, start := outboxSlot(t, ctx, pg, true)
	if _, err := admin.Exec(ctx, "SELECT pg_create_physical_replication_slot('standby1')"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "INSERT INTO public.outbox VALUES (gen_random_uuid(), 'order', '1', 'created', '{}')"); err != nil {
		t.Fatal(err)
	}
	log := &testenv.LogBuffer{}
	ran := startStream(t, ctx, pg, start, log)
	testenv.Eventually(t, 30*time.Second, "the warning logged", func() bool {
		select {
		case err := <-ran:
			t.Fatalf("Run returned %v before the warning was logged", err)
		default:
		}
		return strings.Contains(log.String(), "Postgres warns on the replication connection") && strings.Contains(log.String(), "standby1")
	})
	select {
	case err := <-ran:
		t.Fatalf("Run returned %v on a warning", err)
	case <-time.After(time.Second):
	}
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v after its context ended", err)
	}
}

// A publication dropped and created again while the slot had WAL to send
// stops the stream, naming the publication and the way on: Postgres fails
// at the first change where it was missing before 18, and skips it with a
// warning from 18 on, sending none of the rows there.
func TestStreamPublicationDropped(t *testing.T) {
	for _, major := range []int{15, 18} {
		t.Run(fmt.Sprintf("Postgres %d", major), func(t *testing.T) {
			pg := testenv.StartPostgres(t, testenv.Version(major))
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			admin, start := outboxSlot(t, ctx, pg, false)
			const insert = "INSERT INTO public.outbox VALUES (gen_random_uuid(), 'order', '1', 'created', '{}')"
			for _, sql := range []string{"DROP PUBLICATION " + names.Publication, insert, names.PublicationSQL(false), insert} {
				if _, err := admin.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			err := <-startStream(t, ctx, pg, start, &testenv.LogBuffer{})
			if !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), `publication "`+names.Publication+`"`) || !strings.Contains(err.Error(), "A publication dropped") {
				t.Fatalf("Run = %v, want a setup error naming the publication and docs/postgres.md, A publication dropped", err)
			}
			t.Log(err)

			// The way on docs/postgres.md gives: the slot advanced past
			// the point where the publication exists again streams.
			// (once the walsender of the stream that stopped has exited).
			var at pglogrepl.LSN
			testenv.Eventually(t, 10*time.Second, "the slot advanced", func() bool {
				err := admin.QueryRow(ctx, "SELECT end_lsn FROM pg_replication_slot_advance($1, pg_current_wal_lsn())", names.Slot).Scan(&at)
				if err != nil && !SlotInUse(err) {
					t.Fatalf("advancing the slot past the missing publication: %v", err)
				}
				return err == nil
			})
			if _, err := admin.Exec(ctx, insert); err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			ran := startStream(t, rctx, pg, at, &testenv.LogBuffer{})
			select {
			case err := <-ran:
				t.Fatalf("Run from the slot advanced to %s = %v", at, err)
			case <-time.After(2 * time.Second):
			}
			stop()
			<-ran
		})
	}
}
