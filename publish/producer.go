package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish/format"
)

// Config configures a Producer.
type Config struct {
	Kafka           kafka.Settings
	TransactionalID string
	CheckpointTopic string
	CheckpointKey   string
	// Stream and Slot are written into checkpoint records: they name the
	// stream that owns the key, for operators and for the next start.
	Stream, Slot string
	// Outboxes route events to topics by their tables' settings.
	Outboxes []*decode.Outbox
	// A Kafka transaction is committed when it holds MaxBatchEvents events
	// or MaxBatchBytes bytes, or Linger after the commit before it (at
	// once, when its first event came later). Postgres transactions are
	// never split unless larger than these limits.
	MaxBatchEvents int
	MaxBatchBytes  int
	Linger         time.Duration
	// IdleInterval rate-limits checkpoint-only transactions, which let the
	// slot advance while the outbox is quiet.
	IdleInterval time.Duration
	// CommitTimeout bounds flushing and committing one Kafka transaction.
	CommitTimeout time.Duration
	// MaxRecordBytes is the largest record walstream sends; a larger one is
	// bad input. Keep it at or under the topics' max.message.bytes.
	MaxRecordBytes int
	// DeadLetterTopic, when set, receives events that cannot be published,
	// in the same Kafka transaction; when empty, such an event is an error.
	// Rows of a table that does not fit the mapping are an error either way.
	DeadLetterTopic string
	// SkipEvent, when set, names the one event that goes to SkipTopic with
	// its reason if it cannot be published, whatever DeadLetterTopic says;
	// the skip is logged and recorded in the checkpoints from then on.
	SkipEvent decode.Ref
	SkipTopic string
	// Tables are the outbox tables' OIDs, and Entries the publication's
	// entries covering them, recorded in every checkpoint so that the next
	// session can tell a recreated table, or one that left the publication.
	Tables  map[string]uint32
	Entries map[string][]uint32
	// Encoding says how keys and values are written.
	Encoding format.Encoding
	// Compression compresses record batches; zero is snappy.
	Compression Compression
	// TopicCreation, when set, creates missing outbox and dead-letter
	// topics before the first record to them; when nil, walstream relies on
	// the broker's auto.create.topics.enable.
	TopicCreation *kafka.TopicCreation
	// Markers, when set, reads the commits' markers back on the checkpoint
	// partition for this producer and others of the process on the same
	// cluster; when nil, the producer reads them with its own.
	Markers *kafka.Markers
}

// Compression is a record batch codec.
type Compression int

// Record batch codecs. Snappy is the default because it is cheap in
// CPU per row; zstd trades CPU for bytes on the wire and on disk.
const (
	Snappy Compression = iota
	LZ4
	Zstd
	Gzip
	NoCompression
)

var compressionNames = []string{"snappy", "lz4", "zstd", "gzip", "none"}

func (c Compression) String() string { return compressionNames[c] }

// ParseCompression reads snappy, lz4, zstd, gzip or none.
func ParseCompression(s string) (Compression, error) {
	for i, n := range compressionNames {
		if s == n {
			return Compression(i), nil
		}
	}
	return 0, fmt.Errorf("compression %q is not one of %s", s, strings.Join(compressionNames, ", "))
}

func (c Compression) codec() kgo.CompressionCodec {
	switch c {
	case LZ4:
		return kgo.Lz4Compression()
	case Zstd:
		return kgo.ZstdCompression()
	case Gzip:
		return kgo.GzipCompression()
	case NoCompression:
		return kgo.NoCompression()
	}
	return kgo.SnappyCompression()
}

// ErrFenced means another producer with the same transactional id took
// over: another walstream instance is publishing this slot.
var ErrFenced = errors.New("fenced: another walstream instance took over the transactional id")

// RecordError is a record the broker refused.
type RecordError struct {
	Topic string
	// Event is the event the record carried; nil for the checkpoint record.
	Event *decode.Identity
	Err   error
}

func (e *RecordError) Error() string {
	hint := ""
	if errors.Is(e.Err, kerr.TopicAuthorizationFailed) {
		hint = fmt.Sprintf(" (the principal needs the Write ACL on topic %s)", e.Topic)
	}
	if e.Event == nil {
		return fmt.Sprintf("producing checkpoint to topic %s: %v%s", e.Topic, e.Err, hint)
	}
	return fmt.Sprintf("%s: producing to topic %s: %v%s", e.Event, e.Topic, e.Err, hint)
}

func (e *RecordError) Unwrap() error { return e.Err }

// positions is where the producer learns where the session resumed and
// what Kafka holds, and reports each checkpoint Kafka committed, with the
// number of events and the Postgres commit time of the newest. It keeps no
// copy of them.
type positions interface {
	Resume() checkpoint.Checkpoint
	InKafka() (cp checkpoint.Checkpoint, at time.Time)
	Committed(cp checkpoint.Checkpoint, events int, newest time.Time) error
}

var _ positions = (*checkpoint.Tracker)(nil)

