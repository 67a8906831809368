package store

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/kafka"
)

// CheckpointHistory returns the committed checkpoint records of the
// stream's key that the topic still holds, oldest first. The topic is
// compacted, so the broker may have kept only the newest.
func (c *Checkpoints) CheckpointHistory(ctx context.Context) ([]checkpoint.Checkpoint, error) {
	h, err := checkpointHistory(ctx, c.opts, c.cfg.Topic, c.cfg.Key)
	return h, kafka.Authorization(err, c.cfg.TransactionalID)
}

// CheckpointHistory is Checkpoints.CheckpointHistory for an operator's tool:
// it changes nothing.
func CheckpointHistory(ctx context.Context, conn kafka.Settings, topic, key string) ([]checkpoint.Checkpoint, error) {
	return checkpointHistory(ctx, conn.Opts(), topic, key)
}

func checkpointHistory(ctx context.Context, connOpts []kgo.Opt, topic, key string) ([]checkpoint.Checkpoint, error) {
	var h []checkpoint.Checkpoint
	_, err := kafka.ScanKey(ctx, connOpts, topic, key, func(r *kgo.Record) error {
		cp, _, err := checkpoint.Decode(r.Value)
		if err != nil {
			return fmt.Errorf("checkpoint key %s in topic %s, record %d: %w", key, topic, len(h), err)
		}
		h = append(h, cp)
		return nil
	})
	return h, err
}
