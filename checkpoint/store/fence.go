package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// CoordinatorFate asks the transaction coordinator what became of the
// transaction of o, an open record of the stream's transactional id: it
// committed, or aborted, when the id's last transaction, under o's
// producer id and epoch, is committing or committed, aborting or aborted;
// FateOpen, undecided, when it is still open or the coordinator no longer
// tells (the id's producer id was initialized since: ask before the
// producer's Fence, which makes the coordinator forget how the last
// transaction ended). A coordinator that cannot be asked (loading its log
// after a restart, unreachable) decides nothing: FateOpen, with the error.
func (c *Checkpoints) CoordinatorFate(ctx context.Context, o OpenRecord) (kafka.Fate, error) {
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		return kafka.FateOpen, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := kadm.NewClient(cl).DescribeTransactions(ctx, c.cfg.TransactionalID)
	if err != nil {
		return kafka.FateOpen, fmt.Errorf("describing transactional id %s: %w", c.cfg.TransactionalID, err)
	}
	t, ok := d[c.cfg.TransactionalID]
	if !ok {
		return kafka.FateOpen, fmt.Errorf("describing transactional id %s: the coordinator did not answer for it", c.cfg.TransactionalID)
	}
	if t.Err != nil {
		return kafka.FateOpen, fmt.Errorf("describing transactional id %s: %w", c.cfg.TransactionalID, t.Err)
	}
	return coordinatorFate(t, o), nil
}

// coordinatorFate is what t, the coordinator's description of a
// transactional id, says of the transaction of o: the id's last
// transaction is committing or committed (aborting or aborted) under o's
// producer id and epoch (transaction version 2 bumps the epoch as a
// transaction ends). Every transaction of walstream writes the checkpoint
// partition, and a later one's marker would have decided o: a record still
// open is of the last.
func coordinatorFate(t kadm.DescribedTransaction, o OpenRecord) kafka.Fate {
	if t.ProducerID != o.ProducerID || t.ProducerEpoch != o.ProducerEpoch && t.ProducerEpoch != o.ProducerEpoch+1 {
		return kafka.FateOpen
	}
	switch t.State {
	case "PrepareCommit", "CompleteCommit":
		return kafka.FateCommitted
	case "PrepareAbort", "CompleteAbort":
		return kafka.FateAborted
	}
	return kafka.FateOpen
}

// MarkerFate decides the transaction of o, a record its partition shows in
// a transaction still open, by the transaction's markers in the other
// topics it wrote, as the record names them (OpenRecord.Wrote):
// kafka.TransactionFate. FateOpen when they do not decide it, and with an
// error when the record names none (written by an earlier version) or they
// cannot be read.
func (c *Checkpoints) MarkerFate(ctx context.Context, o OpenRecord) (kafka.Fate, error) {
	topics := slices.DeleteFunc(slices.Clone(o.Wrote), func(t string) bool { return t == c.cfg.Topic })
	if len(topics) == 0 {
		return kafka.FateOpen, errors.New("the record does not name other topics its transaction wrote (an earlier version of walstream wrote it)")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f, err := kafka.TransactionFate(ctx, c.opts, topics, o.ProducerID, o.ProducerEpoch)
	if err != nil {
		return kafka.FateOpen, fmt.Errorf("reading the markers of producer id %d epoch %d in topics %s: %w", o.ProducerID, o.ProducerEpoch,
			strings.Join(topics, ", "), kafka.Authorization(err, ""))
	}
	return f, nil
}

// AbortLeftOpen aborts the transaction of o, which did not commit, on
// every partition of the topics it wrote where it is still open
// (kafka.AbortLeftOpen): the stream's next commit would commit the records
// there with its own. A record of an earlier version names no topics:
// only the checkpoint topic is looked at.
func (c *Checkpoints) AbortLeftOpen(ctx context.Context, o OpenRecord) ([]string, error) {
	topics := o.Wrote
	if !slices.Contains(topics, c.cfg.Topic) {
		topics = append(slices.Clip(topics), c.cfg.Topic)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return kafka.AbortLeftOpen(ctx, c.opts, topics, o.ProducerID, o.ProducerEpoch)
}

// WroteNothingElse reports whether the transaction of o wrote nothing but
// its checkpoint record, as the record says (Wrote): taking it for one
// that never committed publishes nothing again.
func (o OpenRecord) WroteNothingElse(checkpointTopic string) bool {
	return len(o.Wrote) == 1 && o.Wrote[0] == checkpointTopic
}
