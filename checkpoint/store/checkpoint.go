package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/kafka"
)

// Config says where a stream's checkpoints are and who writes them.
type Config struct {
	Kafka kafka.Settings
	// Topic is the checkpoint topic, Key the stream's checkpoint key.
	Topic, Key string
	// TransactionalID is the stream's, which its producer writes under.
	TransactionalID string
	// CommitTimeout is the producer's: the transactions of the ids
	// FenceOthers fences time out as the producer's do.
	CommitTimeout time.Duration
	// TopicCreation, when set, says how the checkpoint topic is created
	// when missing.
	TopicCreation *kafka.TopicCreation
}

// Checkpoints are a stream's checkpoints in Kafka, read with clients of
// their own.
type Checkpoints struct {
	cfg  Config
	opts []kgo.Opt
	log  *slog.Logger
}

// New returns the checkpoints cfg names; franz-go's warnings go to log.
func New(cfg Config, log *slog.Logger) *Checkpoints {
	return &Checkpoints{cfg: cfg, opts: append(cfg.Kafka.Opts(), kafka.WithLogger(log.With("component", "kafka"))), log: log}
}

// Read is what a read of a stream's checkpoint key found.
type Read struct {
	// Checkpoint is the last committed checkpoint under the key, At the
	// time its record was written; Found is false when none was ever
	// committed.
	Checkpoint checkpoint.Checkpoint
	At         time.Time
	Found      bool
	// Writer is the transactional id that committed it: as the record
	// names it or, in a record of an earlier version, as the transaction
	// coordinator knows its producer id; empty when neither tells.
	Writer string
	// Open are the checkpoint records under the key in transactions still
	// open when the read reached the end of the partition.
	Open []OpenRecord
}

// OpenRecord is a checkpoint record in a transaction still open.
type OpenRecord struct {
	Partition     int32
	Offset        int64
	ProducerID    int64
	ProducerEpoch int16
	// TransactionalID is the producer's, as the transaction coordinator
	// knows it; empty when it does not say.
	TransactionalID string
	// Checkpoint is the record decoded, zero when it does not decode.
	Checkpoint checkpoint.Checkpoint
	// Wrote are the topics its transaction wrote to, as the record names
	// them (checkpoint.Wrote); none in a record of an earlier version.
	Wrote []string
}

func (o OpenRecord) String() string {
	who := fmt.Sprintf("producer id %d", o.ProducerID)
	if o.TransactionalID != "" {
		who = fmt.Sprintf("transactional id %s (%s)", o.TransactionalID, who)
	}
	return fmt.Sprintf("%s at partition %d offset %d, written by %s", o.Checkpoint.Owner, o.Partition, o.Offset, who)
}

// ReadCheckpoint reads the stream's checkpoint key, creating the
// checkpoint topic if it is missing and warning if it is weaker than
// wanted (kafka.EnsureCheckpointTopic). Call it after the producer's Fence:
// only then can no older instance under this transactional id still commit
// one.
func (c *Checkpoints) ReadCheckpoint(ctx context.Context) (Read, error) {
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		return Read{}, fmt.Errorf("creating Kafka client: %w", err)
	}
	_, err = kafka.EnsureCheckpointTopic(ctx, cl, c.cfg.Topic, c.cfg.TopicCreation, c.log)
	cl.Close()
	if err != nil {
		return Read{}, kafka.Authorization(err, c.cfg.TransactionalID)
	}
	r, err := readCheckpoint(ctx, c.opts, c.cfg.Topic, c.cfg.Key, true)
	return r, kafka.Authorization(err, c.cfg.TransactionalID)
}

// ReadCheckpoint reads the last checkpoint committed under key in topic,
// with clients of its own; records of transactions still open are left
// out. It changes nothing, so an operator's tool may call it while
// walstream runs.
func ReadCheckpoint(ctx context.Context, conn kafka.Settings, topic, key string) (cp checkpoint.Checkpoint, at time.Time, found bool, err error) {
	r, err := readCheckpoint(ctx, conn.Opts(), topic, key, false)
	return r.Checkpoint, r.At, r.Found, err
}

// readCheckpoint reads the last checkpoint committed under key and the
// records under it in open transactions; with writers, it also asks the
// transaction coordinator for the transactional ids that records written
// by earlier versions do not name.
func readCheckpoint(ctx context.Context, connOpts []kgo.Opt, topic, key string, writers bool) (Read, error) {
	last, open, err := kafka.LastUnderKey(ctx, connOpts, topic, key)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		err = fmt.Errorf("%w: the principal needs the Read ACL on checkpoint topic %s: %w", kafka.ErrAuthorization, topic, err)
	}
	if err = kafka.Authorization(err, ""); err != nil {
		return Read{}, err
	}
	var r Read
	if last != nil {
		if r.Checkpoint, r.At, err = checkpoint.Decode(last.Value); err != nil {
			return Read{}, fmt.Errorf("checkpoint key %s in topic %s, offset %d: %w", key, topic, last.Offset, err)
		}
		r.Found, r.Writer = true, r.Checkpoint.Owner.TransactionalID
	}
	for _, rec := range open {
		o := OpenRecord{Partition: rec.Partition, Offset: rec.Offset, ProducerID: rec.ProducerID, ProducerEpoch: rec.ProducerEpoch}
		o.Checkpoint, _, _ = checkpoint.Decode(rec.Value)
		o.Wrote = checkpoint.Wrote(rec.Value)
		o.TransactionalID = o.Checkpoint.Owner.TransactionalID
		r.Open = append(r.Open, o)
	}
	if !writers || (r.Writer != "" || last == nil || !last.Attrs.IsTransactional()) && len(open) == 0 {
		return r, nil
	}
	var pids []int64
	if r.Writer == "" && last != nil && last.Attrs.IsTransactional() {
		pids = append(pids, last.ProducerID)
	}
	for _, o := range r.Open {
		if o.TransactionalID == "" {
			pids = append(pids, o.ProducerID)
		}
	}
	ids := transactionalIDs(ctx, connOpts, pids)
	if r.Writer == "" && last != nil {
		r.Writer = ids[last.ProducerID]
	}
	for i := range r.Open {
		if r.Open[i].TransactionalID == "" {
			r.Open[i].TransactionalID = ids[r.Open[i].ProducerID]
		}
	}
	return r, nil
}

// transactionalIDs asks the transaction coordinators which transactional
// ids hold the producer ids (ListTransactions, KIP-664). A coordinator
// forgets a transactional id unused for transactional.id.expiration.ms
// (seven days by default), and answers only for the ids the principal
// may describe: ids it does not name are missing from the map.
func transactionalIDs(ctx context.Context, connOpts []kgo.Opt, pids []int64) map[int64]string {
	ids := make(map[int64]string)
	if len(pids) == 0 {
		return ids
	}
	cl, err := kgo.NewClient(connOpts...)
	if err != nil {
		return ids
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	listed, _ := kadm.NewClient(cl).ListTransactions(ctx, pids, nil)
	for _, t := range listed.Sorted() {
		ids[t.ProducerID] = t.TxnID
	}
	return ids
}
