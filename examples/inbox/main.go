package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kslog"
)

// schema creates the tables; it is idempotent and runs at every start.
//
//go:embed schema.sql
var schema string

// Defaults, named so README.md and --help agree with the code.
const (
	DefaultName          = "inbox"
	DefaultBatchRecords  = 500
	DefaultTopicInterval = time.Second
)

// Config is everything the consumer is told.
type Config struct {
	PGURL         string
	Brokers       string
	Topics        string // comma-separated
	Name          string
	BatchRecords  int
	TopicInterval time.Duration
	CreateTables  bool
	LogLevel      string
}

// envPrefix maps flag --batch-records to INBOX_BATCH_RECORDS.
const envPrefix = "INBOX_"

func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process
	}()
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox:", err)
		os.Exit(1)
	}
}

// parseConfig reads flags, then fills every flag not given from its
// environment variable.
func parseConfig(args []string, stderr io.Writer) (*Config, error) {
	var c Config
	fs := flag.NewFlagSet("inbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, name, def, usage string) { fs.StringVar(p, name, def, usage+" ($"+envName(name)+")") }
	str(&c.PGURL, "pg-url", "", "Postgres connection URL or DSN of the inbox database (required)")
	str(&c.Brokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers (required)")
	str(&c.Topics, "topics", "", "comma-separated topics to consume, e.g. outbox.event.Order (required)")
	str(&c.Name, "name", DefaultName, "this consumer's name: the key of its rows in inbox_offsets and of its single-instance lock")
	fs.IntVar(&c.BatchRecords, "batch-records", DefaultBatchRecords, "most records applied in one Postgres transaction ($"+envName("batch-records")+")")
	fs.DurationVar(&c.TopicInterval, "topic-interval", DefaultTopicInterval, "how often to look for topics that do not exist yet ($"+envName("topic-interval")+")")
	fs.BoolVar(&c.CreateTables, "create-tables", true, "run schema.sql at start; false needs the tables created beforehand, but no CREATE privilege ($"+envName("create-tables")+")")
	str(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: inbox [flags]\n\nApplies walstream's outbox records to Postgres exactly once.\nEvery flag can also be set by the environment variable named after it.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("$%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &c, c.Validate()
}

// Validate reports every invalid setting, naming its flag.
func (c *Config) Validate() error {
	var errs []error
	if c.PGURL == "" {
		errs = append(errs, errors.New("--pg-url is required"))
	}
	if c.Brokers == "" {
		errs = append(errs, errors.New("--kafka-brokers is required"))
	}
	if len(c.topicList()) == 0 {
		errs = append(errs, errors.New("--topics is required"))
	}
	if c.Name == "" {
		errs = append(errs, errors.New("--name must not be empty"))
	}
	if c.BatchRecords < 1 {
		errs = append(errs, fmt.Errorf("--batch-records %d: must be at least 1", c.BatchRecords))
	}
	if c.TopicInterval <= 0 {
		errs = append(errs, fmt.Errorf("--topic-interval %s: must be positive", c.TopicInterval))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: %w", c.LogLevel, err))
	}
	return errors.Join(errs...)
}

func (c *Config) topicList() []string { return splitList(c.Topics) }

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel)) // validated
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("consumer", cfg.Name)

	conn, err := pgx.Connect(ctx, cfg.PGURL)
	if err != nil {
		return fmt.Errorf("connecting to Postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Log where, never the URL: it may hold a password.
	log.Info("connected to Postgres", "host", conn.Config().Host, "database", conn.Config().Database)

	if err := lockName(ctx, conn, cfg.Name, log); err != nil {
		return err
	}
	if cfg.CreateTables {
		// CREATE TABLE IF NOT EXISTS needs the CREATE privilege on the
		// schema even when the table exists, hence the flag.
		if _, err := conn.Exec(ctx, schema); err != nil {
			return fmt.Errorf("creating the inbox tables (or set --create-tables=false and apply schema.sql beforehand): %w", err)
		}
	}

	seeds := splitList(cfg.Brokers)
	meta, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.WithLogger(kslog.New(log)))
	if err != nil {
		return fmt.Errorf("creating the Kafka metadata client: %w", err)
	}
	parts, err := waitForTopics(ctx, meta, cfg.topicList(), cfg.TopicInterval, log)
	meta.Close()
	if err != nil {
		return err
	}
	start, err := loadOffsets(ctx, conn, cfg.Name, parts, log)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.WithLogger(kslog.New(log)),
		// Static assignment at the offsets stored in Postgres; no consumer
		// group, so Kafka stores no offsets for this consumer at all.
		kgo.ConsumePartitions(start),
		// Only records of committed Kafka transactions: walstream's
		// aborted attempts are never applied.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// When a stored offset is no longer in the log (retention, a
		// recreated topic), re-read from the start rather than skip:
		// inbox_processed absorbs what was applied already.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return fmt.Errorf("creating the Kafka consumer: %w", err)
	}
	defer cl.Close()

	var applied, duplicates int
	for {
		fs := cl.PollRecords(ctx, cfg.BatchRecords)
		if ctx.Err() != nil {
			// Records polled but not applied are read again on the next
			// start, from the offsets in Postgres.
			log.Info("stopped", "applied", applied, "duplicates", duplicates)
			return nil
		}
		if err := fetchError(fs, log); err != nil {
			return err
		}
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		a, d, err := applyBatch(ctx, conn, cfg.Name, recs)
		if err != nil {
			if ctx.Err() != nil {
				// Interrupted: whether or not the commit reached Postgres,
				// effects and offsets went together, and whatever did not
				// commit is applied on the next start.
				log.Info("stopped", "applied", applied, "duplicates", duplicates)
				return nil
			}
			// No retry in place: the client has already moved past these
			// records. Exiting and restarting resumes from Postgres.
			return err
		}
		applied += a
		duplicates += d
		log.Debug("batch committed", "records", len(recs), "applied", a, "duplicates", d)
	}
}

