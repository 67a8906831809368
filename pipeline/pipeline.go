package pipeline

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/group"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
)

// StreamName is a stream's name when none is given: <database>/<slot>, or
// the slot's name alone when the database is not known. The checkpoint
// key and the transactional id derive from it.
func StreamName(database, slot string) string {
	if database == "" {
		return slot
	}
	return database + "/" + slot
}

// Config is what a pipeline is told. It names no flags: the command that
// builds it maps its own settings onto it.
type Config struct {
	// Postgres is the connection to the primary; Names the slot,
	// publication and tables streamed.
	Postgres *pgx.ConnConfig
	Names    replication.Names
	// Create creates a missing publication or slot before the first
	// session; later sessions never recreate them.
	Create bool
	// AllowSlotAhead accepts a slot that confirmed more than Kafka holds,
	// and creates a missing slot although Kafka holds a checkpoint.
	AllowSlotAhead bool
	// Accept lists the divergences between the checkpoint and the server
	// an operator accepted for this start (see Place). Both hold until a
	// session of the Pipeline has a checkpoint in Kafka.
	Accept Accept
	// FailoverSlot creates the slot as a failover slot where the server
	// supports them.
	FailoverSlot bool
	// Takeover, when enabled, starts a stream Kafka holds no checkpoint
	// of where Debezium's Postgres connector stopped, on its slot.
	Takeover Takeover

	// Stream names the stream in logs, metrics, status and checkpoint
	// records; the checkpoint key and transactional id derive from it by
	// default. Two streams sharing a Kafka cluster need different ones.
	Stream          string
	Kafka           kafka.Settings
	TransactionalID string
	CheckpointTopic string
	CheckpointKey   string
	// LegacyKey and LegacyTransactionalID, when set, are the checkpoint
	// key and transactional id that earlier versions defaulted to: a
	// stream with no checkpoint under CheckpointKey whose checkpoint is
	// found under LegacyKey keeps using both.
	LegacyKey, LegacyTransactionalID string
	// Outboxes are the outbox tables' mappings; Messages maps logical
	// decoding messages with MessagePrefix (empty: ignored).
	Outboxes      []*decode.Outbox
	Messages      *decode.Outbox
	MessagePrefix string
	// DeadLetterTopic, when set, takes events that cannot be published;
	// when empty such an event stops the stream.
	DeadLetterTopic string
	// SkipEvent, when set, names one event that cannot be published: it
	// goes to SkipTopic with its reason, the skip is logged and recorded in
	// the checkpoint, and nothing else is skipped.
	SkipEvent decode.Ref
	SkipTopic string
	// AcceptRecreated are outbox tables an operator accepts as recreated,
	// by schema.table, with the new table's OID: the rows lost between its
	// CREATE TABLE and its ALTER PUBLICATION were dealt with.
	AcceptRecreated map[string]uint32
	// Encoding is the key and value converters.
	Encoding       format.Encoding
	Compression    publish.Compression
	MaxRecordBytes int
	// TopicCreation, when set, creates missing outbox and dead-letter
	// topics; nil relies on the broker's auto-creation.
	TopicCreation *kafka.TopicCreation
	// Markers, when set, reads the commits' markers back on the checkpoint
	// partition for this stream and the others of the process that reach
	// the cluster as it does; nil gives each session's producer its own.
	Markers *kafka.Markers
	// Prober, when set, probes Kafka for readiness for this stream and the
	// others of the process that reach the cluster as it does; nil gives
	// the stream its own.
	Prober *kafka.Prober

	// StreamInProgress has Postgres (14 and later) stream transactions
	// larger than logical_decoding_work_mem while they are in progress,
	// instead of spilling them to disk and sending them at their commit,
	// which holds up every outbox event committed after them, whatever
	// table they write. A streamed outbox transaction is kept in a file in
	// SpoolDir until it commits, and published only then.
	StreamInProgress bool
	// SpoolDir is where streamed transactions are kept; empty is the
	// system's temporary directory ($TMPDIR, else /tmp).
	SpoolDir string

	// MaxBatchEvents and MaxBatchBytes bound a Kafka transaction, and the
	// parts a large Postgres transaction is split into.
	MaxBatchEvents, MaxBatchBytes int
	// QueueBytes bounds decoded bytes waiting for Kafka.
	QueueBytes    int
	Linger        time.Duration
	IdleInterval  time.Duration
	CommitTimeout time.Duration
	// StatusInterval is how often a status update is sent to Postgres
	// however quiet the stream: the keepalive the server's timeout needs.
	StatusInterval time.Duration
	// ConfirmInterval is the least time between status updates that
	// confirm Kafka commits; a commit is confirmed within it. Zero
	// confirms only every StatusInterval.
	ConfirmInterval time.Duration
	// ProgressInterval is how often a progress line is logged while
	// streaming, and how often a wait that keeps walstream from streaming
	// (a slot being created behind running transactions, a slot another
	// process holds) is logged again; zero logs no progress, and each wait
	// once.
	ProgressInterval time.Duration
	// BlockingQueries adds the query text of the sessions a wait names to
	// what is logged; they may hold data, so it is off unless asked for.
	BlockingQueries bool
	// SlotPollInterval is how often the slot's state is read for metrics.
	SlotPollInterval time.Duration
	// ReadyConfirmAge is how long Readyz tolerates no confirmed position.
	ReadyConfirmAge time.Duration

	// Reemit is how re-emit requests read their rows.
	Reemit ReemitSettings

	// Fleet, when its Group is set, shares the streams of the process
	// with the other processes of its fleet: each runs the streams the
	// group's assignment gives it (see NewSharedFleet). The same in every
	// stream of a process.
	Fleet group.Settings

	// Hook, if not nil, is called at named points (tables-checked,
	// slot-held, after-produce, before-commit, after-commit,
	// mid-transaction, mid-stream, mid-chunk; identified in Inspect) so
	// that crash tests can kill or pause the process there.
	Hook func(point string)

	// undecidedWait bounds how long a session waits for Kafka to decide a
	// transaction of a fenced transactional id that is still open after
	// the fencing (fenceAndRead); zero is the transaction timeout and 5 s.
	undecidedWait time.Duration
}

