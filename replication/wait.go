package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Blocker is a transaction something waits for to end: creating a slot
// waits for every transaction that had an xid when it began, one after
// another. What pg_stat_activity shows of another role's session needs
// pg_read_all_stats; without it only the PID and the xid are known.
type Blocker struct {
	// PID is the backend running the transaction; 0 for a prepared
	// transaction, which no backend runs (Prepared is then its gid).
	PID      int32
	Prepared string
	Xid      uint32
	// XidAge is how many xids were assigned since this one.
	XidAge int64
	// Running is how long the transaction has been open, zero when
	// unknown.
	Running                    time.Duration
	Application, State, Client string
	// Current says this is the transaction waited for now.
	Current bool
	// Query is the session's last query, read only when asked for.
	Query string
}

func (b Blocker) String() string {
	var who string
	if b.PID == 0 {
		who = fmt.Sprintf("prepared transaction %q", b.Prepared)
	} else {
		who = fmt.Sprintf("pid %d", b.PID)
	}
	parts := []string{fmt.Sprintf("xid %d, xid age %d", b.Xid, b.XidAge)}
	if b.Running > 0 {
		parts = append(parts, "open for "+b.Running.Round(time.Second).String())
	}
	for _, p := range []struct{ name, v string }{{"application", b.Application}, {"state", b.State}, {"client", b.Client}} {
		if p.v != "" {
			parts = append(parts, p.name+" "+p.v)
		}
	}
	if b.Query != "" {
		parts = append(parts, fmt.Sprintf("query %q", b.Query))
	}
	return who + " (" + strings.Join(parts, ", ") + ")"
}

// SlotWait is what the creation of a slot waits for.
type SlotWait struct {
	Slot string
	// PID is the backend creating the slot, and Since when it began.
	PID   int32
	Since time.Time
	// WaitEvent is the backend's pg_stat_activity wait event, as
	// "type/event", empty when it is not waiting.
	WaitEvent string
	// Blockers are the transactions it waits for: the one it waits for
	// now first, then the others it will wait for.
	Blockers []Blocker
}

func (w SlotWait) String() string {
	s := fmt.Sprintf("creating slot %q", w.Slot)
	if !w.Since.IsZero() {
		s += fmt.Sprintf(" (pid %d, for %s)", w.PID, time.Since(w.Since).Round(time.Second))
	}
	if len(w.Blockers) == 0 {
		if w.WaitEvent != "" {
			return s + ": no transaction holds it up; the server waits on " + w.WaitEvent
		}
		return s + ": no transaction holds it up"
	}
	list := make([]string, len(w.Blockers))
	for i, b := range w.Blockers {
		list[i] = b.String()
	}
	n := "1 transaction"
	if len(w.Blockers) > 1 {
		n = fmt.Sprintf("%d transactions", len(w.Blockers))
	}
	return fmt.Sprintf("%s: waiting for %s to end, as a new slot must: %s", s, n, strings.Join(list, "; "))
}

