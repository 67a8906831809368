package replication

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/internal/testenv"
)

// A slot created while a transaction with an xid is open waits for it to
// end; Prepare's watcher names that transaction, by PID, xid and
// application, the one waited for now marked, without its query unless
// asked. Another client trying the slot meanwhile is told who holds it
// and what that waits for.
func TestSlotCreationWait(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	if _, err := admin.Exec(ctx, outboxDDL+"; "+names.PublicationSQL(false)); err != nil {
		t.Fatal(err)
	}
	long := connect(t, pg.URL("postgres", "postgres")+"&application_name=nightly_report")
	var longPID int32
	var xid int64
	if err := long.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&longPID); err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := long.QueryRow(ctx, "SELECT txid_current() /* secret report */").Scan(&xid); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var seen []SlotWait
	create := createAll
	create.WatchInterval = 200 * time.Millisecond
	create.Watch = func(w SlotWait) {
		mu.Lock()
		seen = append(seen, w)
		mu.Unlock()
	}
	creator := connect(t, pg.URL("postgres", "postgres"))
	done := make(chan error, 1)
	go func() { done <- Prepare(ctx, creator, names, create) }()

	var w SlotWait
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		if len(seen) >= 2 {
			w = seen[len(seen)-1]
		}
		mu.Unlock()
		if len(w.Blockers) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(w.Blockers) != 1 {
		t.Fatalf("the watcher saw %+v, want the one open transaction", w)
	}
	b := w.Blockers[0]
	if b.PID != longPID || int64(b.Xid) != xid || !b.Current || b.Application != "nightly_report" || b.State != "idle in transaction" || b.Query != "" {
		t.Errorf("blocker %+v, want pid %d xid %d, waited for now, application nightly_report, idle in transaction, no query", b, longPID, xid)
	}
	text := w.String()
	for _, want := range []string{`creating slot "walstream"`, "waiting for 1 transaction to end", "pid", "application nightly_report", "xid age"} {
		if !strings.Contains(text, want) {
			t.Errorf("%q does not say %q", text, want)
		}
	}
	if strings.Contains(text, "secret report") {
		t.Errorf("%q shows the query text unasked", text)
	}
	asked, err := SlotCreationWait(ctx, admin, "walstream", w.PID, true)
	if err != nil || len(asked.Blockers) != 1 || !strings.Contains(asked.Blockers[0].Query, "secret report") {
		t.Errorf("asked for queries: %+v, %v", asked, err)
	}

	// The slot exists but is not consistent: held, without a position.
	s, ok, err := LookupSlot(ctx, admin, "walstream")
	if err != nil || !ok || !s.Creating() || s.HasConfirmed {
		t.Fatalf("slot while created: %+v, %v, %v; want held without confirmed_flush_lsn", s, ok, err)
	}
	held := DescribeHeld(ctx, admin, "walstream", startOn(t, pg))
	var he *SlotHeldError
	if !errors.As(held, &he) || he.Creating == nil || he.Holder.PID != w.PID || !SlotInUse(held) {
		t.Fatalf("START_REPLICATION on the slot being created: %v, want it held by pid %d, creating it", held, w.PID)
	}
	if !strings.Contains(held.Error(), "application nightly_report") || !strings.Contains(held.Error(), "is active for PID") {
		t.Errorf("%q names neither the transaction the holder waits for nor the server's refusal", held)
	}

	if _, err := long.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the slot was not created after the transaction ended")
	}
	if s, _, _ := LookupSlot(ctx, admin, "walstream"); s.Creating() || !s.HasConfirmed {
		t.Fatalf("slot after creation: %+v", s)
	}
}

// startOn tries START_REPLICATION on the slot and returns the refusal.
func startOn(t *testing.T, pg *testenv.Postgres) error {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pg.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	rconn, err := Dial(ctx, &cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close(ctx)
	_, err = Start(ctx, rconn, StreamConfig{Names: names, StatusInterval: time.Second}, nil, nil)
	if err == nil {
		t.Fatal("START_REPLICATION on a slot being created succeeded")
	}
	return err
}