// Pipeline streams one slot into Kafka, session after session.
type Pipeline struct {
	cfg     Config
	log     *slog.Logger
	metrics metrics
	state   *state
	waits   *waits
	// shown exports the metrics; a shared fleet hides a stream's while
	// it is not held here.
	shown *shown
	// settled is set once a session had a checkpoint in Kafka: a
	// divergence accepted at the start is on record, and no later session
	// accepts one, of this Run or of a later one (a shared fleet's stream
	// given back to this process).
	settled atomic.Bool
}

// New registers the pipeline's metrics on reg (nil: on none); log should be scoped to
// the slot.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) *Pipeline {
	st := &state{started: time.Now()}
	sh := newShown()
	m := newMetrics(prometheus.WrapRegistererWith(cfg.MetricLabels(), sh), st)
	if reg != nil { // nil: the metrics are kept, not exported
		reg.MustRegister(sh)
	}
	return &Pipeline{cfg: cfg, log: log, metrics: m, state: st, waits: &waits{log: log, state: st, every: cfg.ProgressInterval}, shown: sh}
}

// newSession is the session state of one Run: it accepts the divergences
// the config does until a session had a checkpoint in Kafka, in this Run
// or an earlier one.
func (p *Pipeline) newSession() *session {
	s := &session{cfg: &p.cfg, log: p.log, metrics: p.metrics, state: p.state, waits: p.waits, settled: &p.settled}
	if p.settled.Load() {
		s.cfg = p.cfg.acceptingNone()
	}
	return s
}

// Log is the pipeline's logger, scoped to its stream.
func (p *Pipeline) Log() *slog.Logger { return p.log }

// MetricLabels are the labels of every metric of the stream: its name,
// slot and database, so that one dashboard tells streams apart without
// relabelling.
func (c *Config) MetricLabels() prometheus.Labels {
	db := ""
	if c.Postgres != nil {
		if db = c.Postgres.Database; db == "" {
			db = c.Postgres.User // libpq's default database
		}
	}
	return prometheus.Labels{"stream": c.Stream, "slot": c.Names.Slot, "database": db}
}

