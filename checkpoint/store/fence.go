package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/kafka"
)

// FenceOthers initializes the producer id of each of ids, other
// transactional ids that wrote this stream's checkpoints: an instance of
// the stream deployed under another name (an earlier version's default, or
// a setting since changed). That aborts the transaction such an instance
// has open and bumps its epoch, so that it can commit nothing more after
// this instance read the checkpoint. It needs the Write ACL on each id.
func (c *Checkpoints) FenceOthers(ctx context.Context, ids []string) error {
	for _, id := range ids {
		cl, err := kgo.NewClient(append(c.opts[:len(c.opts):len(c.opts)], kgo.TransactionalID(id),
			kgo.TransactionTimeout(kafka.TransactionTimeout(c.cfg.CommitTimeout)))...)
		if err != nil {
			return fmt.Errorf("creating Kafka client: %w", err)
		}
		_, _, err = cl.ProducerID(ctx)
		cl.Close()
		if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			return fmt.Errorf("%w: the principal needs the Write ACL on transactional id %s, which wrote checkpoint key %s before, to fence it: %w",
				kafka.ErrAuthorization, id, c.cfg.Key, err)
		}
		if err != nil {
			return kafka.Authorization(fmt.Errorf("fencing transactional id %s, which wrote checkpoint key %s before: %w", id, c.cfg.Key, err), "")
		}
	}
	return nil
}

// CommittedOpen reports whether the transaction coordinator holds the
// transaction of o, an open record of the stream's transactional id, as
// committed, so that the record is committed whatever its partition
// shows. Ask it before the producer's Fence: initializing the producer id makes the
// coordinator forget how the last transaction ended. A coordinator that
// cannot be asked answers no.
func (c *Checkpoints) CommittedOpen(ctx context.Context, o OpenRecord) bool {
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := kadm.NewClient(cl).DescribeTransactions(ctx, c.cfg.TransactionalID)
	if err != nil {
		return false
	}
	t, ok := d[c.cfg.TransactionalID]
	return ok && t.Err == nil && coordinatorCommitted(t, o)
}

// coordinatorCommitted reports whether t, the coordinator's description of
// a transactional id, says that the transaction of o committed: the id's
// last transaction is committing or committed, under o's producer id and
// epoch (transaction version 2 bumps the epoch as a transaction ends).
// Every transaction of walstream writes the checkpoint partition, and a
// later one's marker would have decided o: a record still open is of the
// last.
func coordinatorCommitted(t kadm.DescribedTransaction, o OpenRecord) bool {
	return t.ProducerID == o.ProducerID && (t.State == "PrepareCommit" || t.State == "CompleteCommit") &&
		(t.ProducerEpoch == o.ProducerEpoch || t.ProducerEpoch == o.ProducerEpoch+1)
}