// fetchError returns the first error of fs that should stop the consumer.
// A data loss (a stored offset no longer in the log, say after retention)
// is only logged: franz-go has already reset the partition to the start
// (ConsumeResetOffset), and inbox_processed absorbs what is read again.
// Anything else is not retried in place; a restart resumes from Postgres.
func fetchError(fs kgo.Fetches, log *slog.Logger) error {
	for _, fe := range fs.Errors() {
		var loss *kgo.ErrDataLoss
		if errors.As(fe.Err, &loss) {
			log.Warn("records lost from the log; consuming from where the broker reset to", "topic", fe.Topic, "partition", fe.Partition, "err", fe.Err)
			continue
		}
		return fmt.Errorf("fetching topic %s partition %d: %w", fe.Topic, fe.Partition, fe.Err)
	}
	return nil
}

// lockName holds a session-level advisory lock named after the consumer
// for as long as conn lives. Partitions are assigned statically, so two
// instances under one name would read the same records; the dedup table
// would keep that correct, but the second one only wastes work. Postgres
// releases the lock when the session ends, also when the process is killed.
func lockName(ctx context.Context, conn *pgx.Conn, name string, log *slog.Logger) error {
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext('walstream-inbox'), hashtext($1))", name).Scan(&ok); err != nil {
		return fmt.Errorf("locking consumer name %q: %w", name, err)
	}
	if ok {
		return nil
	}
	log.Info("another instance with this name is running; waiting for it to stop")
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('walstream-inbox'), hashtext($1))", name); err != nil {
		return fmt.Errorf("waiting for the lock of consumer name %q: %w", name, err)
	}
	return nil
}

// waitForTopics returns the partitions of every topic, waiting until all
// exist: walstream creates a topic with the first event routed to it, which
// can be long after this consumer starts. It asks the broker each time
// (kadm would answer from franz-go's metadata cache, up to 5 s old).
func waitForTopics(ctx context.Context, cl *kgo.Client, topics []string, every time.Duration, log *slog.Logger) (map[string][]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, topic := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
	}
	logged := false
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("reading the metadata of topics %s: %w", strings.Join(topics, ","), err)
		}
		parts := make(map[string][]int32)
		for _, rt := range resp.Topics {
			if rt.Topic == nil || rt.ErrorCode != 0 || len(rt.Partitions) == 0 {
				continue
			}
			for _, p := range rt.Partitions {
				parts[*rt.Topic] = append(parts[*rt.Topic], p.Partition)
			}
		}
		var missing []string
		for _, topic := range topics {
			if len(parts[topic]) == 0 {
				missing = append(missing, topic)
			}
		}
		if len(missing) == 0 {
			return parts, nil
		}
		if !logged {
			log.Info("waiting for topics to exist", "topics", strings.Join(missing, ","))
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for topics %s: %w", strings.Join(missing, ","), ctx.Err())
		case <-time.After(every):
		}
	}
}