// Producer publishes transactions from a Queue. Run owns every field below
// the client; the produce callbacks only touch produceErr.
type Producer struct {
	cfg    Config
	log    *slog.Logger
	opts   []kgo.Opt // connection options, shared with the checkpoint reader
	client *kgo.Client
	router *format.Router
	topics *kafka.TopicCreator
	// writable names the partitions that cannot take writes, for the
	// error of a Kafka operation that failed.
	writable *kafka.Writability
	tracker  positions
	metrics  *Metrics
	hook     func(point string)
	inTxn    bool
	began    time.Time // when the open Kafka transaction began
	// pid and epoch are the producer id and epoch the open transaction
	// runs at; epoch is -1 when unknown.
	pid     int64
	epoch   int16
	failed  bool // a Kafka operation failed: never abort then (see abort)
	records int
	bytes   int
	dead    int            // dead letters in the open transaction
	batch   []*decode.Tx   // what the open transaction holds; refusals point into it
	byTopic map[string]int // events per topic in the open transaction
	started time.Time      // when the open Kafka transaction got its first event
	// lastCommit is when Kafka acknowledged the last commit, or when Start
	// was called.
	lastCommit time.Time
	// commitTook is how long the last commit took, from its flush to
	// Kafka's answer: how long a due batch takes what was queued (addQueued).
	commitTook time.Duration
	pos        checkpoint.Checkpoint // position once the open batch commits
	resume     checkpoint.Checkpoint // where the session started
	notes      checkpoint.Notes      // what every checkpoint records besides pos
	skip       *checkpoint.Skip      // the skip in the open batch, until it commits
	// dirty says the notes changed since the last commit (a re-emit
	// request met or moved on), which the next commit must record even
	// when it publishes nothing; reemitted counts the re-emitted records
	// of the open transaction (reemit.go).
	dirty     bool
	reemitted int
	// seen, while the stream reads transactions Debezium may have
	// published before walstream took over its slot, finds their events
	// in Kafka; nil otherwise.
	seen *store.Lookup

	errMu      sync.Mutex
	produceErr error
	// written is where the open transaction's checkpoint record was
	// written, once Kafka acknowledged it.
	written recordAt
	// markers reads each commit's marker back on the checkpoint partition
	// (visible): the one cfg.Markers names, shared with other streams, or
	// the producer's own, which Close closes.
	markers    *kafka.Markers
	ownMarkers bool
	// unsettled is a commit Kafka acknowledged whose marker is still to be
	// looked for (settle); nil when there is none.
	unsettled *commit
	// acked is the last commit Kafka acknowledged, settled or not.
	acked Acknowledged
}

// Acknowledged is a commit Kafka acknowledged: where its checkpoint record
// is, and the checkpoint. A transaction whose commit the coordinator
// acknowledged is committed, whatever its checkpoint partition shows: a
// broker killed just after it acknowledged a commit came back with the
// transaction's events committed and its checkpoint record in an open
// transaction, past the fencing, until the producer id's next transaction
// there.
type Acknowledged struct {
	Partition  int32
	Offset     int64
	Checkpoint checkpoint.Checkpoint
}

// Is reports whether o is the record of this commit; the zero
// Acknowledged is none.
func (a Acknowledged) Is(o store.OpenRecord) bool {
	return a.Checkpoint.LSN != 0 && o.Partition == a.Partition && o.Offset == a.Offset &&
		!o.Checkpoint.Less(a.Checkpoint) && !a.Checkpoint.Less(o.Checkpoint) && o.Checkpoint.Events == a.Checkpoint.Events
}

// Acknowledged is the last commit Kafka acknowledged to this producer
// with the offset of its checkpoint record, the zero Acknowledged when
// there is none. Call it after Run has returned.
func (p *Producer) Acknowledged() Acknowledged { return p.acked }

// commit is a Kafka transaction Kafka acknowledged as committed: where its
// checkpoint record went, the checkpoint, and what the tracker is told of
// it once its marker is found.
type commit struct {
	at     recordAt
	cp     checkpoint.Checkpoint
	events int
	newest time.Time
	ended  time.Time // when Kafka acknowledged it
	// watch waits for its marker on the checkpoint partition; nil when no
	// acknowledgement carried its record's offset.
	watch *kafka.Watch
}

// recordAt is a record's partition and offset; offset -1 while unknown.
type recordAt struct {
	partition int32
	offset    int64
}

