package checkpoint

import "github.com/jackc/pglogrepl"

// Past reports whether the checkpoint covers WAL at or after lsn: a whole
// transaction ending after it, or events of a transaction whose commit
// record starts at or after it. A checkpoint not Past a timeline's fork
// covers only WAL the new timeline shares.
func (c Checkpoint) Past(lsn pglogrepl.LSN) bool {
	return c.LSN > lsn || (c.PartialCommitLSN != 0 && c.PartialCommitLSN >= lsn)
}

// EventsPast counts the events published after the WAL position fork, up
// to the last record of history, the checkpoint key's records oldest
// first: the last record's count minus that of the newest record that is
// not Past fork. Each Kafka transaction commits one record, so when the
// transaction after that record also held events from before fork, they
// are counted too; walstream's batches end when the outbox is idle, so
// that is rare. It returns -1 when the records cannot tell: none is at or
// before fork (a compacted topic keeps only the newest), one in between
// has no count or belongs to another system, or a gap was accepted in
// between, after which LSNs are no longer comparable.
func EventsPast(history []Checkpoint, fork pglogrepl.LSN) int64 {
	if len(history) == 0 {
		return -1
	}
	last := history[len(history)-1]
	if !last.Counted {
		return -1
	}
	for i := len(history) - 1; i >= 0; i-- {
		r := history[i]
		if !r.Counted || r.Gap != last.Gap || r.Identity.SystemID != last.Identity.SystemID || r.Events > last.Events {
			return -1
		}
		if !r.Past(fork) {
			return int64(last.Events - r.Events)
		}
	}
	return -1
}
