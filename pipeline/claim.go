package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
)

// SharedKeyError means the checkpoint key holds the checkpoints of another
// stream: another slot or database. Going on would resume from that
// stream's position.
type SharedKeyError struct {
	Key, Topic string
	// This stream's names, and those the checkpoint record gives.
	Stream, Slot, Database string
	Other                  checkpoint.Owner
	OtherIdentity          checkpoint.Identity
	SystemID               string // this stream's server
	// Open: the other stream's record is in a transaction still open.
	Open bool
}

func (e *SharedKeyError) Error() string {
	open := ""
	if e.Open {
		open = ", in a transaction still open"
	}
	return fmt.Sprintf("two streams claim checkpoint key %q in topic %s: this stream (stream %s: database %s, slot %s, system %s) "+
		"and the one whose checkpoint is there (%s: %s%s); each stream sharing a Kafka cluster needs its own stream name, "+
		"which keys its checkpoints and transactional id (see docs/kafka.md, Many streams on one Kafka cluster)",
		e.Key, e.Topic, e.Stream, e.Database, e.Slot, e.SystemID, e.Other, e.OtherIdentity, open)
}

// claim reads the checkpoint under the stream's key before the first
// session fences anything, and refuses one another stream wrote. A stream
// whose key holds nothing, but whose checkpoint an earlier version wrote
// under the slot's name, keeps that key (and, when its transactional id is
// left to its default, the one earlier versions used). resume checks the
// key again at every session, before and after fencing.
func (s *session) claim(ctx context.Context, srv replication.Server) error {
	cfg := s.cfg
	cp, at, found, legacy, err := findCheckpoint(ctx, cfg, srv.Database)
	if err != nil {
		return onKafka(err)
	}
	if legacy {
		if cfg.LegacyTransactionalID != "" {
			cfg.TransactionalID = cfg.LegacyTransactionalID
		}
		cfg.CheckpointKey = cfg.LegacyKey
		s.log.Info("this stream's checkpoint is under the key earlier versions used: keeping that key (see docs/kafka.md, Many streams on one Kafka cluster)",
			"checkpoint_key", cfg.CheckpointKey, "transactional_id", cfg.TransactionalID, "checkpoint", cp.String(), "written_at", at)
	}
	if found {
		if err := claimed(cp, cfg, srv); err != nil {
			return err
		}
	}
	s.claimed = true
	return nil
}

// claimed refuses a checkpoint of another stream, before anything is
// fenced: another slot or database (SharedKeyError), or the same names on
// another system, a second cluster's stream or a restore, unless an
// operator accepted the change. Fencing would abort the other stream's
// open transaction were it the first.
func claimed(cp checkpoint.Checkpoint, cfg *Config, srv replication.Server) error {
	if err := owned(cp, cfg, srv); err != nil {
		return err
	}
	if cp.Identity.Known() && cp.Identity.SystemID != srv.SystemID && !cfg.Accept.SystemChange {
		return &DivergedError{Placement: Placement{Verdict: SystemChanged}, Checkpoint: cp, Server: srv, Events: -1,
			Slot: cfg.Names.Slot, CheckpointKey: cfg.CheckpointKey, Stream: cfg.Stream}
	}
	return nil
}

// findCheckpoint reads the checkpoint under cfg's key or, when that holds
// none, under LegacyKey if an earlier version wrote this slot's checkpoint
// of database there; legacy says it was found there.
func findCheckpoint(ctx context.Context, cfg *Config, database string) (cp checkpoint.Checkpoint, at time.Time, found, legacy bool, err error) {
	cp, at, found, err = store.ReadCheckpoint(ctx, cfg.Kafka, cfg.CheckpointTopic, cfg.CheckpointKey)
	if err != nil {
		return cp, at, false, false, fmt.Errorf("reading the checkpoint of stream %s (key %q): %w", cfg.Stream, cfg.CheckpointKey, err)
	}
	if found || cfg.LegacyKey == "" || cfg.LegacyKey == cfg.CheckpointKey {
		return cp, at, found, false, nil
	}
	old, oldAt, oldFound, err := store.ReadCheckpoint(ctx, cfg.Kafka, cfg.CheckpointTopic, cfg.LegacyKey)
	if err != nil {
		return cp, at, false, false, fmt.Errorf("reading the checkpoint under key %q, which earlier versions wrote: %w", cfg.LegacyKey, err)
	}
	if oldFound && old.Owner.Slot == cfg.Names.Slot && (old.Identity.Database == "" || database == "" || old.Identity.Database == database) {
		return old, oldAt, true, true, nil
	}
	return cp, at, false, false, nil
}