// SlotCreationWait reads what backend pid, creating slot, waits for:
// Postgres makes a new logical slot consistent only once every
// transaction that had an xid when the creation began has ended. The
// transactions are read from pg_locks, which every role may read, with
// pg_stat_activity's and pg_prepared_xacts' view of them; query text is
// read only when queries is set.
func SlotCreationWait(ctx context.Context, conn *pgx.Conn, slot string, pid int32, queries bool) (SlotWait, error) {
	w := SlotWait{Slot: slot, PID: pid}
	var since *time.Time
	var waitEvent *string
	err := conn.QueryRow(ctx, `SELECT query_start, wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&since, &waitEvent)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return w, fmt.Errorf("reading what the creation of slot %q (pid %d) waits for: %w", slot, pid, err)
	}
	if since != nil {
		w.Since = *since
	}
	w.WaitEvent = deref(waitEvent)
	// A transaction with an xid holds the lock on it (ExclusiveLock); the
	// creation waits for one of them at a time (ShareLock, not granted).
	rows, err := conn.Query(ctx, `SELECT coalesce(l.pid, 0), coalesce(p.gid, ''), l.transactionid::text::bigint, age(l.transactionid),
			extract(epoch FROM now() - coalesce(a.xact_start, p.prepared)),
			coalesce(a.application_name, ''), coalesce(a.state, ''), coalesce(host(a.client_addr), ''),
			EXISTS (SELECT 1 FROM pg_locks w WHERE w.pid = $1 AND NOT w.granted AND w.locktype = 'transactionid' AND w.transactionid = l.transactionid),
			CASE WHEN $3 THEN coalesce(a.query, '') ELSE '' END
		FROM pg_locks l
		LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		LEFT JOIN pg_prepared_xacts p ON p.transaction = l.transactionid
		WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted AND l.pid IS DISTINCT FROM $1
			AND (l.transactionid IN (SELECT w.transactionid FROM pg_locks w WHERE w.pid = $1 AND NOT w.granted AND w.locktype = 'transactionid')
				OR coalesce(a.xact_start, p.prepared) IS NULL OR coalesce(a.xact_start, p.prepared) <= $2)
		ORDER BY 9 DESC, 5 DESC NULLS LAST`, pid, w.Since, queries)
	if err != nil {
		return w, fmt.Errorf("reading what the creation of slot %q (pid %d) waits for: %w", slot, pid, err)
	}
	var b Blocker
	var xid int64
	var running *float64
	_, err = pgx.ForEachRow(rows, []any{&b.PID, &b.Prepared, &xid, &b.XidAge, &running, &b.Application, &b.State, &b.Client, &b.Current, &b.Query}, func() error {
		b.Xid, b.Running = uint32(xid), 0
		if running != nil {
			b.Running = time.Duration(*running * float64(time.Second))
		}
		w.Blockers = append(w.Blockers, b)
		return nil
	})
	if err != nil {
		return w, fmt.Errorf("reading what the creation of slot %q (pid %d) waits for: %w", slot, pid, err)
	}
	return w, nil
}

// Backend is a server process as pg_stat_activity shows it: the one
// holding a slot, for instance.
type Backend struct {
	PID int32
	// Type is pg_stat_activity's backend_type: walsender for a client
	// streaming the slot, client backend for a session creating it or
	// reading it with SQL. WaitEvent is its wait event as "type/event",
	// empty when it is not waiting.
	Type, Application, Client, State, WaitEvent string
	// Started is when the backend started (the session connected), zero
	// when unknown.
	Started time.Time
}

func (b Backend) String() string {
	var parts []string
	for _, p := range []struct{ name, v string }{{"", b.Type}, {"application", b.Application}, {"client", b.Client}, {"state", b.State}} {
		if p.v != "" {
			parts = append(parts, strings.TrimSpace(p.name+" "+p.v))
		}
	}
	if !b.Started.IsZero() {
		parts = append(parts, fmt.Sprintf("connected %s ago", time.Since(b.Started).Round(time.Second)))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("pid %d", b.PID)
	}
	return fmt.Sprintf("pid %d (%s)", b.PID, strings.Join(parts, ", "))
}

// DescribeBackend reads what pg_stat_activity shows of backend pid.
func DescribeBackend(ctx context.Context, conn *pgx.Conn, pid int32) (Backend, error) {
	b := Backend{PID: pid}
	var typ, app, client, state, wait *string
	var started *time.Time
	err := conn.QueryRow(ctx, `SELECT backend_type, application_name, host(client_addr) || ':' || client_port, state, backend_start,
			wait_event_type || '/' || wait_event
		FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&typ, &app, &client, &state, &started, &wait)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("describing backend pid %d: %w", pid, err)
	}
	b.Type, b.Application, b.Client, b.State, b.WaitEvent = deref(typ), deref(app), deref(client), deref(state), deref(wait)
	if started != nil {
		b.Started = *started
	}
	return b, nil
}

// SlotHeldError is a slot another process holds: another walstream
// streaming it (this one is then a standby), or anything else reading it.
// It wraps the server's refusal, so SlotInUse still reports it.
type SlotHeldError struct {
	Slot   string
	Holder Backend
	// Creating, when set, says the holder is creating the slot and what
	// that waits for.
	Creating *SlotWait
	Err      error
}

func (e *SlotHeldError) Error() string {
	s := fmt.Sprintf("slot %q is held by %s", e.Slot, e.Holder)
	if e.Creating != nil {
		s += ", which is " + e.Creating.String()
	}
	return s + ": " + e.Err.Error()
}

func (e *SlotHeldError) Unwrap() error { return e.Err }

// DescribeHeld makes err, a refusal of a slot held by another process,
// name that process; it returns err as it is for any other error, or when
// the slot is no longer held.
func DescribeHeld(ctx context.Context, conn *pgx.Conn, slot string, err error) error {
	if !SlotInUse(err) {
		return err
	}
	s, ok, lerr := LookupSlot(ctx, conn, slot)
	if lerr != nil || !ok || s.ActivePID == nil {
		return err
	}
	holder, derr := DescribeBackend(ctx, conn, *s.ActivePID)
	if derr != nil {
		return err
	}
	held := &SlotHeldError{Slot: slot, Holder: holder, Err: err}
	if s.Creating() {
		if w, werr := SlotCreationWait(ctx, conn, slot, *s.ActivePID, false); werr == nil {
			held.Creating = &w
		}
	}
	return held
}

// SlotHolder is what a standby waiting for a slot reads on the connection
// it keeps: which process holds the slot, and whether the server is still
// a primary.
type SlotHolder struct {
	// Exists is false when the server has no such slot.
	Exists bool
	// PID is the process holding the slot, 0 when none does.
	PID int32
	// Recovery: the server is a standby now (it was demoted, or the
	// connection reached another host), so its slots say nothing of the
	// primary's.
	Recovery bool
}

// Free reports whether a session may try to take the slot: nothing holds
// it, it is gone, or the server is no primary; the session then says why,
// or takes it.
func (h SlotHolder) Free() bool { return !h.Exists || h.PID == 0 || h.Recovery }

// ReadSlotHolder reads the slot's holder in one catalog read of shared
// memory (pg_replication_slots), cheap enough to repeat every second on a
// connection kept open.
func ReadSlotHolder(ctx context.Context, conn *pgx.Conn, slot string) (SlotHolder, error) {
	var h SlotHolder
	var pid *int32
	err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1),
			(SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&h.Recovery, &h.Exists, &pid)
	if err != nil {
		return h, fmt.Errorf("reading the holder of slot %q: %w", slot, err)
	}
	if pid != nil {
		h.PID = *pid
	}
	return h, nil
}
