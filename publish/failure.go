package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/walstream/walstream/kafka"
)

// Causes of a failed Kafka transaction operation, the label of
// walstream_kafka_transaction_failures_total, and what each means.
const (
	causeAborted      = "aborted_by_coordinator"
	causeFenced       = "fenced"
	causeNotEnough    = "not_enough_replicas"
	causeNoLeader     = "no_leader"
	causeCoordinator  = "coordinator_unavailable"
	causeConcurrent   = "concurrent_transactions"
	causeInvalidState = "invalid_txn_state"
	causeAbortable    = "transaction_abortable"
	causeSequence     = "out_of_order_sequence"
	causeTimeout      = "timeout"
	causeUnreachable  = "unreachable"
	causeRefused      = "refused"
	causeInvisible    = "commit_not_visible"
	causeOther        = "other"
)

var causeText = map[string]string{
	causeAborted:      "Kafka's transaction coordinator aborted the open transaction after its timeout",
	causeFenced:       "the producer was fenced: its epoch was bumped (the error says by whom, when Kafka could tell)",
	causeNotEnough:    "partitions have fewer in-sync replicas than min.insync.replicas",
	causeNoLeader:     "partitions have no leader",
	causeCoordinator:  "the transaction coordinator is moving or loading (a broker restarted or left)",
	causeConcurrent:   "the transaction coordinator was still completing an earlier transaction",
	causeInvalidState: "the transaction coordinator refused the transaction's state change",
	causeAbortable:    "the broker asked for the transaction to be aborted",
	causeSequence:     "the broker refused a record's sequence number under the producer's epoch: the client's and the broker's producer state disagree, and the next session starts from a fresh epoch",
	causeTimeout:      "Kafka did not complete the operation within the commit timeout",
	causeUnreachable:  "a broker could not be reached, or closed the connection at once (a proxy in front of a broker that is down, or TLS or SASL not matching)",
	causeRefused:      "the broker refused access or a record",
	causeInvisible:    "a commit Kafka acknowledged was not decided on the checkpoint partition: aborted, or no marker within the commit timeout",
	causeOther:        "the Kafka operation failed",
}

// fail turns the error of a failed Kafka transaction operation into the
// one Run returns: a fencing is told apart (another producer, or the
// coordinator aborting a transaction that outlived its timeout), an
// operation that timed out or was refused for want of replicas names the
// partitions that cannot take writes, and errors no retry can fix are
// marked. Each failure is logged once with its cause, and counted.
func (p *Producer) fail(ctx context.Context, err error) error {
	p.failed = true
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return err // a stop, or the session ending for another reason
	}
	fenced := errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
	// A transaction open past its timeout may have been aborted by the
	// coordinator, whatever the error says: a process paused in the middle
	// of a commit wakes up to its own deadline long passed.
	outlived := p.inTxn && time.Since(p.began) > kafka.TransactionTimeout(p.cfg.CommitTimeout)
	var explained error
	if fenced || outlived {
		explained = p.explainFencing(ctx, err, fenced)
	}
	switch {
	case explained != nil:
		err = explained
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, kerr.NotEnoughReplicas),
		errors.Is(err, kerr.NotEnoughReplicasAfterAppend), errors.Is(err, kerr.CoordinatorNotAvailable),
		errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.RequestTimedOut):
		topics := []string{p.cfg.CheckpointTopic}
		for t := range p.byTopic {
			topics = append(topics, t)
		}
		err = kafka.Authorization(p.writable.Diagnose(ctx, err, topics...), p.cfg.TransactionalID)
	default:
		err = kafka.Authorization(err, p.cfg.TransactionalID)
	}
	cause := failureCause(err)
	p.metrics.txnFailed(cause)
	attrs := []any{"cause", cause, "transactional_id", p.cfg.TransactionalID}
	if p.tracker != nil {
		attrs = append(attrs, "checkpoint", p.pos.String())
	}
	if p.inTxn {
		attrs = append(attrs, "open_seconds", time.Since(p.began).Seconds())
	}
	p.log.Warn("Kafka transaction failed: "+causeText[cause], append(attrs, "err", err)...)
	return err
}