// owned reports a checkpoint another stream wrote: another slot or
// database. Its stream name is not compared: a stream renamed with its
// key kept is still the stream. One of the same slot and database from
// another system is a second cluster or a restore, which nothing tells
// apart (claimed).
func owned(cp checkpoint.Checkpoint, cfg *Config, srv replication.Server) error {
	o := cp.Owner
	if (o.Slot == "" || o.Slot == cfg.Names.Slot) && (cp.Identity.Database == "" || cp.Identity.Database == srv.Database) {
		return nil
	}
	return &SharedKeyError{Key: cfg.CheckpointKey, Topic: cfg.CheckpointTopic, Stream: cfg.Stream, Slot: cfg.Names.Slot,
		Database: srv.Database, SystemID: srv.SystemID, Other: o, OtherIdentity: cp.Identity}
}

// fenceAndRead fences the older instances of the stream and reads its
// checkpoint, which is final only once none of them can commit. The key is
// checked to be this stream's before anything is fenced (claimed), at
// every session: another stream deployed with the same names may have
// written it since the last one. Besides its own transactional id it
// fences those that wrote the stream's checkpoints under another name, its
// predecessors, found in the key's last record and in records of
// transactions still open. A checkpoint older than prior.committed, the
// last one this process committed, is refused: resuming from it would
// publish again what Kafka holds.
//
// unmarked is set when the checkpoint returned is one Kafka committed (it
// acknowledged the commit to this process, or its coordinator said so
// before the fencing) whose record the checkpoint partition still shows in
// an open transaction (publish.Acknowledged): its events are in Kafka, but
// read_committed readers of the key do not see it yet.
func fenceAndRead(ctx context.Context, src checkpointSource, cfg *Config, srv replication.Server, prior *earlier, log *slog.Logger) (rd store.Read, unmarked bool, err error) {
	rd, err = src.ReadCheckpoint(ctx)
	if err != nil {
		return rd, false, onKafka(err)
	}
	if rd.Found {
		if err := claimed(rd.Checkpoint, cfg, srv); err != nil {
			return rd, false, err
		}
	}
	// What became of the transaction of an open record of the stream's
	// own id is asked before the fencing, which makes the coordinator
	// forget it: one committed is resumed after like one acknowledged, one
	// aborted is not waited for. A coordinator that cannot answer decides
	// nothing.
	for _, o := range rd.Open {
		if o.TransactionalID != cfg.TransactionalID || prior.acked.Is(o) {
			continue
		}
		f, err := src.CoordinatorFate(ctx, o)
		switch {
		case err != nil:
			log.Warn("the transaction coordinator cannot say what became of the transaction of an open checkpoint record: undecided", "record", o.String(), "err", err)
		case f == kafka.FateCommitted:
			log.Info("the transaction coordinator reports the transaction of an open checkpoint record committed", "record", o.String())
			prior.acked = publish.Acknowledged{Partition: o.Partition, Offset: o.Offset, Checkpoint: o.Checkpoint}
		case f == kafka.FateAborted:
			log.Info("the transaction coordinator reports the transaction of an open checkpoint record aborted", "record", o.String())
			prior.markAborted(o)
		}
	}
	fenced := []string{cfg.TransactionalID}
	ids := predecessors(rd, cfg, srv, fenced)
	if err := src.Fence(ctx); err != nil {
		return rd, false, onKafka(err)
	}
	// Another round covers a predecessor the last read could not see: one
	// that committed under the key in between.
	for round := 0; ; round++ {
		if len(ids) > 0 {
			log.Warn("fencing transactional ids that wrote this stream's checkpoints under another name, so that an instance still running "+
				"under one of them commits nothing more (see docs/kafka.md, Many streams on one Kafka cluster)",
				"transactional_ids", strings.Join(ids, ","), "checkpoint_key", cfg.CheckpointKey, "transactional_id", cfg.TransactionalID)
			if err := src.FenceOthers(ctx, ids); err != nil {
				return rd, false, onKafka(err)
			}
			fenced = append(fenced, ids...)
		}
		if rd, err = src.ReadCheckpoint(ctx); err != nil {
			return rd, false, onKafka(err)
		}
		if ids = predecessors(rd, cfg, srv, fenced); len(ids) == 0 || round == 2 {
			break
		}
	}
	// A record of a transactional id fenced above should be decided by
	// now: the coordinator ends that id's transaction, writing markers to
	// every partition it knew of, before the fencing returns. The chaos
	// suite saw one still open after the fencing (its own id's, after a
	// broker restart) and decided two seconds later, so such a record is
	// waited for, up to the transaction timeout: resuming without a record
	// that then commits would publish its events again. Once per record
	// and process: the replication stream is idle meanwhile, and a server
	// whose wal_sender_timeout is shorter ends it.
	if rd, err = awaitFenced(ctx, src, rd, fenced, cfg, prior, log); err != nil {
		return rd, false, err
	}
	if rd.Found {
		if err := owned(rd.Checkpoint, cfg, srv); err != nil {
			return rd, false, err
		}
	}
	for _, o := range rd.Open {
		var sk *SharedKeyError
		if err := owned(o.Checkpoint, cfg, srv); errors.As(err, &sk) {
			sk.Open = true
			return rd, false, err
		}
	}
	// A record Kafka committed (acked) is resumed after. Any other past the
	// wait is of a hanging transaction (Kafka lost track of the partition),
	// which holds the partition's last stable offset until it is ended:
	// what became of it is read from its markers in the other topics it
	// wrote, never guessed, and one that did not commit is aborted where
	// it is left open. Resuming before a record whose
	// transaction committed would publish its events again.
	var undecided []undecidedRecord
	var leftOpen error
	rd.Open = slices.DeleteFunc(rd.Open, func(o store.OpenRecord) bool {
		if !slices.Contains(fenced, o.TransactionalID) {
			return false
		}
		if !prior.acked.Is(o) {
			f, why := decide(ctx, src, o, prior, cfg)
			switch f {
			case kafka.FateOpen:
				undecided = append(undecided, undecidedRecord{o, why})
				return true
			case kafka.FateAborted:
				// Its markers are missing: the producer id's next commit
				// on a partition where it is open would commit its records
				// with its own, publishing them twice. Aborted there first.
				ended, err := src.AbortLeftOpen(ctx, o)
				if err != nil {
					leftOpen = errors.Join(leftOpen, fmt.Errorf("%w: the transaction of checkpoint record %s did not commit (%s) but is still open "+
						"where it wrote, and ending it there failed: the stream's next commit would commit its records with its own, publishing "+
						"them twice; end it on each partition where kafka-transactions.sh describe-producers shows producer id %d's transaction open "+
						"(kafka-transactions.sh abort --topic <topic> --partition <n> --start-offset <its start>), then start walstream again: %w",
						errLeftOpen, o, why, o.ProducerID, kafka.Authorization(err, "")))
					return true
				}
				log.Warn("a checkpoint record of a fenced transactional id is in a transaction Kafka left hanging, which did not commit: "+
					"walstream aborted it where it was still open and goes on without it (see docs/kafka.md, A transaction holding the checkpoint topic)",
					"record", o.String(), "decided_by", why, "aborted_in", strings.Join(ended, ","))
				return true
			}
			log.Warn("a checkpoint record of a fenced transactional id is in a transaction Kafka left hanging, which committed", "record", o.String(), "decided_by", why)
			prior.acked = publish.Acknowledged{Partition: o.Partition, Offset: o.Offset, Checkpoint: o.Checkpoint}
		}
		// Kafka committed it: resuming before it would publish its events
		// again.
		log.Warn("a checkpoint record of a transaction Kafka committed (it acknowledged the commit to this process, or its coordinator "+
			"or its markers in the topics it wrote say so) is in a transaction its partition shows open: walstream resumes after it and "+
			"commits a checkpoint at once, which decides the record (see docs/kafka.md, When a commit does not become visible)",
			"record", o.String(), "checkpoint", o.Checkpoint.String())
		if !rd.Found || rd.Checkpoint.Less(o.Checkpoint) {
			rd.Checkpoint, rd.Found, rd.Writer, unmarked = o.Checkpoint, true, o.TransactionalID, true
		}
		return true
	})
	if len(undecided) > 0 {
		return rd, false, &UndecidedCheckpointError{Key: cfg.CheckpointKey, Topic: cfg.CheckpointTopic, Records: undecided}
	}
	if leftOpen != nil {
		return rd, false, onKafka(leftOpen)
	}
	if len(rd.Open) > 0 {
		return rd, false, onKafka(&OpenCheckpointError{Key: cfg.CheckpointKey, Topic: cfg.CheckpointTopic, TransactionalID: cfg.TransactionalID, Open: rd.Open})
	}
	if done := prior.committed; done != (checkpoint.Checkpoint{}) && (!rd.Found || olderThan(rd.Checkpoint, done)) {
		return rd, false, onKafka(&RegressedError{Key: cfg.CheckpointKey, Topic: cfg.CheckpointTopic, Read: rd.Checkpoint, Found: rd.Found, Committed: done})
	}
	return rd, unmarked, nil
}