// New creates a producer. hook, if not nil, is called at named points of a
// commit so that tests can crash the process there.
func New(cfg Config, log *slog.Logger, m *Metrics, hook func(string)) (*Producer, error) {
	router, err := format.NewRouter(cfg.Encoding, m.registryMetrics(), cfg.Outboxes...)
	if err != nil {
		return nil, err
	}
	if hook == nil {
		hook = func(string) {}
	}
	p := &Producer{cfg: cfg, log: log, router: router, metrics: m, hook: hook, byTopic: make(map[string]int)}
	p.opts = append(cfg.Kafka.Opts(), kafka.WithLogger(log.With("component", "kafka")))
	p.client, err = kgo.NewClient(append(p.opts[:len(p.opts):len(p.opts)],
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.TransactionTimeout(kafka.TransactionTimeout(cfg.CommitTimeout)),
		// Kafka's own murmur2 key hashing: the partition of an aggregate is
		// the one any Java producer would pick.
		kgo.RecordPartitioner(newPartitioner()),
		kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchCompression(cfg.Compression.codec()),
		// No record delivery timeout: franz-go measures it from a record's
		// timestamp, which table.field.event.timestamp may set in the past.
		// Flush's CommitTimeout bounds the wait instead.
		kgo.MaxBufferedBytes(2*cfg.MaxBatchBytes),
		kgo.ProducerBatchMaxBytes(int32(batchBytes(cfg))),
		// The producer decides when records go out: at its commit (Flush),
		// or as a batch fills. Not the client's own linger (10 ms), which
		// would send a transaction's records before the commit before it
		// is settled (begin), and a Kafka transaction's records in several
		// requests when --linger is longer.
		kgo.ProducerLinger(time.Minute),
		kgo.WithHooks(m.hooks()...),
	)...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	if p.markers = cfg.Markers; p.markers == nil {
		p.markers, p.ownMarkers = kafka.NewMarkers(p.opts), true
	}
	p.topics = kafka.NewTopicCreator(p.client, cfg.TopicCreation, log)
	p.writable = kafka.NewWritability(p.client, cfg.TransactionalID)
	return p, nil
}

// batchBytes is the client's record batch limit: room for one record of
// MaxRecordBytes with its batch overhead.
func batchBytes(cfg Config) int { return max(1_000_012, cfg.MaxRecordBytes+16<<10) }

// Close releases the client. An open transaction is aborted by the broker
// when the next instance initializes the producer id, or on timeout.
func (p *Producer) Close() {
	p.client.Close()
	if p.ownMarkers {
		p.markers.Close()
	}
}

// Fence initializes the producer id. That bumps the epoch of the
// transactional id, so an older instance still holding it can no longer
// commit, and aborts whatever transaction it left open. Only after this is
// the checkpoint in Kafka final.
func (p *Producer) Fence(ctx context.Context) error {
	if _, _, err := p.client.ProducerID(ctx); err != nil {
		return p.fail(ctx, fmt.Errorf("initializing producer id for transactional id %s: %w", p.cfg.TransactionalID, err))
	}
	return nil
}

// Start gives the session's positions, which Run continues from. When
// Kafka holds no checkpoint yet, Run commits one for the resume position at
// once, so that a slot recreated later is caught as being ahead of it.
func (p *Producer) Start(pos positions) {
	p.pos, p.resume, p.tracker = pos.Resume(), pos.Resume(), pos
	p.notes = checkpoint.Notes{Tables: p.cfg.Tables, Entries: p.cfg.Entries}
	p.lastCommit = time.Now() // Linger counts from the session's start, as from a commit
	if n := p.pos.Notes; n != nil {
		p.notes.Skipped, p.notes.Takeover, p.notes.Reemits = n.Skipped, n.Takeover, n.Reemits
		if t := p.pos.TakeoverAhead(); t != nil {
			p.seen = store.NewLookup(t, p.opts, func(ctx context.Context) (int64, error) {
				id, _, err := p.client.ProducerID(ctx)
				return id, err
			}, p.log)
			p.log.Info("taking over from Debezium: events of transactions committed before until_lsn are looked up in Kafka, and those Debezium published are not published again",
				"until_lsn", t.Until.String(), "since", t.Since.UTC().Format(time.RFC3339Nano), "checkpoint", p.pos.String())
		}
	}
	p.pos.Notes = nil
	p.metrics.reemitCommitted(0, p.notes.Reemits)
}

// Run publishes transactions from q until ctx ends or publishing fails. A
// Kafka transaction still open when it returns is aborted: its events are
// replayed from the slot by the next run.
func (p *Producer) Run(ctx context.Context, q *Queue) error {
	defer p.abort(ctx)
	defer p.stopWatch()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// armed is what the timer is set for: most transactions join an open
	// batch whose due time does not change, and resetting the timer for
	// each of them would cost a runtime timer update per row.
	var armed time.Time
	for {
		var due <-chan time.Time
		if at, ok := p.flushAt(); ok {
			if !at.Equal(armed) {
				timer.Reset(time.Until(at))
				armed = at
			}
			due = timer.C
		}
		var decided <-chan struct{}
		if c := p.unsettled; c != nil && c.watch != nil {
			decided = c.watch.Done()
		}
		live, chunks := q.next()
		var err error
		select {
		case <-ctx.Done():
			p.settleLast(ctx)
			return ctx.Err()
		case tx := <-live:
			err = p.add(ctx, tx)
			q.done(tx)
		case tx := <-chunks:
			err = p.add(ctx, tx)
			q.done(tx)
		case <-decided:
			err = p.settle(ctx)
		case <-due:
			armed = time.Time{}
			if p.records == 0 && !p.dirty && p.unsettled != nil {
				err = p.settle(ctx) // its marker not found in time
			} else if filled, aerr := p.addQueued(ctx, q); aerr != nil {
				err = aerr
			} else if !filled {
				err = p.flush(ctx)
			}
		}
		if err != nil {
			// Only a failed Kafka operation (fail) leaves the client in
			// a state abort must not touch; after bad input, a schema
			// registry that failed or a stop, the open transaction is
			// aborted, so that read_committed readers of its partitions
			// do not wait for Kafka's transaction timeout.
			return err
		}
	}
}

// addQueued adds to the due batch the transactions queued by now, for as
// long as the commit before took: they came while it was on its way, and
// a Linger shorter than a commit gives them no other time to join. Left to
// Run's select, which picks among ready cases at random, a due batch took
// one or two of them, every Kafka transaction held one or two rows however
// many waited, and the stream fell ever further behind its load. Bounded
// by that time, not by the queue: a backlog's batches stay about as large
// as its Linger makes them (draining the full queue into each drained a
// backlog 12-21 % slower, docs/benchmarks.md). It stops at a commit the
// batch's limits make (filled): what follows waits for its own due time.
func (p *Producer) addQueued(ctx context.Context, q *Queue) (filled bool, _ error) {
	last := p.lastCommit
	until := time.Now().Add(p.commitTook)
	// Run is the queue's only reader: what is queued now stays until taken.
	for n := len(q.ch); n > 0 && time.Now().Before(until); n-- {
		tx := <-q.ch
		err := p.add(ctx, tx)
		q.done(tx)
		if err != nil {
			return false, err
		}
		if !p.lastCommit.Equal(last) {
			return true, nil
		}
	}
	return false, nil
}

// CheckRegistry asks the schema registry, when keys or values need one,
// whether it answers, so that a session does not start streaming without.
func (p *Producer) CheckRegistry(ctx context.Context) error { return p.router.CheckRegistry(ctx) }

// flushAt is when the open batch is due: Linger after the last commit, or
// at once when its first event came later; with only a position to
// commit, IdleInterval after the last commit.
func (p *Producer) flushAt() (time.Time, bool) {
	if p.records > 0 {
		// Linger after the commit before, or at once: a transaction's first
		// event that comes Linger or more after the last commit waits for
		// no other, since Kafka transactions come no more often than one a
		// Linger that way too, which is what it bounds.
		return later(p.started, p.lastCommit.Add(p.cfg.Linger)), true
	}
	if p.dirty {
		// A request met, refused or cancelled: its requester waits.
		return time.Now(), true
	}
	if c := p.unsettled; c != nil {
		if c.watch == nil {
			return time.Now(), true // nothing to wait for
		}
		// Run settles it once its marker is found (decided); this only
		// bounds the wait.
		return c.ended.Add(p.cfg.CommitTimeout), true
	}
	if done, at := p.tracker.InKafka(); done.Less(p.pos) {
		return at.Add(p.cfg.IdleInterval), true
	}
	return time.Time{}, false
}

func (p *Producer) add(ctx context.Context, tx *decode.Tx) error {
	if tx.Stop != nil {
		return p.stuck(ctx, tx.Stop)
	}
	if tx.Chunk != nil {
		return p.addChunk(ctx, tx)
	}
	if p.seen != nil && tx.Xid != 0 && !p.seen.Takeover().Overlaps(tx.CommitLSN) {
		checked, found, idless := p.seen.Counts()
		p.log.Info("past the takeover from Debezium: every later event is published", "until_lsn", p.seen.Takeover().Until.String(),
			"events_checked", checked, "events_debezium_had_published", found, "events_without_id_published", idless)
		p.seen = nil
	}
	first, err := p.replays(ctx, tx)
	if err != nil {
		return err
	}
	if n := len(tx.Events) - first; n > 0 {
		if err := p.room(ctx, n, tx.Bytes); err != nil {
			return err
		}
		dup := 0
		for i := first; i < len(tx.Events); i++ {
			rec, err := p.record(ctx, &tx.Events[i])
			if err != nil {
				return err
			}
			if p.seen != nil && rec.Topic != p.cfg.DeadLetterTopic && rec.Topic != p.cfg.SkipTopic {
				found, err := p.seen.Has(ctx, rec)
				if err != nil {
					return err
				}
				if found {
					p.log.Debug("not publishing an event Debezium published", "event", tx.Events[i].Identity.String(), "topic", rec.Topic)
					p.metrics.takenOver()
					dup++
					continue
				}
			}
			if err := p.topics.Ensure(ctx, rec.Topic); err != nil {
				return kafka.Authorization(fmt.Errorf("%s: %w", &tx.Events[i].Identity, err), p.cfg.TransactionalID)
			}
			p.byTopic[rec.Topic]++
			p.produce(ctx, rec, &tx.Events[i].Identity)
		}
		p.records += n - dup
		p.bytes += tx.Bytes
		p.batch = append(p.batch, tx)
		// The checkpoint counts the events it covers, so that the events
		// published past a point (a timeline's fork) can be told later.
		p.pos = p.pos.Published(n - dup)
		p.pos.Last = checkpoint.Last{Xid: tx.Xid, CommitLSN: tx.CommitLSN, CommitTime: tx.CommitTime}
		if !tx.Final {
			p.pos = p.pos.Part(tx.CommitLSN, tx.Events[len(tx.Events)-1].Ordinal)
		}
	}
	// completes: the Final part of a transaction whose other parts are in
	// Kafka and that brought no events of its own, as after a resume from
	// a checkpoint at its last event. Its checkpoint goes out at once, not
	// after IdleInterval: the transaction is done, and the slot waits on it.
	completes := tx.Final && len(tx.Events) == first && p.records == 0 &&
		p.pos.PartialCommitLSN != 0 && p.pos.PartialCommitLSN == tx.CommitLSN
	// A checkpoint inside a transaction moves on only with that
	// transaction's end: a keepalive's position after a resume there lies
	// between its LSN and the transaction's commit, and taking it would
	// forget the events of the transaction already in Kafka.
	if tx.Final && tx.EndLSN > p.pos.LSN && (p.pos.PartialCommitLSN == 0 || tx.CommitLSN == p.pos.PartialCommitLSN) {
		p.pos = p.pos.At(tx.EndLSN)
	}
	if len(tx.Requests) > 0 {
		p.requests(tx)
	}
	if completes || p.records >= p.cfg.MaxBatchEvents || p.bytes >= p.cfg.MaxBatchBytes {
		return p.flush(ctx)
	}
	return nil
}

// replays claims, for the lookup of a takeover from Debezium, the records
// of the events of tx the checkpoint the session resumed from covers, and
// returns the index of tx's first event to publish. Only the stretch of a
// takeover hands such events on (the decoder drops every other replay):
// each was published by Debezium or by this stream before, and claims the
// record that holds it, so that the record excuses no later event with
// the same identity. An event that went to the dead-letter topic, or that
// cannot be routed or encoded now, claims nothing.
func (p *Producer) replays(ctx context.Context, tx *decode.Tx) (int, error) {
	first := 0
	for first < len(tx.Events) && p.resume.Skip(tx.CommitLSN, tx.Events[first].Ordinal) {
		first++
	}
	if p.seen == nil {
		return first, nil
	}
	for i := range tx.Events[:first] {
		ev := &tx.Events[i]
		if ev.Bad != nil {
			continue
		}
		rec, err := p.router.Record(ctx, ev)
		var regErr *format.RegistryError
		switch {
		case errors.As(err, &regErr):
			return 0, err
		case err != nil:
			continue
		}
		if _, err := p.seen.Claim(ctx, rec); err != nil {
			return 0, err
		}
	}
	return first, nil
}

// room makes the open Kafka transaction ready for n more records of bytes
// bytes: it commits the open one first when they would not fit, and begins
// one when none is open.
func (p *Producer) room(ctx context.Context, n, bytes int) error {
	if p.records > 0 && (p.records+n > p.cfg.MaxBatchEvents || p.bytes+bytes > p.cfg.MaxBatchBytes) {
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	// Linger runs from the first event's arrival: settling the commit
	// before (begin) takes place within it.
	arrived := time.Now()
	if err := p.begin(ctx, p.bytes+bytes >= batchBytes(p.cfg)); err != nil {
		return err
	}
	if p.records == 0 {
		p.started = arrived
	}
	return nil
}

// record returns the event's record, or its dead letter when the event
// cannot be published: a bad row, a topic name Kafka rejects, a record over
// MaxRecordBytes. Without a dead-letter topic, or for a row of a table that
// does not fit the mapping, that is an error naming the event, unless
// SkipEvent names it.
func (p *Producer) record(ctx context.Context, ev *decode.Event) (*kgo.Record, error) {
	rec, bad, err := p.encode(ctx, ev)
	switch {
	case err != nil:
		return nil, err
	case bad == nil:
		if p.named(ev) {
			p.log.Warn("the event named to skip is not bad input: publishing it", "event", ev.Ref().String(), "lsn", ev.LSN.String(), "table", ev.Table, "event_id", string(ev.ID))
		}
		return rec, nil
	}
	topic := p.cfg.DeadLetterTopic
	switch {
	case p.named(ev) && p.cfg.SkipTopic != "":
		topic = p.cfg.SkipTopic
		p.skipped(ev, bad)
	case topic == "" || bad.Unmapped:
		return nil, p.stuck(ctx, bad)
	}
	p.log.Warn("dead-lettering event", "lsn", ev.LSN.String(), "event_id", string(ev.ID), "table", ev.Table,
		"column", bad.Column, "reason", bad.Reason, "topic", topic)
	p.dead++
	return format.DeadLetter(topic, ev, bad, p.cfg.MaxRecordBytes), nil
}

// encode returns the event's record, or why the event cannot be published:
// a bad row, a topic name Kafka rejects, a record over MaxRecordBytes. An
// error is no fault of the event (the schema registry failed).
func (p *Producer) encode(ctx context.Context, ev *decode.Event) (*kgo.Record, *decode.Error, error) {
	if ev.Bad != nil {
		return nil, ev.Bad, nil
	}
	rec, err := p.router.Record(ctx, ev)
	var encErr *format.EncodingError
	switch {
	case errors.As(err, &encErr):
		return nil, &decode.Error{Event: ev.Identity, Column: encErr.Column, Reason: "encoding the record", Err: encErr.Err}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("%s: %w", ev.Identity, err)
	case format.ValidTopic(rec.Topic) != nil:
		return nil, &decode.Error{Event: ev.Identity, Reason: "no valid topic for the aggregate type", Err: format.ValidTopic(rec.Topic)}, nil
	case format.RecordSize(rec) > p.cfg.MaxRecordBytes:
		return nil, &decode.Error{Event: ev.Identity, Reason: fmt.Sprintf("the record is %d bytes, over the %d bytes allowed", format.RecordSize(rec), p.cfg.MaxRecordBytes)}, nil
	}
	if ev.Partitioned {
		rec.Context = withPartition(ev.Partition) // for the partitioner
	}
	return rec, nil, nil
}

// named reports whether ev is the one event SkipEvent names.
func (p *Producer) named(ev *decode.Event) bool {
	return !p.cfg.SkipEvent.IsZero() && ev.Ref() == p.cfg.SkipEvent
}

// skipped logs the skip of ev and keeps it for the checkpoint of the open
// batch.
func (p *Producer) skipped(ev *decode.Event, bad *decode.Error) {
	p.skip = &checkpoint.Skip{Event: ev.Ref().String(), LSN: ev.LSN.String(), Table: ev.Table, EventID: string(ev.ID),
		Reason: bad.Error(), Time: time.Now().UTC()}
	p.log.Warn("skipping the event named to skip: it goes to the dead-letter topic and is recorded in the checkpoint",
		"event", p.skip.Event, "lsn", p.skip.LSN, "table", p.skip.Table, "event_id", p.skip.EventID, "reason", p.skip.Reason, "topic", p.cfg.SkipTopic)
}

// stuck is the error to stop with at err, the first thing in commit order
// that cannot be published as far as decoding and routing know. A record
// sent before it may still be refused by the broker, and then that record
// is where the stream is stuck: so flush first and report a refusal.
func (p *Producer) stuck(ctx context.Context, err error) error {
	if serr := p.settle(ctx); serr != nil {
		return serr
	}
	if p.inTxn {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.CommitTimeout)
		defer cancel()
		if ferr := p.client.Flush(cctx); ferr != nil {
			return p.fail(ctx, fmt.Errorf("flushing the records before %w: %w", err, ferr))
		}
		if perr := p.takeProduceErr(); perr != nil {
			return p.fail(ctx, perr)
		}
	}
	return err
}

// begin begins a Kafka transaction unless one is open. No record of it
// goes to the broker before the commit before it is settled: on Kafka 4
// (transaction version 2) a Produce that reaches the broker while the
// coordinator still completes the commit before, writing its markers, is
// held there for the broker's retry backoff
// (add.partitions.to.txn.retry.backoff.ms, 20 ms), and commits right after
// one another (a re-emitted chunk, a part of a large transaction) paid that
// at each. The commit's marker read back on the checkpoint partition means
// the coordinator has written the markers; and the new transaction's
// checkpoint covers that commit's events, so it must be found committed
// first anyway. The client sends a transaction's records at flush, where
// the read begun here is waited for; when fills says they may fill a batch,
// which the client sends at once, begin waits for it itself.
func (p *Producer) begin(ctx context.Context, fills bool) error {
	if p.inTxn {
		return nil
	}
	if c := p.unsettled; c != nil && c.watch != nil && !fills {
		c.watch.Hurry(time.Now()) // flush waits for it before sending
	} else if err := p.settle(ctx); err != nil {
		return err
	}
	if err := p.client.BeginTransaction(); err != nil {
		return p.fail(context.Background(), fmt.Errorf("beginning Kafka transaction: %w", err))
	}
	p.inTxn, p.began = true, time.Now()
	// The producer id is loaded (Fence did, and a commit under transaction
	// version 2 stores the epoch it bumped to), so this asks nothing of
	// Kafka. It is kept to tell, should the transaction fail, whether the
	// coordinator aborted it: a failed producer id cannot be read without
	// re-initializing it, which would bump the epoch once more.
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.CommitTimeout)
	defer cancel()
	var err error
	if p.pid, p.epoch, err = p.client.ProducerID(ctx); err != nil {
		p.epoch = -1
	}
	return nil
}

