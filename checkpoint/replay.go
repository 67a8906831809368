package checkpoint

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// Last is the last Postgres transaction whose events a stream published:
// what a replay of the WAL from a slot behind the checkpoint must show
// again. LSNs alone cannot tell a server whose WAL was rewritten on the
// same timeline (a copy of its data directory restored, its applications
// writing past the checkpoint before walstream came back) from the one
// walstream left: the transactions at LSNs the checkpoint covers are new,
// and skipping them as published would lose them. A transaction's xid and
// commit time, with its commit LSN, name it in one history only.
type Last struct {
	// Xid is 0 for a non-transactional logical message, published as an
	// event of its own at CommitLSN.
	Xid        uint32
	CommitLSN  pglogrepl.LSN
	CommitTime time.Time
}

// Known reports whether the checkpoint records its last transaction;
// records written before walstream did, and those after an accepted gap,
// do not.
func (l Last) Known() bool { return l.CommitLSN != 0 }

func (l Last) String() string {
	if l.Xid == 0 {
		return fmt.Sprintf("the logical message at %s", l.CommitLSN)
	}
	return fmt.Sprintf("transaction %d committed at %s (%s)", l.Xid, l.CommitLSN, l.CommitTime.UTC().Format(time.RFC3339Nano))
}

// Sent is a transaction (or non-transactional message) the server sent,
// as the witness of a replay sees it.
type Sent struct {
	Xid        uint32
	CommitLSN  pglogrepl.LSN
	CommitTime time.Time
	// Events counts its outbox events.
	Events uint64
}

// ReplayError means the server's WAL, replayed from the slot, does not
// hold what the resume checkpoint says was published: the checkpoint's
// last transaction is missing or another stands at its LSN, or a
// transaction with events that was never published lies before the
// checkpoint. The server's history was rewritten on the same timeline
// (a restored copy of its data directory, whose applications wrote past
// the checkpoint's LSN), and the transactions the checkpoint covers on it
// would be skipped.
type ReplayError struct {
	Checkpoint Checkpoint
	// From is where the replay began: the slot's confirmed position.
	From pglogrepl.LSN
	// Found is what the server sent, at Found.CommitLSN; zero when it
	// sent nothing at the last transaction's LSN and its WAL was read
	// past it, to Passed. Unpublished says Found holds events the
	// checkpoint covers although none were published there.
	Found       Sent
	Passed      pglogrepl.LSN
	Unpublished bool
}

func (e *ReplayError) Error() string {
	last, f := e.Checkpoint.Last, e.Found
	var found string
	switch {
	case e.Passed != 0:
		found = fmt.Sprintf("no transaction at %s, and was read past it to %s", last.CommitLSN, e.Passed)
	case f.CommitLSN == last.CommitLSN:
		found = fmt.Sprintf("transaction %d committed at %s (%s) instead", f.Xid, f.CommitLSN, f.CommitTime.UTC().Format(time.RFC3339Nano))
	case e.Unpublished:
		found = fmt.Sprintf("transaction %d committed at %s with %d events, after it and before the checkpoint, which were never published",
			f.Xid, f.CommitLSN, f.Events)
	default:
		found = fmt.Sprintf("no transaction at %s, but transaction %d committed at %s", last.CommitLSN, f.Xid, f.CommitLSN)
	}
	return fmt.Sprintf("checkpoint %s records %s as the last one published, but the server's WAL, replayed from the slot's position %s, has %s",
		e.Checkpoint, last, e.From, found)
}

// witness checks a replay against the resume checkpoint's last
// transaction, from the slot's confirmed position up to the end of what
// the checkpoint covers. Before the last transaction nothing can be told
// one by one; the last one itself, when the slot is at or before it, must
// come again as it was; after it, what the checkpoint covers must hold no
// events, since none were published there.
type witness struct {
	resume Checkpoint
	from   pglogrepl.LSN
	// needLast: the slot is at or before the last transaction's commit,
	// so the server sends it again; sawLast once it did.
	needLast, sawLast bool
	// done once the replay passed what the checkpoint covers, or when
	// there is nothing to check.
	done bool
}

func newWitness(resume Checkpoint, slotConfirmed pglogrepl.LSN) witness {
	w := witness{resume: resume, from: slotConfirmed}
	l := resume.Last
	w.needLast = l.Known() && slotConfirmed <= l.CommitLSN
	// Within a takeover's stretch replays are Debezium's too, and no
	// transaction of the stretch is walstream's to witness.
	w.done = !l.Known() || !w.needLast && slotConfirmed >= resume.LSN || resume.TakeoverAhead() != nil
	return w
}

// sent checks a transaction the server sent, replayed or not.
func (w *witness) sent(s Sent) error {
	if w.done {
		return nil
	}
	l := w.resume.Last
	switch {
	case s.CommitLSN < l.CommitLSN:
		return nil
	case s.CommitLSN == l.CommitLSN:
		if s.Xid != l.Xid || !s.CommitTime.Equal(l.CommitTime) {
			return &ReplayError{Checkpoint: w.resume, From: w.from, Found: s}
		}
		w.sawLast = true
	case w.needLast && !w.sawLast:
		return &ReplayError{Checkpoint: w.resume, From: w.from, Found: s}
	case s.Events > 0 && w.resume.SkipTx(s.CommitLSN):
		return &ReplayError{Checkpoint: w.resume, From: w.from, Found: s, Unpublished: true}
	}
	w.done = s.CommitLSN > l.CommitLSN && s.CommitLSN >= w.resume.LSN
	return nil
}

// decodedTo checks the server's word that everything committing before
// lsn has been sent (a keepalive's position).
func (w *witness) decodedTo(lsn pglogrepl.LSN) error {
	if w.done || lsn <= w.resume.Last.CommitLSN || lsn < w.resume.LSN {
		return nil
	}
	if w.needLast && !w.sawLast {
		return &ReplayError{Checkpoint: w.resume, From: w.from, Passed: lsn}
	}
	w.done = true
	return nil
}