// predecessors are the transactional ids, other than those fenced already,
// that wrote this stream's last checkpoint or hold records under its key
// in open transactions.
func predecessors(rd store.Read, cfg *Config, srv replication.Server, fenced []string) []string {
	var ids []string
	add := func(id string, cp checkpoint.Checkpoint) {
		if id != "" && !slices.Contains(fenced, id) && !slices.Contains(ids, id) && owned(cp, cfg, srv) == nil {
			ids = append(ids, id)
		}
	}
	if rd.Found {
		add(rd.Writer, rd.Checkpoint)
	}
	for _, o := range rd.Open {
		add(o.TransactionalID, o.Checkpoint)
	}
	return ids
}

// OpenCheckpointError means checkpoint records under the stream's key are
// in transactions still open after this instance fenced its transactional
// id and every predecessor it could name: a producer the transaction
// coordinator does not name writes the key. Kafka aborts such a
// transaction after its timeout; a new session reads the key again.
type OpenCheckpointError struct {
	Key, Topic, TransactionalID string
	Open                        []store.OpenRecord
}

func (e *OpenCheckpointError) Error() string {
	var open []string
	for _, o := range e.Open {
		open = append(open, o.String())
	}
	return fmt.Sprintf("checkpoint key %q in topic %s holds records in transactions still open after transactional id %s was fenced: %s; "+
		"another producer writes this stream's key (an instance of the stream under a transactional id the coordinator does not name, "+
		"or another stream with the same checkpoint key); walstream waits until Kafka ends the transaction, at its timeout at the latest "+
		"(see docs/kafka.md, Many streams on one Kafka cluster)", e.Key, e.Topic, e.TransactionalID, strings.Join(open, "; "))
}