// flush commits the open batch with a checkpoint at p.pos and settles the
// commit (settle), at once or, for a part of a split transaction, later:
// settling tells the tracker, which is what lets the position be
// confirmed to Postgres.
func (p *Producer) flush(ctx context.Context) error {
	if p.records == 0 && !p.dirty && !p.committed().Less(p.pos) {
		return nil
	}
	start := time.Now()
	if err := p.begin(ctx, false); err != nil {
		return err
	}
	notes := p.notes
	if p.skip != nil {
		notes.Skipped = p.skip
	}
	wrote := append(slices.Collect(maps.Keys(p.byTopic)), p.cfg.CheckpointTopic)
	slices.Sort(wrote)
	cp := p.pos
	cp.Notes = &notes
	p.errMu.Lock()
	p.written = recordAt{offset: -1}
	p.errMu.Unlock()
	p.produce(ctx, &kgo.Record{
		Topic: p.cfg.CheckpointTopic,
		Key:   []byte(p.cfg.CheckpointKey),
		Value: cp.EncodeIn(checkpoint.Owner{Stream: p.cfg.Stream, Slot: p.cfg.Slot, TransactionalID: p.cfg.TransactionalID}, start, wrote),
	}, nil)
	p.hook("after-produce")
	// Nothing is sent before the commit before is settled (begin).
	if err := p.settle(ctx); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CommitTimeout)
	defer cancel()
	if err := p.client.Flush(cctx); err != nil {
		return p.fail(ctx, fmt.Errorf("flushing Kafka transaction for checkpoint %s: %w", p.pos, err))
	}
	if err := p.takeProduceErr(); err != nil {
		return p.fail(ctx, err)
	}
	p.hook("before-commit")
	if err := p.client.EndTransaction(cctx, kgo.TryCommit); err != nil {
		return p.fail(ctx, fmt.Errorf("committing Kafka transaction for checkpoint %s: %w", p.pos, err))
	}
	p.inTxn = false
	p.hook("after-commit")
	c := commit{cp: cp, events: p.records - p.reemitted}
	p.errMu.Lock()
	c.at = p.written
	p.errMu.Unlock()
	if c.at.offset >= 0 {
		p.acked = Acknowledged{Partition: c.at.partition, Offset: c.at.offset, Checkpoint: cp}
	}
	if len(p.batch) > 0 {
		c.newest = p.batch[len(p.batch)-1].CommitTime
	}
	// The commit is settled later: as the next transaction begins, before
	// it hands the client a record (begin), or once its marker is read,
	// settleDelay after it or sooner, when no other comes. Looking for the
	// marker here, as Kafka is still writing it, would hold up the
	// producer even when nothing follows, and a transaction that begins a
	// linger later finds it written. A read a while later finds the
	// markers of the other streams' commits of that while too (Markers),
	// and answers them all at once. A commit no other follows is
	// confirmed to Postgres up to settleDelay (or Linger) later, and
	// within half of CommitTimeout, which bounds the wait for its marker:
	// a read due after that bound left a Linger longer than CommitTimeout
	// failing every commit no other followed.
	c.ended = time.Now()
	p.lastCommit, p.commitTook = c.ended, c.ended.Sub(start)
	if c.at.offset >= 0 {
		due := c.ended.Add(min(max(p.cfg.Linger, settleDelay), p.cfg.CommitTimeout/2))
		c.watch = p.markers.Watch(p.cfg.CheckpointTopic, c.at.partition, c.at.offset, due)
	}
	p.unsettled = &c
	p.metrics.committed(p.byTopic, p.dead, p.bytes, time.Since(start), p.pos.LSN)
	p.metrics.reemitCommitted(p.reemitted, p.notes.Reemits)
	if p.skip != nil {
		p.notes.Skipped = p.skip
	}
	p.reset()
	return nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// settleDelay is how long after a commit its marker is looked for at the