// hook calls Hook at point, when it is set.
func (c *Config) hook(point string) {
	if c.Hook != nil {
		c.Hook(point)
	}
}

// publishConfig is the producer's configuration, but for the outbox
// tables' OIDs, which a session learns once connected.
func (c *Config) publishConfig() publish.Config {
	return publish.Config{
		Kafka: c.Kafka, TransactionalID: c.TransactionalID,
		CheckpointTopic: c.CheckpointTopic, CheckpointKey: c.CheckpointKey, Stream: c.Stream, Slot: c.Names.Slot,
		Outboxes: append(slices.Clip(c.Outboxes), c.Messages), MaxBatchEvents: c.MaxBatchEvents, MaxBatchBytes: c.MaxBatchBytes,
		Linger: c.Linger, IdleInterval: c.IdleInterval, CommitTimeout: c.CommitTimeout,
		MaxRecordBytes: c.MaxRecordBytes, DeadLetterTopic: c.DeadLetterTopic, Encoding: c.Encoding,
		Compression: c.Compression, TopicCreation: c.TopicCreation,
		SkipEvent: c.SkipEvent, SkipTopic: c.SkipTopic, Markers: c.Markers,
	}
}

// storeConfig says where the stream's checkpoints are, for reading them.
func (c *Config) storeConfig() store.Config {
	return store.Config{Kafka: c.Kafka, Topic: c.CheckpointTopic, Key: c.CheckpointKey, TransactionalID: c.TransactionalID,
		CommitTimeout: c.CommitTimeout, TopicCreation: c.TopicCreation}
}

// KafkaACLs are the least-privilege Kafka ACLs of the stream: its
// transactional id, the topics its outboxes and logical messages route
// to, its dead-letter and checkpoint topics, and its fleet's group.
func (c *Config) KafkaACLs() []kafka.ACL {
	return kafka.ACLs(kafka.Access{TransactionalID: c.TransactionalID, CheckpointTopic: c.CheckpointTopic, Group: c.Fleet.Group,
		Outboxes: append(slices.Clip(c.Outboxes), c.Messages), DeadLetterTopic: c.DeadLetterTopic,
		SkipEvent: c.SkipEvent, SkipTopic: c.SkipTopic, TopicCreation: c.TopicCreation})
}