// failureCause names what made a Kafka transaction operation fail.
func failureCause(err error) string {
	var aborted *AbortedError
	var invisible *InvisibleError
	var unwritable *kafka.UnwritableError
	var op *net.OpError
	var eof *kgo.ErrFirstReadEOF
	switch {
	case errors.As(err, &aborted):
		return causeAborted
	case errors.As(err, &invisible):
		return causeInvisible
	case errors.Is(err, ErrFenced):
		return causeFenced
	case errors.Is(err, kerr.NotEnoughReplicas), errors.Is(err, kerr.NotEnoughReplicasAfterAppend):
		return causeNotEnough
	case errors.As(err, &unwritable) && unwritable.NotEnoughReplicas():
		return causeNotEnough
	case errors.As(err, &unwritable):
		return causeNoLeader
	case errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.NotCoordinator),
		errors.Is(err, kerr.CoordinatorLoadInProgress):
		return causeCoordinator
	case errors.Is(err, kerr.ConcurrentTransactions):
		return causeConcurrent
	case errors.Is(err, kerr.InvalidTxnState):
		return causeInvalidState
	case errors.Is(err, kerr.TransactionAbortable):
		return causeAbortable
	case errors.Is(err, kerr.OutOfOrderSequenceNumber):
		return causeSequence
	case Permanent(err):
		return causeRefused
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, kerr.RequestTimedOut):
		return causeTimeout
	case errors.As(err, &op), errors.As(err, &eof), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return causeUnreachable
	}
	return causeOther
}

// AbortedError means Kafka's transaction coordinator aborted walstream's
// open transaction itself, because it outlived the transaction timeout
// (walstream was paused, or could not reach Kafka for that long), and
// bumped the producer epoch, which fenced this producer. The coordinator's
// state shows it: the transaction aborted at exactly the next epoch, so no
// other producer initialized the transactional id since. Nothing of the
// transaction is visible; a new session replays it from the checkpoint.
type AbortedError struct {
	TransactionalID string
	// Open is how long the transaction had been open when walstream
	// noticed; Timeout the transaction timeout it asked for.
	Open, Timeout time.Duration
	// Epoch is this producer's epoch, Bumped the coordinator's now.
	Epoch, Bumped int16
	Err           error
}

func (e *AbortedError) Error() string {
	return fmt.Sprintf("Kafka's transaction coordinator aborted the open transaction of transactional id %s, open %s, past the transaction timeout of %s "+
		"(was walstream paused, or Kafka unreachable, that long?), and bumped the producer epoch from %d to %d; no other producer took the transactional id: %v",
		e.TransactionalID, e.Open.Round(100*time.Millisecond), e.Timeout, e.Epoch, e.Bumped, e.Err)
}

func (e *AbortedError) Unwrap() error { return e.Err }

// FencedError means the producer was fenced by another producer that
// initialized the same transactional id, or, when Known is false, that
// Kafka could not be asked by whom. It is an ErrFenced.
type FencedError struct {
	TransactionalID string
	// Known: the coordinator described the transactional id, and its
	// epoch, Now, is past this producer's, Epoch, by more than an abort of
	// this producer's transaction would take it; State is its
	// transaction's state.
	Known      bool
	Epoch, Now int16
	State      string
	// Unasked is why the coordinator could not be asked, when not Known.
	Unasked error
	Err     error
}

func (e *FencedError) Error() string {
	if !e.Known {
		return fmt.Sprintf("fenced: the producer epoch of transactional id %s was bumped, and asking the transaction coordinator why failed (%v): %v",
			e.TransactionalID, e.Unasked, e.Err)
	}
	return fmt.Sprintf("%v (transactional id %s: the coordinator's producer epoch is %d, this producer's %d, its transaction %s): %v",
		ErrFenced, e.TransactionalID, e.Now, e.Epoch, e.State, e.Err)
}

func (e *FencedError) Unwrap() []error { return []error{ErrFenced, e.Err} }

// explainFencing asks the transaction coordinator what became of the
// transactional id after a fencing error, or after any error of a
// transaction open past its timeout. A coordinator that aborted this
// producer's transaction on timeout holds it aborted at the very next
// epoch; one that another producer initialized holds a later epoch (its
// InitProducerId bumps the epoch past that abort, and again for each of
// its transactions). It returns nil for a transaction that was not fenced
// and that the coordinator did not abort, or could not be asked about.
func (p *Producer) explainFencing(ctx context.Context, err error, fenced bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	st, derr := p.describeTransaction(ctx)
	aborting := st.State == "PrepareEpochFence" || st.State == "PrepareAbort" || st.State == "CompleteAbort"
	known := derr == nil && p.inTxn && p.epoch >= 0
	switch {
	case known && aborting && st.ProducerID == p.pid && st.ProducerEpoch == p.epoch+1:
		return &AbortedError{TransactionalID: p.cfg.TransactionalID, Open: time.Since(p.began), Timeout: kafka.TransactionTimeout(p.cfg.CommitTimeout),
			Epoch: p.epoch, Bumped: st.ProducerEpoch, Err: err}
	case !fenced:
		return nil
	case !known:
		if derr == nil {
			derr = errors.New("the epoch of the fenced transaction is unknown")
		}
		return &FencedError{TransactionalID: p.cfg.TransactionalID, Unasked: derr, Err: err}
	}
	return &FencedError{TransactionalID: p.cfg.TransactionalID, Known: true, Epoch: p.epoch, Now: st.ProducerEpoch, State: st.State, Err: err}
}