// RegressedError means Kafka returned a checkpoint older than one this
// process committed under the key in the same history (olderThan), its
// commit marker read back: resuming from it would publish again what
// Kafka holds. Kafka lost records (the checkpoint topic deleted, a
// partition truncated by an unclean leader election), or answered from a
// replica behind. A new session reads it again; a new process resumes from
// whatever Kafka holds.
type RegressedError struct {
	Key, Topic string
	Read       checkpoint.Checkpoint
	Found      bool
	Committed  checkpoint.Checkpoint
}

func (e *RegressedError) Error() string {
	read := "no checkpoint"
	if e.Found {
		read = "checkpoint " + e.Read.String()
	}
	return fmt.Sprintf("Kafka returned %s under key %q in topic %s, older than checkpoint %s that this process committed there: "+
		"resuming from it would publish again what Kafka holds, so walstream reads it again; if Kafka lost the records (the topic deleted, "+
		"a partition truncated by an unclean leader election), restart walstream to resume from what Kafka holds (see docs/kafka.md, "+
		"When a commit does not become visible)", read, e.Key, e.Topic, e.Committed)
}

// olderThan reports whether read comes before committed in the stream's
// history. Positions are compared within one history only: after a change
// of system or database an operator accepted, the positions of the new one
// are no later or earlier than the old one's; of one system's timelines,
// the later one's checkpoints are the later ones (a failover the placement
// accepted may resume before the old timeline's last position). A
// checkpoint that names no system, written by an earlier version, is
// compared by position.
func olderThan(read, committed checkpoint.Checkpoint) bool {
	r, c := read.Identity, committed.Identity
	switch {
	case !r.Known() || !c.Known():
	case r.SystemID != c.SystemID || r.Database != c.Database:
		return false
	case r.Timeline != c.Timeline && r.Timeline != 0 && c.Timeline != 0:
		return r.Timeline < c.Timeline
	}
	return read.Less(committed)
}

