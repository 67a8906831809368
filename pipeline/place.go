package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/replication"
)

// Verdict says whether a checkpoint's LSNs name WAL of the server walstream
// reached, and so whether they may decide which transactions to skip.
type Verdict int

const (
	// Continuous: same system and timeline, and the server has the WAL.
	Continuous Verdict = iota
	// Unidentified: the checkpoint predates recorded identities; the
	// server has its WAL, so it is taken to be the server's.
	Unidentified
	// SafeFailover: the server is on a later timeline that forked at or
	// after everything the checkpoint covers.
	SafeFailover
	// Phantoms: the checkpoint covers WAL past where the server's history
	// left it (a fork, or the server's WAL end on the same timeline):
	// events published from there are not in the server's history, and
	// transactions the server commits there would be skipped.
	Phantoms
	// OffHistory: the checkpoint's timeline is not in the server's
	// history: an old primary, or a sibling branch.
	OffHistory
	// SystemChanged: the server is another cluster.
	SystemChanged
)

func (v Verdict) String() string {
	switch v {
	case Continuous:
		return "continuous"
	case Unidentified:
		return "unidentified"
	case SafeFailover:
		return "safe_failover"
	case Phantoms:
		return "phantoms"
	case OffHistory:
		return "off_history"
	case SystemChanged:
		return "system_changed"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Placement is where a checkpoint lies in the server's history.
type Placement struct {
	Verdict Verdict
	// Fork is where the checkpoint's history and the server's part: the
	// switch point of the checkpoint's timeline, or the server's WAL end
	// when both are on one timeline. Zero when they do not part.
	Fork pglogrepl.LSN
	// Ahead is set for Phantoms on the checkpoint's own timeline: the
	// server's WAL ends before the checkpoint (a copy restored to an
	// earlier point keeps its timeline). Where its WAL left the
	// checkpoint's is then unknown: at Fork or before.
	Ahead bool
	// Replay is set for Phantoms found by replaying the WAL from the slot
	// (Fork): the server's WAL passed the checkpoint, but what it holds
	// there is not what was published (checkpoint.ReplayError).
	Replay *checkpoint.ReplayError
}

// Place compares a checkpoint with the server. history is the timeline
// history of the server's timeline (empty on timeline 1).
func Place(cp checkpoint.Checkpoint, srv replication.Server, history []replication.HistoryEntry) Placement {
	id := cp.Identity
	switch {
	case !id.Known():
		if cp.Past(srv.XLogPos) {
			return Placement{Verdict: Phantoms, Fork: srv.XLogPos, Ahead: true}
		}
		return Placement{Verdict: Unidentified}
	case id.SystemID != srv.SystemID:
		return Placement{Verdict: SystemChanged}
	case id.Timeline == srv.Timeline:
		if cp.Past(srv.XLogPos) {
			return Placement{Verdict: Phantoms, Fork: srv.XLogPos, Ahead: true}
		}
		return Placement{Verdict: Continuous}
	}
	fork, ok := replication.Fork(history, srv.Timeline, id.Timeline)
	switch {
	case !ok:
		return Placement{Verdict: OffHistory}
	case cp.Past(fork):
		return Placement{Verdict: Phantoms, Fork: fork}
	}
	return Placement{Verdict: SafeFailover, Fork: fork}
}

// walEndFor is srv with the WAL end asked again (walEnd) when cp is past
// the one srv was identified with. A checkpoint read after IDENTIFY_SYSTEM
// may cover WAL flushed since; placed against the WAL end of now, once
// the checkpoint read is final, only one past that is phantom.
func walEndFor(ctx context.Context, cp checkpoint.Checkpoint, srv replication.Server,
	walEnd func(context.Context) (pglogrepl.LSN, error)) (replication.Server, error) {
	if !cp.Past(srv.XLogPos) {
		return srv, nil
	}
	end, err := walEnd(ctx)
	if err != nil {
		return srv, err
	}
	srv.XLogPos = max(srv.XLogPos, end)
	return srv, nil
}

// goOnFrom is where accepting phantoms goes on from: the fork, or when
// the server's WAL only ends before the checkpoint on its own timeline,
// the slot's position, since where the WAL parted is unknown.
func (pl Placement) goOnFrom(slotConfirmed pglogrepl.LSN) pglogrepl.LSN {
	if pl.Ahead {
		return min(slotConfirmed, pl.Fork)
	}
	return pl.Fork
}

// reach is the end of what a checkpoint covers, for reporting a range.
func reach(cp checkpoint.Checkpoint) pglogrepl.LSN {
	return max(cp.LSN, cp.PartialCommitLSN)
}

// DivergedError means the checkpoint in Kafka names WAL the server does
// not have: another cluster, WAL past the server's fork or end, or a
// timeline the server never had. Streaming would skip or misplace real
// transactions, so walstream stops; an operator decides how to go on.
type DivergedError struct {
	Placement  Placement
	Checkpoint checkpoint.Checkpoint
	Server     replication.Server
	// Events is the number of events published past the fork, -1 when the
	// checkpoint topic cannot tell (Phantoms only); with Placement.Ahead,
	// a lower bound.
	Events int64
	// From is where accepting the phantoms goes on from: the fork, or
	// with Placement.Ahead the slot's position, which no published event
	// of the server's own history lies after.
	From          pglogrepl.LSN
	Slot          string
	CheckpointKey string
	// Stream is this stream's name; empty where not known.
	Stream string
}

func (e *DivergedError) Error() string {
	cp, srv := e.Checkpoint, e.Server
	switch e.Placement.Verdict {
	case SystemChanged:
		return fmt.Sprintf("checkpoint %q (at %s) was written from another Postgres cluster: this stream (stream %s: system %s, database %s, slot %s), "+
			"the checkpoint's (%s: %s). Either two streams claim the key: two clusters with the same database and slot names share this "+
			"Kafka cluster, and each needs its own stream name (see docs/kafka.md, Many streams on one Kafka cluster); "+
			"or the database was restored from a backup into a new cluster, a new cluster was created, or the URL now reaches a different host: "+
			"walstream will not compare LSNs of two systems, and to go on from slot %q's position on the new system, accept the system change "+
			"(see docs/postgres.md, Another cluster)",
			e.CheckpointKey, cp, e.Stream, srv.SystemID, srv.Database, e.Slot, cp.Owner, cp.Identity, e.Slot)
	case OffHistory:
		return fmt.Sprintf("checkpoint %q was written on timeline %d at %s, which is not in the history of the server's timeline %d "+
			"(system %s): the server is an old primary that a standby was promoted over, or a branch that never saw that timeline. "+
			"Point walstream at the current primary (a multi-host URL with target_session_attrs=primary); see docs/postgres.md, A checkpoint not in the server's history",
			e.CheckpointKey, cp.Identity.Timeline, cp, srv.Timeline, srv.SystemID)
	case Phantoms:
		count := "an unknown number of"
		if e.Events >= 0 {
			count = fmt.Sprint(e.Events)
		}
		if r := e.Placement.Replay; r != nil {
			if e.Events >= 0 {
				count = fmt.Sprintf("up to %d", e.Events)
			}
			return fmt.Sprintf("phantom events: %s. The server's history on timeline %d was rewritten past %s: a copy of its data directory "+
				"(a disk or VM snapshot, a backup without a new timeline) was restored and written to, or the checkpoint key is shared with "+
				"another stream. Transactions the server committed at LSNs checkpoint %q covers (%s) would be skipped; %s events published "+
				"after %s may not be in the database. Reconcile them downstream, then accept them to go on from the slot's position %s, "+
				"publishing every transaction after it (events the copy holds that were published before may be published again; "+
				"see docs/postgres.md, Phantom events)",
				r, srv.Timeline, e.From, e.CheckpointKey, cp, count, e.From, e.From)
		}
		if e.Placement.Ahead {
			if e.Events >= 0 {
				count = "at least " + count
			}
			return fmt.Sprintf("phantom events: %s events were published from WAL between %s and %s that the server does not have: "+
				"the server's WAL on timeline %d ends at %s, but checkpoint %q is at %s, on the same timeline. The server was restored "+
				"to an earlier point (a copy of its data directory, or a backup without a new timeline), or the checkpoint key is shared "+
				"with another stream; the server's WAL may differ from what was published before %s too. Those events are in Kafka but "+
				"their transactions are not in the database, and transactions the server commits below %s would be skipped. "+
				"Reconcile the phantom events downstream, then accept them to go on from the slot's position %s, publishing every "+
				"transaction after it (events between %s and where the copy ends may be published again; see docs/postgres.md, Phantom events)",
				count, e.Placement.Fork, reach(cp), srv.Timeline, e.Placement.Fork, e.CheckpointKey, cp, e.Placement.Fork, reach(cp), e.From, e.From)
		}
		return fmt.Sprintf("phantom events: %s events were published from WAL between %s and %s that the server does not have: "+
			"timeline %d forked to the server's timeline %d at %s, but checkpoint %q is at %s. Those events are in Kafka but their "+
			"transactions are not in the database (a standby that had not received them was promoted); transactions the server "+
			"commits from %s on would be skipped. Reconcile the phantom events downstream, then accept them to go on from %s, "+
			"publishing every transaction of the server's history after it (see docs/postgres.md, Phantom events)",
			count, e.Placement.Fork, reach(cp), cp.Identity.Timeline, srv.Timeline, e.Placement.Fork, e.CheckpointKey, cp, e.Placement.Fork, e.Placement.Fork)
	}
	return fmt.Sprintf("checkpoint %q at %s does not match the server (%s): %s", e.CheckpointKey, cp, srv.SystemID, e.Placement.Verdict)
}

// Accept lists the divergences an operator accepted for a start.
type Accept struct {
	// SystemChange: the server is another cluster; go on from the slot's
	// position, using nothing of the old system's positions.
	SystemChange bool
	// Phantoms: go on from the fork, publishing every transaction of the
	// server's history after it; the phantom range is recorded.
	Phantoms bool
}

// resolve turns the checkpoint read from Kafka and its placement into the
// position to resume from, stamped with the server's identity, or a
// DivergedError. fresh says the position differs from what Kafka holds, so
// that a checkpoint recording it is committed at once. events is the
// number of phantom events, -1 when unknown.
func resolve(cp checkpoint.Checkpoint, pl Placement, srv replication.Server, slotConfirmed pglogrepl.LSN, events int64,
	acc Accept, now time.Time, slot, key string) (next checkpoint.Checkpoint, fresh bool, err error) {
	own := checkpoint.Identity{SystemID: srv.SystemID, Timeline: srv.Timeline, Database: srv.Database}
	from := pl.goOnFrom(slotConfirmed)
	diverged := &DivergedError{Placement: pl, Checkpoint: cp, Server: srv, Events: events, From: from, Slot: slot, CheckpointKey: key}
	switch pl.Verdict {
	case Continuous:
		return cp, cp.Identity != own, nil
	case Unidentified, SafeFailover:
		cp.Identity = own
		return cp, true, nil
	case Phantoms:
		if !acc.Phantoms {
			return cp, false, diverged
		}
		next = cp.At(from)
		next.Identity = own
		next.Last = checkpoint.Last{} // of the history left behind
		next.Gap = checkpoint.Gap{Kind: checkpoint.GapPhantoms, Previous: cp.Identity, From: from, To: reach(cp), Events: events, At: now}
		return next, true, nil
	case SystemChanged:
		if !acc.SystemChange {
			return cp, false, diverged
		}
		next = checkpoint.Checkpoint{LSN: slotConfirmed, Identity: own, Events: cp.Events, Counted: cp.Counted,
			Gap: checkpoint.Gap{Kind: checkpoint.GapSystemChanged, Previous: cp.Identity, To: reach(cp), Events: -1, At: now}}
		return next, true, nil
	}
	return cp, false, diverged
}