// describeTransaction asks the transaction coordinator for the state of
// the transactional id (DescribeTransactions, KIP-664).
func (p *Producer) describeTransaction(ctx context.Context) (kmsg.DescribeTransactionsResponseTransactionState, error) {
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{p.cfg.TransactionalID}
	resp, err := req.RequestWith(ctx, p.client)
	if err != nil {
		return kmsg.DescribeTransactionsResponseTransactionState{}, err
	}
	for _, st := range resp.TransactionStates {
		if st.TransactionalID == p.cfg.TransactionalID {
			return st, kerr.ErrorForCode(st.ErrorCode)
		}
	}
	return kmsg.DescribeTransactionsResponseTransactionState{}, fmt.Errorf("the coordinator did not describe transactional id %s", p.cfg.TransactionalID)
}

// visible waits until the transaction Kafka acknowledged as committed, c,
// is decided on the checkpoint partition, its COMMIT marker after the
// checkpoint record, and only then is the position confirmed to Postgres.
// Kafka writes the markers after EndTxn returns, within milliseconds. A
// record followed by an ABORT marker was aborted although Kafka
// acknowledged its commit; one with no marker within the commit timeout of
// the acknowledgement Kafka left undecided there. Confirming either would
// let Postgres drop rows no reader sees, lost for good once the
// transaction is aborted. The partition is read read_uncommitted from the
// record on (kafka.Markers, kafka/decided.go), so that another producer's
// transaction open on the partition, which holds back its last stable
// offset and with it what read_committed readers see, neither delays nor
// fails the confirmation; by one loop for every stream of the process that
// shares the Markers.
func (p *Producer) visible(ctx context.Context, c *commit) error {
	if c.watch == nil {
		return nil // no acknowledgement carried an offset: nothing to wait for
	}
	ctx, cancel := context.WithDeadline(ctx, c.ended.Add(p.cfg.CommitTimeout))
	defer cancel()
	topic, at, cp := p.cfg.CheckpointTopic, c.at, c.cp
	d, err := c.watch.Wait(ctx)
	switch {
	case errors.Is(err, kafka.ErrNoRecord):
		return &InvisibleError{Checkpoint: cp.String(), Topic: topic, At: at, Stable: d.Stable,
			Err: fmt.Errorf("the partition holds no record at offset %d", at.offset)}
	case err != nil:
		c.watch.Stop()
		return &InvisibleError{Checkpoint: cp.String(), Topic: topic, At: at, Stable: d.Stable, Waited: p.cfg.CommitTimeout, Err: err}
	case d.Fate == kafka.FateAborted:
		return &InvisibleError{Checkpoint: cp.String(), Topic: topic, At: at, Stable: d.Stable, Aborted: true}
	}
	p.metrics.markerRead(d.At.Sub(c.ended))
	return nil
}

// InvisibleError is a commit Kafka acknowledged that the checkpoint
// partition does not show decided: its record followed by an ABORT
// marker, or by no marker within the commit timeout. Nothing of it was
// confirmed to Postgres.
type InvisibleError struct {
	Checkpoint string
	Topic      string
	At         recordAt
	Stable     int64 // the partition's last stable offset; -1 when it could not be read
	// Aborted: an ABORT marker follows the record.
	Aborted bool
	Waited  time.Duration
	Err     error
}

func (e *InvisibleError) Error() string {
	if e.Aborted {
		return fmt.Sprintf("Kafka acknowledged the commit of checkpoint %s, but an ABORT marker follows its record (%s-%d at offset %d): "+
			"its transaction was aborted; nothing of it is confirmed to Postgres (see docs/kafka.md, When a commit does not become visible)",
			e.Checkpoint, e.Topic, e.At.partition, e.At.offset)
	}
	return fmt.Sprintf("Kafka acknowledged the commit of checkpoint %s, but no commit marker followed its record (%s-%d at offset %d) "+
		"within %s (last stable offset %d): Kafka left the transaction undecided; nothing of it is confirmed to Postgres, and the next session "+
		"fences the transactional id, which completes or aborts it (see docs/kafka.md, When a commit does not become visible): %v",
		e.Checkpoint, e.Topic, e.At.partition, e.At.offset, e.Waited, e.Stable, e.Err)
}

func (e *InvisibleError) Unwrap() error { return e.Err }