// Run streams until ctx ends or a permanent error. Every transient failure
// tears the session down and starts again from what Kafka holds, after a
// backoff. A ctx that ends is a clean stop: Run returns nil.
//
// Run may be called again once it returned, as a fleet's process does
// for a stream its group gives it again: each call starts as the first,
// from the checkpoint in Kafka, with what the health endpoints say of
// the last call cleared.
func (p *Pipeline) Run(ctx context.Context) error {
	p.state.reset()
	defer p.idle()
	log, m := p.log, p.metrics
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 500*time.Millisecond, 30*time.Second, 0
	s := p.newSession()
	stopProbe := p.probeKafka(ctx)
	defer stopProbe()
	bumps := fencings{window: bumpWindow, max: maxBumps}
	for {
		streamed, err := s.run(ctx)
		var whole *decode.WholeError
		s.whole = s.whole || errors.As(err, &whole)
		if ctx.Err() != nil {
			log.Info("stopped")
			return nil
		}
		if dv := (*DivergedError)(nil); errors.As(err, &dv) && dv.Placement.Replay != nil && s.cfg.Accept.Phantoms {
			// Found only once streaming: the next session places the
			// checkpoint where this one found it, and accepts it.
			s.earlier.rewritten = dv
			log.Warn("the server's history was rewritten; accepting the phantom events, the next session goes on from the slot's position",
				"err", err, "slot_confirmed_flush_lsn", dv.From.String())
			continue
		}
		if streamed {
			b.Reset()
		}
		err = p.cfg.Kafka.Explain(err)
		f := classifyFailure(err)
		m.errors.WithLabelValues(f.kind).Inc()
		p.state.setLastErr(err, f.peer == peerKafka)
		if f.kind == kindEpochBumped {
			// One bump follows a broker restart; a run of them means
			// another instance, on another slot, shares the transactional id.
			if n, shared := bumps.add(time.Now()); shared {
				err = &SharedIDError{TransactionalID: p.cfg.TransactionalID, Slot: p.cfg.Names.Slot, Fencings: n, Window: bumpWindow, Err: err}
				f.permanent = true
			}
		}
		if f.permanent {
			// The stream stays stopped: the health endpoints and
			// walstream_stopped say so while other streams of the process go on.
			m.standby.Set(0)
			p.waits.done("standby", "no longer waiting for the slot as a standby")
			msg := oneLine(err)
			p.state.stopped.Store(&msg)
			return err
		}
		var wait time.Duration
		if replication.SlotInUse(err) {
			// A standby waits on one connection it keeps, and tries a
			// session again only once the slot looks free.
			p.standingBy(err)
			werr := p.awaitSlot(ctx, err)
			if ctx.Err() != nil {
				log.Info("stopped")
				return nil
			}
			if werr == nil {
				continue
			}
			wait = b.NextBackOff()
			log.Warn("standby: reading who holds the slot failed; trying the slot again", "err", werr, "backoff", wait.Round(time.Millisecond))
		} else {
			m.standby.Set(0)
			p.state.standbyAt.Store(0)
			// Another failure ends the wait for the slot, not the slot's hold.
			p.waits.done("standby", "no longer waiting for the slot as a standby")
			m.reconnects.WithLabelValues(f.peer).Inc()
			wait = b.NextBackOff()
			backoff := wait.Round(time.Millisecond)
			// Only a session that streamed has something to restart from;
			// before that, say what stopped it, plainly when nothing answered.
			if streamed {
				log.Warn("session ended, restarting from the checkpoint", "peer", f.peer, "err", err, "backoff", backoff)
			} else if addr, reason, ok := unreachable(err); ok {
				log.Warn(fmt.Sprintf("cannot reach %s at %s: %s; retrying in %s", peerNames[f.peer], addr, reason, backoff),
					"peer", f.peer, "addr", addr, "err", err, "backoff", backoff)
			} else {
				log.Warn(fmt.Sprintf("could not start streaming; retrying in %s", backoff), "peer", f.peer, "err", err, "backoff", backoff)
			}
		}
		select {
		case <-ctx.Done():
			log.Info("stopped")
			return nil
		case <-time.After(wait):
		}
	}
}

// idle clears what a Run that ended left of a standby's wait: a stream
// released by its process waits for nothing.
func (p *Pipeline) idle() {
	p.metrics.standby.Set(0)
	p.state.standbyAt.Store(0)
	p.waits.clear()
}

// maxBumps fencings within bumpWindow, none of them by an instance on this
// slot, mean that the transactional id is shared with another stream.
const (
	maxBumps   = 3
	bumpWindow = 10 * time.Minute
)

// fencings counts recent fencings that no instance on this slot caused.
type fencings struct {
	window time.Duration
	max    int
	at     []time.Time
}

// add records a fencing at now and returns how many fell within the window
// ending at now, and whether that many mean a shared transactional id.
func (f *fencings) add(now time.Time) (n int, shared bool) {
	f.at = append(f.at, now)
	for len(f.at) > 0 && now.Sub(f.at[0]) > f.window {
		f.at = f.at[1:]
	}
	return len(f.at), len(f.at) >= f.max
}

// SharedIDError means the producer was fenced again and again while this
// instance held the slot: another stream uses the same transactional id.
type SharedIDError struct {
	TransactionalID string
	Slot            string
	Fencings        int
	Window          time.Duration
	Err             error // the last fencing
}

func (e *SharedIDError) Error() string {
	return fmt.Sprintf("%v: transactional id %s was fenced %d times in %s while this instance held slot %q: "+
		"another stream uses the same transactional id (two streams with one stream name), or another walstream sets it: %v", publish.ErrFenced, e.TransactionalID, e.Fencings, e.Window, e.Slot, e.Err)
}

func (e *SharedIDError) Unwrap() error { return e.Err }

// plainTCP reports whether conn reached Postgres without TLS.
func plainTCP(conn *pgx.Conn) bool {
	_, ok := conn.PgConn().Conn().(*tls.Conn)
	return !ok
}
