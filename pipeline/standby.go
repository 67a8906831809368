package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/walstream/walstream/replication"
)

// standbyPoll is how often a standby reads who holds the slot while it
// waits for it, so that it takes over within a second or two of the slot
// being freed.
const standbyPoll = time.Second

// standbyReadTimeout bounds one read of the slot's holder: a connection to
// a host that went away without closing it would otherwise hang the wait
// instead of reconnecting.
const standbyReadTimeout = 10 * time.Second

// standingBy notes that an attempt, or a read of the slot's holder, found
// the slot held by another process: for /readyz, the walstream_standby
// gauge and the log at the progress interval.
func (p *Pipeline) standingBy(held error) {
	p.metrics.standby.Set(1)
	p.state.standbyAt.Store(time.Now().UnixNano())
	attrs := []any{"err", held}
	var h *replication.SlotHeldError
	if errors.As(held, &h) {
		attrs = []any{"holder_pid", h.Holder.PID, "holder_application", h.Holder.Application}
	}
	p.waits.waiting("standby", "standby: "+held.Error(), attrs...)
}

// awaitSlot waits, as a standby, until a session may try to take the slot
// again, holding one regular connection to Postgres for the whole wait and
// reading the slot's holder on it every standbyPoll. A session costs two
// new connections (a regular one and a replication one) however soon it
// finds the slot held: a standby that tried one every second was two new
// connections a second on the primary, each a line in log_connections and
// pgaudit (docs/operations.md, Standby). It returns nil when the slot is free, gone, or
// taken by another process than the one held found, or when the server
// is no primary any more (the session that follows says why, or takes
// the slot), and ctx's end; a connection or a read that fails (a restart,
// a failover) is its error, after which the supervisor tries a session
// with its backoff.
func (p *Pipeline) awaitSlot(ctx context.Context, held error) error {
	conn, err := replication.Connect(ctx, p.cfg.Postgres)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var holder int32
	var h *replication.SlotHeldError
	if errors.As(held, &h) {
		holder = h.Holder.PID
	}
	t := time.NewTicker(standbyPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, standbyReadTimeout)
		now, err := replication.ReadSlotHolder(rctx, conn, p.cfg.Names.Slot)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		case now.Free(), holder != 0 && now.PID != holder:
			return nil
		}
		p.standingBy(held)
	}
}
