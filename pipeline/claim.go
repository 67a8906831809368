package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/walstream/walstream/checkpoint"
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
}

func (e *SharedKeyError) Error() string {
	return fmt.Sprintf("two streams claim checkpoint key %q in topic %s: this stream (stream %s: database %s, slot %s, system %s) "+
		"and the one whose checkpoint is there (%s: %s); each stream sharing a Kafka cluster needs its own stream name, "+
		"which keys its checkpoints and transactional id (see docs/kafka.md, Many streams on one Kafka cluster)",
		e.Key, e.Topic, e.Stream, e.Database, e.Slot, e.SystemID, e.Other, e.OtherIdentity)
}

// claim reads the checkpoint under the stream's key once, before the first
// session fences anything, and refuses one another stream wrote. A stream
// whose key holds nothing, but whose checkpoint an earlier version wrote
// under the slot's name, keeps that key and its transactional id.
func (s *session) claim(ctx context.Context, srv replication.Server) error {
	cfg := s.cfg
	cp, at, found, legacy, err := findCheckpoint(ctx, cfg, srv.Database)
	if err != nil {
		return onKafka(err)
	}
	if legacy {
		s.log.Info("this stream's checkpoint is under the key earlier versions used: keeping that key and transactional id "+
			"(see docs/kafka.md, Many streams on one Kafka cluster)", "checkpoint_key", cfg.LegacyKey,
			"transactional_id", cfg.LegacyTransactionalID, "checkpoint", cp.String(), "written_at", at)
		cfg.CheckpointKey, cfg.TransactionalID = cfg.LegacyKey, cfg.LegacyTransactionalID
	}
	if found {
		if err := owned(cp, cfg, srv); err != nil {
			return err
		}
		// Same names, another system: a second cluster's stream or a
		// restore. Stop before fencing, which would abort the other
		// stream's open transaction were it the first.
		if cp.Identity.Known() && cp.Identity.SystemID != srv.SystemID && !cfg.Accept.SystemChange {
			return &DivergedError{Placement: Placement{Verdict: SystemChanged}, Checkpoint: cp, Server: srv, Events: -1,
				Slot: cfg.Names.Slot, CheckpointKey: cfg.CheckpointKey, Stream: cfg.Stream}
		}
	}
	s.claimed = true
	return nil
}

// findCheckpoint reads the checkpoint under cfg's key or, when that holds
// none, under LegacyKey if an earlier version wrote this slot's checkpoint
// of database there; legacy says it was found there.
func findCheckpoint(ctx context.Context, cfg *Config, database string) (cp checkpoint.Checkpoint, at time.Time, found, legacy bool, err error) {
	cp, at, found, err = publish.ReadCheckpoint(ctx, cfg.Kafka, cfg.CheckpointTopic, cfg.CheckpointKey)
	if err != nil {
		return cp, at, false, false, fmt.Errorf("reading the checkpoint of stream %s (key %q): %w", cfg.Stream, cfg.CheckpointKey, err)
	}
	if found || cfg.LegacyKey == "" || cfg.LegacyKey == cfg.CheckpointKey {
		return cp, at, found, false, nil
	}
	old, oldAt, oldFound, err := publish.ReadCheckpoint(ctx, cfg.Kafka, cfg.CheckpointTopic, cfg.LegacyKey)
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
// apart (claim).
func owned(cp checkpoint.Checkpoint, cfg *Config, srv replication.Server) error {
	o := cp.Owner
	if (o.Slot == "" || o.Slot == cfg.Names.Slot) && (cp.Identity.Database == "" || cp.Identity.Database == srv.Database) {
		return nil
	}
	return &SharedKeyError{Key: cfg.CheckpointKey, Topic: cfg.CheckpointTopic, Stream: cfg.Stream, Slot: cfg.Names.Slot,
		Database: srv.Database, SystemID: srv.SystemID, Other: o, OtherIdentity: cp.Identity}
}