// loadOffsets returns where to start each partition: its stored next
// offset, or the start of the partition when nothing is stored.
func loadOffsets(ctx context.Context, conn *pgx.Conn, name string, parts map[string][]int32, log *slog.Logger) (map[string]map[int32]kgo.Offset, error) {
	stored := make(map[string]map[int32]int64)
	rows, err := conn.Query(ctx, "SELECT topic, partition, next_offset FROM inbox_offsets WHERE consumer = $1", name)
	if err != nil {
		return nil, fmt.Errorf("reading the offsets of consumer %q: %w", name, err)
	}
	for rows.Next() {
		var topic string
		var partition int32
		var next int64
		if err := rows.Scan(&topic, &partition, &next); err != nil {
			return nil, fmt.Errorf("reading the offsets of consumer %q: %w", name, err)
		}
		if stored[topic] == nil {
			stored[topic] = make(map[int32]int64)
		}
		stored[topic][partition] = next
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the offsets of consumer %q: %w", name, err)
	}
	start := make(map[string]map[int32]kgo.Offset)
	for topic, ps := range parts {
		start[topic] = make(map[int32]kgo.Offset)
		for _, p := range ps {
			if next, ok := stored[topic][p]; ok {
				start[topic][p] = kgo.NewOffset().At(next)
				log.Info("resuming", "topic", topic, "partition", p, "offset", next)
			} else {
				start[topic][p] = kgo.NewOffset().AtStart()
				log.Info("starting at the beginning", "topic", topic, "partition", p)
			}
		}
	}
	return start, nil
}

// applyBatch applies recs in one Postgres transaction and returns how many
// were applied and how many were duplicates. The offsets stored are those
// after the last record of each partition, duplicates included.
func applyBatch(ctx context.Context, conn *pgx.Conn, name string, recs []*kgo.Record) (applied, duplicates int, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("beginning a transaction: %w", err)
	}
	// A no-op after Commit; otherwise it discards effects and offsets together.
	defer tx.Rollback(context.WithoutCancel(ctx))

	type partition struct {
		topic string
		p     int32
	}
	next := make(map[partition]int64)
	for _, r := range recs {
		fresh, err := applyRecord(ctx, tx, r)
		if err != nil {
			return 0, 0, err
		}
		if fresh {
			applied++
		} else {
			duplicates++
		}
		next[partition{r.Topic, r.Partition}] = r.Offset + 1 // records of a partition arrive in offset order
	}
	for tp, off := range next {
		_, err := tx.Exec(ctx, `INSERT INTO inbox_offsets (consumer, topic, partition, next_offset) VALUES ($1, $2, $3, $4)
			ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()`,
			name, tp.topic, tp.p, off)
		if err != nil {
			return 0, 0, fmt.Errorf("storing offset %d of topic %s partition %d: %w", off, tp.topic, tp.p, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		last := recs[len(recs)-1]
		return 0, 0, fmt.Errorf("committing %d records up to topic %s partition %d offset %d: %w",
			len(recs), last.Topic, last.Partition, last.Offset, err)
	}
	return applied, duplicates, nil
}

// applyRecord records r's event id and, when it is new, applies the
// business effect; it reports whether the id was new.
func applyRecord(ctx context.Context, tx pgx.Tx, r *kgo.Record) (bool, error) {
	id := eventID(r)
	if id == "" {
		// Without an id the record cannot be deduplicated. Stopping here
		// stores nothing of this batch, so a restart stops at the same
		// record until someone deals with it.
		return false, fmt.Errorf("record at topic %s partition %d offset %d has no id header: cannot deduplicate it, stopping",
			r.Topic, r.Partition, r.Offset)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO inbox_processed (event_id, topic, partition, "offset") VALUES ($1, $2, $3, $4)
		ON CONFLICT (event_id) DO NOTHING`, id, r.Topic, r.Partition, r.Offset)
	if err != nil {
		return false, fmt.Errorf("recording event %s (topic %s partition %d offset %d): %w", id, r.Topic, r.Partition, r.Offset, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil // applied before: a redelivery
	}
	// The business effect: bump the aggregate's version and log the event
	// under it. The row lock the upsert takes orders versions per aggregate.
	var version int64
	err = tx.QueryRow(ctx, `INSERT INTO aggregates (topic, aggregate_id, version, last_event_id) VALUES ($1, $2, 1, $3)
		ON CONFLICT (topic, aggregate_id) DO UPDATE
		SET version = aggregates.version + 1, last_event_id = EXCLUDED.last_event_id, updated_at = now()
		RETURNING version`, r.Topic, string(r.Key), id).Scan(&version)
	if err != nil {
		return false, fmt.Errorf("applying event %s (topic %s partition %d offset %d) to aggregate %q: %w",
			id, r.Topic, r.Partition, r.Offset, r.Key, err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO aggregate_events (topic, aggregate_id, version, event_id, payload) VALUES ($1, $2, $3, $4, $5)`,
		r.Topic, string(r.Key), version, id, r.Value)
	if err != nil {
		return false, fmt.Errorf("logging event %s (topic %s partition %d offset %d) as version %d of aggregate %q: %w",
			id, r.Topic, r.Partition, r.Offset, version, r.Key, err)
	}
	return true, nil
}

// eventID is the record's id header, which walstream sets to the outbox
// row's id; "" when there is none.
func eventID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "id" {
			return string(h.Value)
		}
	}
	return ""
}
