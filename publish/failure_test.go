package publish

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/kafka"
)

// Each failed Kafka transaction operation is counted by what caused it,
// from the errors franz-go and walstream return.
func TestFailureCause(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("committing Kafka transaction for checkpoint 0/10: %w", err) }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&AbortedError{Err: kerr.InvalidProducerEpoch}, causeAborted},
		{&FencedError{Known: true, Err: kerr.ProducerFenced}, causeFenced},
		{&FencedError{Unasked: errors.New("no coordinator"), Err: kerr.InvalidProducerEpoch}, causeFenced},
		{wrap(kerr.NotEnoughReplicas), causeNotEnough},
		{&kafka.UnwritableError{Partitions: []string{"t-0: 1 of 3 replicas in sync, fewer than min.insync.replicas 2: Kafka refuses writes (NOT_ENOUGH_REPLICAS)"}, Err: context.DeadlineExceeded}, causeNotEnough},
		{&kafka.UnwritableError{Partitions: []string{"t-0: no leader"}, Err: context.DeadlineExceeded}, causeNoLeader},
		{wrap(kerr.CoordinatorLoadInProgress), causeCoordinator},
		{wrap(kerr.NotCoordinator), causeCoordinator},
		{wrap(kerr.ConcurrentTransactions), causeConcurrent},
		{wrap(kerr.InvalidTxnState), causeInvalidState},
		{wrap(kerr.TransactionAbortable), causeAbortable},
		{fmt.Errorf("producing checkpoint to topic walstream.checkpoints: %w", kerr.OutOfOrderSequenceNumber), causeSequence},
		{wrap(context.DeadlineExceeded), causeTimeout},
		{wrap(&net.OpError{Op: "dial", Err: errors.New("connection refused")}), causeUnreachable},
		{wrap(&kgo.ErrFirstReadEOF{}), causeUnreachable},
		{fmt.Errorf("%w: x", kafka.ErrAuthorization), causeRefused},
		{&RecordError{Topic: "t", Err: kerr.MessageTooLarge}, causeRefused},
		{errors.New("something else"), causeOther},
	} {
		if got := failureCause(tc.err); got != tc.want {
			t.Errorf("failureCause(%v) = %s, want %s", tc.err, got, tc.want)
		}
		if causeText[tc.want] == "" {
			t.Errorf("cause %s has no text", tc.want)
		}
	}
}