// earlier is what the sessions of a process learned that the next one
// needs.
type earlier struct {
	// committed is the last checkpoint a session committed in Kafka: the
	// next one never resumes from an older one.
	committed checkpoint.Checkpoint
	// aborted are the checkpoint records of fenced transactional ids whose
	// transactions did not commit, as their coordinator said before the
	// fencing or their markers after a whole wait (awaitFenced), though
	// their partition shows them open: not waited for again.
	aborted map[recordAt]bool
	// acked is the last commit Kafka acknowledged to a session, or whose
	// transaction the coordinator reported committed: its record is
	// committed, whatever its partition shows.
	acked publish.Acknowledged
	// rewritten is what a session's replay found of a server whose
	// history is not the one published: the next session places the
	// same checkpoint there, and accepting phantoms goes on from the slot.
	rewritten *DivergedError
}

// samePosition reports whether a and b are one checkpoint of one history.
func samePosition(a, b checkpoint.Checkpoint) bool {
	return !a.Less(b) && !b.Less(a) && a.Identity == b.Identity && a.Last.CommitLSN == b.Last.CommitLSN && a.Last.Xid == b.Last.Xid
}

// remember takes done, the last checkpoint a session committed, as the
// one the next session may not resume before, unless it is older in the
// same history.
func (e *earlier) remember(done checkpoint.Checkpoint) {
	if done != (checkpoint.Checkpoint{}) && !olderThan(done, e.committed) {
		e.committed = done
	}
}

// recordAt is where a checkpoint record is: partition and offset.
type recordAt struct {
	partition int32
	offset    int64
}

func at(o store.OpenRecord) recordAt { return recordAt{o.Partition, o.Offset} }

// decide says what became of the transaction of o, a checkpoint record of
// a fenced transactional id still open after the wait, and how that is
// known: decided before in this process (by the coordinator, asked before
// the fencing, or by its markers), or read from its markers in the other
// topics it wrote. A transaction that wrote nothing but o is taken for one
// that never committed: resuming before it publishes nothing again.
// FateOpen when nothing decides it.
func decide(ctx context.Context, src checkpointSource, o store.OpenRecord, prior *earlier, cfg *Config) (kafka.Fate, string) {
	switch {
	case prior.aborted[at(o)]:
		return kafka.FateAborted, "decided before, by its coordinator or its markers"
	case o.WroteNothingElse(cfg.CheckpointTopic):
		prior.markAborted(o)
		return kafka.FateAborted, "its transaction wrote nothing but the record"
	}
	f, err := src.MarkerFate(ctx, o)
	switch {
	case err != nil:
		return kafka.FateOpen, err.Error()
	case f == kafka.FateOpen:
		return f, "no marker of its transaction in the topics it wrote decides it"
	case f == kafka.FateAborted:
		prior.markAborted(o)
	}
	return f, "its markers in the topics it wrote"
}

