package publish

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FenceOthers initializes the producer id of each of ids, other
// transactional ids that wrote this stream's checkpoints: an instance of
// the stream deployed under another name (an earlier version's default, or
// a setting since changed). That aborts the transaction such an instance
// has open and bumps its epoch, so that it can commit nothing more after
// this instance read the checkpoint. It needs the Write ACL on each id.
func (p *Producer) FenceOthers(ctx context.Context, ids []string) error {
	for _, id := range ids {
		cl, err := kgo.NewClient(append(p.opts[:len(p.opts):len(p.opts)], kgo.TransactionalID(id),
			kgo.TransactionTimeout(TransactionTimeout(p.cfg.CommitTimeout)))...)
		if err != nil {
			return fmt.Errorf("creating Kafka client: %w", err)
		}
		_, _, err = cl.ProducerID(ctx)
		cl.Close()
		if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			return fmt.Errorf("%w: the principal needs the Write ACL on transactional id %s, which wrote checkpoint key %s before, to fence it: %w",
				ErrAuthorization, id, p.cfg.CheckpointKey, err)
		}
		if err != nil {
			return authorization(fmt.Errorf("fencing transactional id %s, which wrote checkpoint key %s before: %w", id, p.cfg.CheckpointKey, err))
		}
	}
	return nil
}
