package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
)

// Defaults of Config's fields, named so that a command's help and the
// docs agree with the code.
const (
	DefaultSlot             = "walstream"
	DefaultPublication      = "walstream_outbox"
	DefaultTable            = "public.outbox"
	DefaultCheckpointTopic  = "walstream.checkpoints"
	DefaultDeadLetterTopic  = "walstream.dlq"
	DefaultMaxBatchEvents   = 10000
	DefaultMaxBatchBytes    = 16 << 20
	DefaultQueueBytes       = 16 << 20
	DefaultMaxRecordBytes   = 1_000_000
	DefaultLinger           = 5 * time.Millisecond
	DefaultStatusInterval   = 10 * time.Second
	DefaultConfirmInterval  = 250 * time.Millisecond
	DefaultProgressInterval = 30 * time.Second
	DefaultIdleInterval     = 10 * time.Second
	DefaultCommitTimeout    = 30 * time.Second
	DefaultSlotPollInterval = 5 * time.Second
	DefaultReadyConfirmAge  = time.Minute
	DefaultReemitChunkRows  = 1024
)

// Upper bounds of sizes: far above any useful value, and low enough that
// the producer's doubled buffer and int32 batch limit cannot overflow.
const (
	maxBatchEvents = 1 << 24
	maxBytes       = 1 << 30
	maxQueueBytes  = 1 << 40
)

// SettingError is a Config field Validate refuses. Field is the field's
// name in Config, dotted for a nested one ("Kafka.Brokers"), so that a
// command can name its own setting for it.
type SettingError struct {
	Field string
	Err   error
}

func (e *SettingError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Validate reports every field a pipeline cannot run with, each as a
// *SettingError, joined. Outboxes and Messages come from decode.NewOutbox,
// which has checked their settings.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field string, err error) {
		if err != nil {
			errs = append(errs, &SettingError{Field: field, Err: err})
		}
	}
	// Each name under its own field, so that a command names the one
	// setting that is wrong.
	if err := c.Names.Validate(); err != nil {
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, err := range errs {
			var ne *replication.NameError
			if errors.As(err, &ne) {
				bad("Names."+ne.Field, ne.Err)
			} else {
				bad("Names", err)
			}
		}
	}
	bad("CheckpointTopic", format.ValidTopic(c.CheckpointTopic))
	if c.DeadLetterTopic != "" {
		bad("DeadLetterTopic", format.ValidTopic(c.DeadLetterTopic))
	}
	if c.SkipEvent != (decode.Ref{}) {
		bad("SkipTopic", format.ValidTopic(c.SkipTopic))
	}
	for _, n := range []struct {
		field    string
		v, limit int
	}{{"MaxBatchEvents", c.MaxBatchEvents, maxBatchEvents}, {"MaxBatchBytes", c.MaxBatchBytes, maxBytes},
		{"MaxRecordBytes", c.MaxRecordBytes, maxBytes}, {"QueueBytes", c.QueueBytes, maxQueueBytes}} {
		if n.v < 1 || n.v > n.limit {
			bad(n.field, fmt.Errorf("must be from 1 to %d, got %d", n.limit, n.v))
		}
	}
	if c.Linger < 0 {
		bad("Linger", fmt.Errorf("must not be negative, got %s", c.Linger))
	}
	// A status interval that is not positive is refused below: the
	// confirm interval is not blamed for it.
	if c.ConfirmInterval < 0 || c.StatusInterval > 0 && c.ConfirmInterval > c.StatusInterval {
		bad("ConfirmInterval", fmt.Errorf("must be between 0 and the status interval (%s), got %s", c.StatusInterval, c.ConfirmInterval))
	}
	if c.ProgressInterval < 0 {
		bad("ProgressInterval", fmt.Errorf("must not be negative, got %s", c.ProgressInterval))
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"StatusInterval", c.StatusInterval}, {"IdleInterval", c.IdleInterval}, {"CommitTimeout", c.CommitTimeout},
		{"SlotPollInterval", c.SlotPollInterval}, {"ReadyConfirmAge", c.ReadyConfirmAge}} {
		if d.v <= 0 {
			bad(d.field, fmt.Errorf("must be positive, got %s", d.v))
		}
	}
	if r := c.Reemit.ChunkRows; r < 1 {
		bad("Reemit.ChunkRows", fmt.Errorf("must be at least 1, got %d", r))
	}
	if c.Reemit.Rate < 0 {
		bad("Reemit.Rate", fmt.Errorf("must not be negative, got %d", c.Reemit.Rate))
	}
	if t := c.Reemit.SignalTable; t != "" {
		if _, err := replication.ParseTable(t); err != nil {
			bad("Reemit.SignalTable", err)
		}
		for _, o := range c.Outboxes {
			if o.Name() == t {
				bad("Reemit.SignalTable", fmt.Errorf("%s is an outbox table", t))
			}
		}
	}
	if c.MessagePrefix == decode.ControlPrefix {
		bad("MessagePrefix", fmt.Errorf("%q is the prefix of walstream's re-emit requests", c.MessagePrefix))
	}
	if c.Takeover.Enabled() && c.Takeover.Lookback < 0 {
		bad("Takeover.Lookback", fmt.Errorf("must not be negative, got %s", c.Takeover.Lookback))
	}
	if f := c.Fleet; f.Group != "" {
		if f.SessionTimeout <= 0 {
			bad("Fleet.SessionTimeout", fmt.Errorf("must be positive, got %s", f.SessionTimeout))
		}
		if f.HeartbeatInterval <= 0 || 3*f.HeartbeatInterval > f.SessionTimeout {
			bad("Fleet.HeartbeatInterval", fmt.Errorf("must be positive and at most a third of the session timeout (%s), got %s", f.SessionTimeout, f.HeartbeatInterval))
		}
		if f.RebalanceTimeout < time.Second {
			bad("Fleet.RebalanceTimeout", fmt.Errorf("must be at least 1s, got %s", f.RebalanceTimeout))
		}
	}
	bad("Kafka.Brokers", c.Kafka.CheckBrokers())
	bad("Kafka.SASLMechanism", c.Kafka.CheckSASL())
	schemas := c.Encoding.Value == format.JSONSchema || c.Encoding.Value == format.Avro
	if schemas && c.Encoding.SchemaPrefix == "" && c.envelopes() {
		bad("Encoding.SchemaPrefix", errors.New("is required when envelope fields are written with schemas: "+
			"the value schema is named <topic.prefix>.<schema>.<table>.<route-by value>.Value"))
	}
	return errors.Join(errs...)
}

// envelopes reports whether any mapping places fields in the envelope.
func (c *Config) envelopes() bool {
	for _, o := range append(c.Outboxes, c.Messages) {
		if o == nil {
			continue
		}
		for _, a := range o.Additional {
			if a.Placement == decode.PlaceEnvelope {
				return true
			}
		}
	}
	return false
}