// latest when no other transaction follows (or Linger, if longer): long
// enough for the reads of several streams' commits to be one, short
// beside ConfirmInterval, within which the commit is confirmed anyway.
const settleDelay = 20 * time.Millisecond

// stopWatch ends the wait for an unsettled commit as Run returns without
// settling it: the next session reads it as the checkpoint.
func (p *Producer) stopWatch() {
	if c := p.unsettled; c != nil && c.watch != nil {
		c.watch.Stop()
	}
}

// settle waits until the unsettled commit, if any, is decided on the
// checkpoint partition (visible), then tells the tracker of it, which may
// confirm its position to Postgres. The tracker keeps the notes too: they
// tell where re-emit requests stand in Kafka. Re-emitted records are no
// events of the stream's positions, whose lag the tracker measures.
func (p *Producer) settle(ctx context.Context) error {
	c := p.unsettled
	if c == nil {
		return nil
	}
	p.unsettled = nil
	if err := p.visible(ctx, c); err != nil {
		err = p.fail(ctx, err)
		if ie := (*InvisibleError)(nil); errors.As(err, &ie) {
			// The client is sound, only the commit before is not: the
			// open transaction, whose checkpoint covers that commit's
			// events, is aborted as Run returns.
			p.failed = false
		}
		return err
	}
	return p.tracker.Committed(c.cp, c.events, c.newest)
}

