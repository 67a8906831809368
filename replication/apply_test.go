package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/internal/testenv"
)

// Apply creates the slot last and alone: when its creation fails (here,
// cut short while it waits for a transaction that stays open), what the
// transaction before it created stays, and the error names it and the
// slot; applying again creates only the slot. A step that fails in the
// transaction leaves nothing.
func TestApplySlotLast(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	steps := append([]Step{OutboxTableStep(Table{"public", "outbox"}, "id", "aggregatetype", "aggregateid", "payload")},
		names.SetupSteps("walstream", false, ProviderPostgres)...)
	exists := func() (table, pub, slot, role bool) {
		t.Helper()
		if err := admin.QueryRow(ctx, `SELECT to_regclass('public.outbox') IS NOT NULL, EXISTS (SELECT FROM pg_publication WHERE pubname = 'walstream_outbox'),
			EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'walstream'), EXISTS (SELECT FROM pg_roles WHERE rolname = 'walstream')`).Scan(&table, &pub, &slot, &role); err != nil {
			t.Fatal(err)
		}
		return
	}

	// A failing step in the transaction: nothing is left.
	bad := append([]Step{steps[0], steps[1], {Name: "a step that fails", SQL: "SELECT 1/0"}}, steps[2:]...)
	var done []string
	err := Apply(ctx, admin, bad, "walstream", Create{}, func(s Step) { done = append(done, s.Name) })
	if err == nil || !strings.Contains(err.Error(), "creating a step that fails") || !strings.Contains(err.Error(), "nothing was changed") || len(done) > 0 {
		t.Fatalf("Apply with a failing step: %v, done %q", err, done)
	}
	if table, pub, slot, role := exists(); table || pub || slot || role {
		t.Fatalf("after a failed transaction: table %v, publication %v, slot %v, role %v; want none", table, pub, slot, role)
	}

	// A transaction with an xid, open while the slot is created: the
	// creation waits for it until the context ends, which the steps
	// before it must beat (4 s leaves a loaded machine their time).
	blocker := connect(t, pg.URL("postgres", "postgres"))
	if _, err := blocker.Exec(ctx, "BEGIN; SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	done = nil
	creator := admin.PgConn().PID()
	err = Apply(cctx, admin, steps, "walstream", Create{}, func(s Step) { done = append(done, s.Name) })
	var pe *PartialError
	if !errors.As(err, &pe) || pe.Failed != `slot "walstream"` || len(pe.Done) != 4 || len(done) != 4 {
		t.Fatalf("Apply cut short in the slot's creation: %v, done %q", err, done)
	}
	for _, want := range []string{`creating slot "walstream"`, `table "public"."outbox", publication "walstream_outbox", role "walstream", grant SELECT on "public"."outbox" to "walstream" took effect and stay`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if admin.IsClosed() { // a query cut short closes its connection
		admin = connect(t, pg.URL("postgres", "postgres"))
	}
	// Apply returns once the backend cut short is gone, not only asked to
	// stop, so the slot it was creating is gone too.
	var busy bool
	if err := blocker.QueryRow(ctx, busyBackend, int32(creator)).Scan(&busy); err != nil || busy {
		t.Fatalf("the backend creating the slot (pid %d) still runs: %v, %v", creator, busy, err)
	}
	if table, pub, slot, role := exists(); !table || !pub || slot || !role {
		t.Fatalf("after the slot's creation failed: table %v, publication %v, slot %v, role %v; want all but the slot", table, pub, slot, role)
	}
	if _, err := blocker.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, admin, steps, "walstream", Create{}, func(Step) {}); err != nil {
		t.Fatalf("Apply again: %v", err)
	}
	if table, pub, slot, role := exists(); !table || !pub || !slot || !role {
		t.Fatalf("after Apply again: table %v, publication %v, slot %v, role %v; want all", table, pub, slot, role)
	}
}

// noCancel is a connection to Postgres on which cancel requests are lost,
// as when the process dies before pgx sends one.
type noCancel struct{ net.Conn }

func (c noCancel) Write(b []byte) (int, error) {
	if len(b) == 16 && binary.BigEndian.Uint32(b[4:]) == 80877102 { // CancelRequest
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// A slot's creation cut short is over when ExecWatched returns, even when
// pgx's own cancel request never reaches Postgres: the backend, waiting
// for a transaction open before it and not reading its connection, would
// otherwise create the slot once that transaction ends.
func TestSlotCreationCutShortIsOver(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pg.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return noCancel{c}, nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	creator := conn.PgConn().PID()
	blocker := connect(t, pg.URL("postgres", "postgres"))
	if _, err := blocker.Exec(ctx, "BEGIN; SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := ExecWatched(cctx, conn, "cut", "SELECT pg_create_logical_replication_slot('cut', 'pgoutput')", Create{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ExecWatched = %v, want the deadline", err)
	}
	// Its connection is still open (pgx waits for the cancel request it
	// believes sent), but its query is over.
	var busy bool
	if err := blocker.QueryRow(ctx, busyBackend, int32(creator)).Scan(&busy); err != nil || busy {
		t.Fatalf("the backend creating the slot (pid %d) still runs: %v, %v", creator, busy, err)
	}
	if _, err := blocker.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := blocker.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'cut')").Scan(&exists); err != nil || exists {
		t.Fatalf("slot cut exists (%v, %v) after its creation was cut short", exists, err)
	}
}