func (e *earlier) markAborted(o store.OpenRecord) {
	if e.aborted == nil {
		e.aborted = make(map[recordAt]bool)
	}
	e.aborted[at(o)] = true
}

// errLeftOpen: a transaction decided not to have committed is still
// open where it wrote, and walstream could not abort it there.
var errLeftOpen = errors.New("a transaction left open")

// undecidedRecord is a checkpoint record nothing decides, and why.
type undecidedRecord struct {
	store.OpenRecord
	why string
}

// UndecidedCheckpointError means a checkpoint record of a fenced
// transactional id is still in an open transaction after the wait, and
// nothing tells whether the transaction committed: not the coordinator,
// which forgets once the id is fenced, nor its markers in the other
// topics it wrote. Resuming before it would publish its events again if
// it committed; resuming after it would lose them if it did not. An
// operator decides: walstream stops.
type UndecidedCheckpointError struct {
	Key, Topic string
	Records    []undecidedRecord
}

func (e *UndecidedCheckpointError) Error() string {
	var recs []string
	for _, r := range e.Records {
		recs = append(recs, fmt.Sprintf("%s (%s)", r.OpenRecord, r.why))
	}
	o := e.Records[0]
	return fmt.Sprintf("checkpoint key %q in topic %s holds a record in a transaction Kafka left open after its transactional id was fenced, "+
		"and nothing tells whether it committed: %s. Resuming before it would publish its events again if it committed, and after it would "+
		"lose them if it did not, so walstream stops. See whether the events of producer id %d are in the outbox topics read_committed "+
		"(kafka-transactions.sh --bootstrap-server <broker> describe-producers --topic <outbox topic> --partition <n> names the producers of a partition): "+
		"if they are, write a COMMIT marker for the transaction on checkpoint partition %d, else abort it there "+
		"(kafka-transactions.sh --bootstrap-server <broker> abort --topic %s --partition %d --start-offset %d) and on every partition of the "+
		"outbox topics where describe-producers shows its transaction open, which the stream's next commit there would otherwise commit; "+
		"then start walstream again "+
		"(see docs/kafka.md, A transaction holding the checkpoint topic)",
		e.Key, e.Topic, strings.Join(recs, "; "), o.ProducerID, o.Partition, e.Topic, o.Partition, o.Offset)
}

// awaitFenced reads the checkpoint again until no record of a fenced
// transactional id is in an open transaction, but those found hanging
// before, or for the transaction timeout and 5 s (cfg.undecidedWait in
// tests); it returns the last read.
func awaitFenced(ctx context.Context, src checkpointSource, rd store.Read, fenced []string, cfg *Config, prior *earlier, log *slog.Logger) (store.Read, error) {
	wait := cfg.undecidedWait
	if wait == 0 {
		wait = kafka.TransactionTimeout(cfg.CommitTimeout) + 5*time.Second
	}
	undecided := func(rd store.Read) int {
		return slices.IndexFunc(rd.Open, func(o store.OpenRecord) bool {
			return slices.Contains(fenced, o.TransactionalID) && !prior.aborted[at(o)] && !prior.acked.Is(o)
		})
	}
	i := undecided(rd)
	if i < 0 {
		return rd, nil
	}
	log.Info("a checkpoint record of a fenced transactional id is in a transaction still open: waiting for Kafka to decide it before resuming",
		"record", rd.Open[i].String(), "up_to", wait)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return rd, ctx.Err()
		case <-t.C:
		}
		next, err := src.ReadCheckpoint(ctx)
		if err != nil {
			return rd, onKafka(err)
		}
		rd = next
		if undecided(rd) < 0 {
			log.Info("Kafka decided the open transaction of the fenced transactional id", "checkpoint", rd.Checkpoint.String(), "found", rd.Found)
			return rd, nil
		}
	}
	return rd, nil
}