// settleLast settles the last commit as Run returns at its context's end,
// so that the session's last status update confirms it. One that cannot be
// settled within a few seconds is left to the next session, which reads
// it as the checkpoint.
func (p *Producer) settleLast(ctx context.Context) {
	c := p.unsettled
	if c == nil || p.failed {
		return
	}
	p.unsettled = nil
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := p.visible(sctx, c)
	if err == nil {
		err = p.tracker.Committed(c.cp, c.events, c.newest)
	}
	if err != nil {
		p.log.Warn("the last commit is not confirmed to Postgres; the next session reads it as the checkpoint", "checkpoint", c.cp.String(), "err", err)
	}
}

// committed is the position of the last commit Kafka acknowledged, settled
// or not.
func (p *Producer) committed() checkpoint.Checkpoint {
	if p.unsettled != nil {
		return p.unsettled.cp
	}
	cp, _ := p.tracker.InKafka()
	return cp
}

// reset empties the batch bookkeeping once its transaction has ended.
func (p *Producer) reset() {
	p.records, p.bytes, p.dead, p.reemitted = 0, 0, 0, 0
	p.skip, p.dirty = nil, false
	clear(p.batch)
	p.batch = p.batch[:0]
	clear(p.byTopic)
}

// produce sends rec, which carries the event ev names (nil for the
// checkpoint record), so that a refusal names the event. ev points into a
// Tx the open batch holds until the transaction ends.
func (p *Producer) produce(ctx context.Context, rec *kgo.Record, ev *decode.Identity) {
	p.client.Produce(ctx, rec, func(r *kgo.Record, err error) {
		switch {
		case err != nil:
			p.onProduced(r, ev, err)
		case ev == nil:
			p.errMu.Lock()
			p.written = recordAt{r.Partition, r.Offset}
			p.errMu.Unlock()
		}
	})
}

func (p *Producer) onProduced(r *kgo.Record, ev *decode.Identity, err error) {
	re := &RecordError{Topic: r.Topic, Event: ev, Err: err}
	if c := chosenPartition(r); c != nil && c.of > 0 && int(c.partition) >= c.of {
		re.Err = fmt.Errorf("%w: partition %d, topic %s has %d: %w", ErrNoPartition, c.partition, r.Topic, c.of, err)
	}
	p.errMu.Lock()
	if p.produceErr == nil {
		p.produceErr = re
	}
	p.errMu.Unlock()
}

func (p *Producer) takeProduceErr() error {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	err := p.produceErr
	p.produceErr = nil
	return err
}

// abort ends an open Kafka transaction without committing it, on a clean
// stop. It is a courtesy that frees the partitions' last stable offset
// early: the next Fence aborts the transaction anyway. After a failed
// operation it is skipped, because from an errored state franz-go's abort
// re-initializes the producer id, and a paused zombie doing that would
// fence the instance that took over.
func (p *Producer) abort(ctx context.Context) {
	if !p.inTxn || p.failed {
		return
	}
	p.inTxn = false
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := p.client.AbortBufferedRecords(actx)
	if err == nil {
		err = p.client.EndTransaction(actx, kgo.TryAbort)
	}
	p.metrics.aborted()
	if err != nil {
		p.log.Warn("aborting Kafka transaction", "err", err)
	}
	p.pos, _ = p.tracker.InKafka()
	p.reset()
}

// Permanent reports whether err means publishing cannot succeed by retrying:
// another instance took over, the broker refused access, or it refused a
// record for what the record is.
func Permanent(err error) bool {
	var re *RecordError
	var reg *format.RegistryError
	if errors.As(err, &reg) {
		return reg.Permanent
	}
	return errors.Is(err, ErrFenced) || errors.Is(err, kafka.ErrAuthorization) || errors.Is(err, ErrNoPartition) || errors.Is(err, kafka.ErrTopicMissing) ||
		(errors.As(err, &re) && (errors.Is(err, kerr.MessageTooLarge) ||
			errors.Is(err, kerr.RecordListTooLarge) ||
			// A timestamp outside message.timestamp.{before,after}.max.ms
			// (Kafka 4's default: no more than an hour ahead).
			errors.Is(err, kerr.InvalidTimestamp) ||
			errors.Is(err, kerr.InvalidTopicException) ||
			errors.Is(err, kerr.InvalidRecord)))
}

// Metrics are the producer's Prometheus metrics.
type Metrics struct {
	events       *prometheus.CounterVec
	batchEvents  prometheus.Histogram
	batchBytes   prometheus.Histogram
	bytes        prometheus.Counter
	transactions *prometheus.CounterVec
	commitTime   prometheus.Histogram
	markerTime   prometheus.Histogram
	committedLSN prometheus.Gauge
	deadLetters  prometheus.Counter
	registry     *format.RegistryMetrics
	txnFailures  *prometheus.CounterVec
	takeover     prometheus.Counter
	held         *prometheus.GaugeVec
	reemit       *reemitMetrics
	// requests times the producer's Kafka requests, by kind: a Produce
	// held in the broker (a transaction begun while the coordinator still
	// completes the one before) shows as a second mode.
	requests *prometheus.HistogramVec
	// kafka are franz-go's client metrics. kprom allows one client at a
	// time, so only the producer's client reports them.
	kafka kgo.Hook
}

// NewMetrics registers the producer's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_events_published_total", Help: "Outbox events in committed Kafka transactions, by topic (the DLQ included)."}, []string{"topic"}),
		batchEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walstream_batch_events", Help: "Events per committed Kafka transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walstream_batch_bytes", Help: "Event bytes per committed Kafka transaction.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 11)}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walstream_event_bytes_published_total", Help: "Key, value and id bytes of events in committed Kafka transactions."}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_kafka_transactions_total", Help: "Kafka transactions ended, by result."}, []string{"result"}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walstream_commit_duration_seconds", Help: "Time to flush and commit one Kafka transaction.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		markerTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walstream_commit_marker_seconds",
			Help: "Time from Kafka's answer to a commit to its marker read on the checkpoint partition: how long Kafka took to write the commit's markers, " +
				"which read_committed readers wait for, or, when that took less, how long walstream waited to look (20 ms or the linger, whichever is longer, or until the next transaction began).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		committedLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_committed_lsn", Help: "Position committed in Kafka, as a WAL byte offset."}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walstream_dead_lettered_total", Help: "Events committed to the dead-letter topic instead of their own."}),
		txnFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_kafka_transaction_failures_total",
			Help: "Kafka transaction operations that failed (initializing the producer, producing, committing), by cause: " +
				"aborted_by_coordinator, fenced, not_enough_replicas, no_leader, coordinator_unavailable, concurrent_transactions, " +
				"invalid_txn_state, transaction_abortable, out_of_order_sequence, commit_not_visible, timeout, unreachable, refused, other."}, []string{"cause"}),
		takeover: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walstream_takeover_events_skipped_total", Help: "Events not published again because Debezium had published them before walstream took over its slot."}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walstream_checkpoint_topic_held_seconds",
			Help: "How long the transaction holding back the last stable offset of a checkpoint topic partition has been open, by partition and holder " +
				"(its transactional id, or producer id): read_committed readers of the topic see no later checkpoint until it ends; walstream reads past it."},
			[]string{"partition", "holder"}),
	}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "walstream_kafka_request_duration_seconds",
		Help:    "Time from writing a request of the producer's Kafka client to reading its answer, by request (Produce, EndTxn, InitProducerID, ...).",
		Buckets: prometheus.ExponentialBuckets(0.00025, 2, 14)}, []string{"request"})
	m.transactions.WithLabelValues("committed")
	m.transactions.WithLabelValues("aborted")
	for _, k := range []kmsg.Key{kmsg.Produce, kmsg.EndTxn} {
		m.requests.WithLabelValues(k.Name())
	}
	m.kafka = kafka.ClientMetrics(reg)
	m.registry = format.NewRegistryMetrics(reg)
	m.reemit = newReemitMetrics(reg)
	reg.MustRegister(m.events, m.batchEvents, m.batchBytes, m.bytes, m.transactions, m.commitTime, m.markerTime, m.committedLSN, m.deadLetters, m.txnFailures, m.takeover, m.held, m.requests)
	return m
}

func (m *Metrics) committed(byTopic map[string]int, dead, bytes int, d time.Duration, lsn pglogrepl.LSN) {
	if m == nil {
		return
	}
	events := 0
	for topic, n := range byTopic {
		m.events.WithLabelValues(topic).Add(float64(n))
		events += n
	}
	if events > 0 {
		m.batchEvents.Observe(float64(events))
		m.batchBytes.Observe(float64(bytes))
	}
	m.deadLetters.Add(float64(dead))
	m.bytes.Add(float64(bytes))
	m.transactions.WithLabelValues("committed").Inc()
	m.commitTime.Observe(d.Seconds())
	m.committedLSN.Set(float64(lsn))
}

// markerRead observes how long after Kafka's answer a commit's marker
// was read.
func (m *Metrics) markerRead(d time.Duration) {
	if m != nil {
		m.markerTime.Observe(max(d, 0).Seconds())
	}
}

func (m *Metrics) registryMetrics() *format.RegistryMetrics {
	if m == nil {
		return nil
	}
	return m.registry
}

func (m *Metrics) hooks() []kgo.Hook {
	if m == nil {
		return nil
	}
	return []kgo.Hook{m.kafka, requestTimer{m.requests}}
}

// requestTimer observes each request's round trip from franz-go's hook.
type requestTimer struct{ h *prometheus.HistogramVec }

var _ kgo.HookBrokerE2E = requestTimer{}

func (t requestTimer) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.Err() == nil {
		t.h.WithLabelValues(kmsg.NameForKey(key)).Observe(e2e.DurationE2E().Seconds())
	}
}

func (m *Metrics) txnFailed(cause string) {
	if m != nil {
		m.txnFailures.WithLabelValues(cause).Inc()
	}
}

// Held sets walstream_checkpoint_topic_held_seconds to the transactions
// holding back the checkpoint topic now, and none else.
func (m *Metrics) Held(holds []kafka.Hold, now time.Time) {
	if m == nil {
		return
	}
	m.held.Reset()
	for _, h := range holds {
		m.held.WithLabelValues(fmt.Sprint(h.Partition), h.Holder()).Set(now.Sub(h.Since).Seconds())
	}
}

func (m *Metrics) takenOver() {
	if m != nil {
		m.takeover.Inc()
	}
}

func (m *Metrics) aborted() {
	if m != nil {
		m.transactions.WithLabelValues("aborted").Inc()
	}
}
