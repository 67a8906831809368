package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
)

// ReemitSettings are how re-emit requests read their rows.
type ReemitSettings struct {
	// ChunkRows is the most rows read in one chunk, one statement, and
	// handed to the producer as one item: live transactions wait behind
	// one chunk at most. At most MaxBatchEvents, so that a chunk is never
	// split over Kafka transactions.
	ChunkRows int
	// Rate, when positive, is the most rows a request publishes per second.
	Rate int
	// SignalTable, when set, is Debezium's signal table (schema.table): its
	// execute-snapshot and stop-snapshot signals are re-emit requests and
	// cancels. It must be in the publication.
	SignalTable string
}

// chunkQueue takes chunks for the producer; Put either takes one or
// returns ctx's error having taken nothing.
type chunkQueue interface {
	Put(ctx context.Context, tx *decode.Tx) error
}

// reemitter reads the rows of the re-emit requests the checkpoint in Kafka
// records, one request after another in the order the stream met them, in
// chunks by primary key, and hands each chunk to the producer. It works
// from what Kafka committed: at a session's start it goes on after the
// last chunk Kafka has, and it starts a request only once the checkpoint
// that accepted it committed. Within a session it reads ahead of the
// commits, from the last chunk it handed on: the producer applies chunks
// in order, and a session that fails ends this one too.
//
// A failure to read (Postgres restarting) is retried while the stream goes
// on; a request whose predicate or table no longer works is failed, with
// the reason, through the producer.
type reemitter struct {
	cfg *Config
	log *slog.Logger
	out chunkQueue
	// committed returns the requests the last committed checkpoint records.
	committed func() checkpoint.Reemits
	// wake is signalled after each commit.
	wake chan struct{}
	// connect opens the connection rows are read on.
	connect func(ctx context.Context) (*pgx.Conn, error)

	// Below: Run's own.
	conn *pgx.Conn
	cur  *reading
	// handedLast are the requests whose last chunk (or failure) was
	// handed on: their end is on its way to Kafka.
	handedLast map[string]bool
	// taken are signalled, oldest first, as the producer is done with
	// the chunks handed on: at most chunksAhead are outstanding.
	taken []chan struct{}
	// next is when the rate limit lets the next chunk be read.
	next time.Time
}

// reading is the request being read.
type reading struct {
	req   checkpoint.Reemit
	table *replication.ReemitTable
	rows  *decode.Rows
	// after is the key of the last row handed on; upper the bound.
	after, upper []string
	// first carries the start's figures on the first chunk.
	first    bool
	estimate int64
}

// retryReemit is how long a failed read waits before the next try.
const retryReemit = 2 * time.Second

// Run reads until ctx ends.
func (r *reemitter) Run(ctx context.Context) error {
	r.handedLast = make(map[string]bool)
	defer r.closeConn()
	for {
		if err := r.step(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The request keeps its place: the producer has every chunk
			// handed on, and takes the next only after them.
			r.log.Warn("re-emit: reading rows failed; trying again", "err", err, "retry_in", retryReemit)
			r.closeConn()
			if err := sleepCtx(ctx, retryReemit); err != nil {
				return err
			}
		}
	}
}

// step hands on the next chunk of the request to read, or waits for one
// to be committed.
func (r *reemitter) step(ctx context.Context) error {
	reqs := r.committed()
	if r.cur != nil {
		if i := reqs.Find(r.cur.req.ID); i < 0 || !reqs[i].State.Active() {
			r.cur = nil // cancelled, or ended by the producer
		}
	}
	if r.cur == nil {
		i := slices.IndexFunc(reqs, func(q checkpoint.Reemit) bool { return q.State.Active() && !r.handedLast[q.ID] })
		if i < 0 {
			r.closeConn()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-r.wake:
				return nil
			}
		}
		if err := r.start(ctx, reqs[i]); err != nil {
			return err
		}
		if r.cur == nil {
			return nil // failed through the producer
		}
	}
	return r.chunk(ctx)
}

// start opens the request req: its table as it is now, and where it
// stands.
func (r *reemitter) start(ctx context.Context, req checkpoint.Reemit) error {
	conn, err := r.conn1(ctx)
	if err != nil {
		return err
	}
	o := r.outbox(req.Table)
	t, perr := replication.ParseTable(req.Table)
	if o == nil || perr != nil {
		return r.fail(ctx, req, fmt.Sprintf("table %s is not an outbox table of this stream", req.Table))
	}
	rt, err := replication.DescribeReemit(ctx, conn, r.cfg.Names, t, req.Where)
	if replication.FaultOfRequest(err) {
		return r.fail(ctx, req, err.Error())
	}
	if err != nil {
		return err
	}
	if req.State == checkpoint.ReemitRunning && !slices.Equal(rt.Key, req.Key) {
		return r.fail(ctx, req, fmt.Sprintf("the primary key of %s is now (%s), not (%s) as the request started with",
			req.Table, strings.Join(rt.Key, ", "), strings.Join(req.Key, ", ")))
	}
	infos, err := replication.DescribeTables(ctx, conn, replication.Names{Publication: r.cfg.Names.Publication, Tables: []replication.Table{t}})
	if err != nil {
		return err
	}
	cols := make([]decode.Column, len(rt.Columns))
	for i, c := range rt.Columns {
		cols[i] = decode.Column{Name: c.Name, Type: c.Type, TypMod: c.TypMod}
	}
	rows, err := decode.NewRows(o, cols, catalogOf(infos[0]), r.cfg.Encoding.Value != format.String)
	if err != nil {
		return r.fail(ctx, req, fmt.Sprintf("table %s does not fit the outbox mapping: %v", req.Table, err))
	}
	cur := &reading{req: req, table: rt, rows: rows, after: req.Last, upper: req.Upper}
	if req.State == checkpoint.ReemitQueued {
		cur.first = true
		if cur.upper, cur.estimate, err = rt.Bounds(ctx, conn); replication.FaultOfRequest(err) {
			return r.fail(ctx, req, err.Error())
		} else if err != nil {
			return err
		}
	}
	r.cur = cur
	r.log.Info("re-emit: reading rows", "request", req.ID, "table", req.Table, "key", strings.Join(rt.Key, ","),
		"after_key", cur.after, "upper_key", cur.upper, "estimated_rows", cur.estimate)
	return nil
}

// chunk reads the next chunk of the current request and hands it on.
func (r *reemitter) chunk(ctx context.Context) error {
	cur := r.cur
	if err := sleepCtx(ctx, time.Until(r.next)); err != nil {
		return err
	}
	c := &decode.Chunk{Request: cur.req.ID, After: cur.after}
	if cur.first {
		c.Key, c.Upper, c.Estimate = cur.table.Key, cur.upper, cur.estimate
	}
	tx := &decode.Tx{Chunk: c}
	if cur.upper == nil {
		c.Done = true // no row matched
	} else {
		conn, err := r.conn1(ctx)
		if err != nil {
			return err
		}
		read, err := cur.table.ReadChunk(ctx, conn, cur.after, cur.upper, min(r.cfg.Reemit.ChunkRows, r.cfg.MaxBatchEvents), r.chunkBytes())
		if replication.FaultOfRequest(err) {
			return r.fail(ctx, cur.req, err.Error())
		}
		if err != nil {
			return err
		}
		tx.Events = make([]decode.Event, 0, len(read.Rows))
		for _, row := range read.Rows {
			ev, err := cur.rows.Event(row)
			if err != nil {
				return r.fail(ctx, cur.req, err.Error())
			}
			tx.Events = append(tx.Events, ev)
			tx.Bytes += ev.Size()
		}
		c.Last, c.Done = read.Last, !read.More
		if rate := r.cfg.Reemit.Rate; rate > 0 {
			r.next = time.Now().Add(time.Duration(float64(len(read.Rows)) / float64(rate) * float64(time.Second)))
		}
	}
	if err := r.hand(ctx, tx); err != nil {
		return err
	}
	cur.first = false
	if c.Last != nil {
		cur.after = c.Last
	}
	if c.Done {
		r.handedLast[cur.req.ID] = true
		r.cur = nil
	}
	return nil
}

// chunksAhead is how many chunks handed on the producer may not be done
// with: the one it publishes and one waiting in its lane, while the next
// is read. With one, the reading and the publishing of a chunk waited for
// each other whenever either took longer than usual.
const chunksAhead = 2

// hand puts a chunk on the queue once fewer than chunksAhead are
// outstanding.
func (r *reemitter) hand(ctx context.Context, tx *decode.Tx) error {
	if len(r.taken) >= chunksAhead {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.taken[0]:
		}
		r.taken = r.taken[1:]
	}
	taken := make(chan struct{})
	tx.Chunk.Taken = func() { close(taken) }
	if err := r.out.Put(ctx, tx); err != nil {
		return err
	}
	r.taken = append(r.taken, taken)
	return nil
}

// fail hands on the end of req as failed, for the producer to record.
func (r *reemitter) fail(ctx context.Context, req checkpoint.Reemit, reason string) error {
	r.log.Warn("re-emit: the request cannot go on", "request", req.ID, "table", req.Table, "reason", reason)
	after := req.Last
	if r.cur != nil && r.cur.req.ID == req.ID {
		after = r.cur.after
	}
	r.cur = nil
	r.handedLast[req.ID] = true
	return r.hand(ctx, &decode.Tx{Chunk: &decode.Chunk{Request: req.ID, After: after, Err: reason}})
}

// chunkBytes bounds a chunk's bytes: within one Kafka transaction, and a
// part of the queue.
func (r *reemitter) chunkBytes() int {
	return min(r.cfg.MaxBatchBytes, max(r.cfg.QueueBytes/4, 1))
}

func (r *reemitter) outbox(name string) *decode.Outbox {
	i := slices.IndexFunc(r.cfg.Outboxes, func(o *decode.Outbox) bool { return o.Name() == name })
	if i < 0 {
		return nil
	}
	return r.cfg.Outboxes[i]
}

// conn1 returns the reading connection, opening it when needed.
func (r *reemitter) conn1(ctx context.Context) (*pgx.Conn, error) {
	if r.conn != nil && !r.conn.IsClosed() {
		return r.conn, nil
	}
	conn, err := r.connect(ctx)
	if err != nil {
		return nil, err
	}
	r.conn = conn
	return conn, nil
}

// closeConn closes the reading connection: no request is being read.
func (r *reemitter) closeConn() {
	if r.conn != nil {
		_ = r.conn.Close(context.Background())
		r.conn = nil
	}
}

// nudge signals w without blocking: a wake-up already pending covers this
// one too.
func nudge(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reemitsOf returns the requests a checkpoint records.
func reemitsOf(cp checkpoint.Checkpoint) checkpoint.Reemits {
	if cp.Notes == nil {
		return nil
	}
	return cp.Notes.Reemits
}

// describeReemits says where the active requests stand, for /readyz:
// each one's table, rows done of the estimate, rate and time left.
func describeReemits(rs checkpoint.Reemits) string {
	var parts []string
	for _, q := range rs {
		if !q.State.Active() {
			continue
		}
		s := fmt.Sprintf("re-emit %s of %s %s", q.ID, q.Table, q.State)
		if q.State == checkpoint.ReemitRunning {
			s += fmt.Sprintf(": %d rows of about %d", q.Rows, q.Rows+q.Remaining())
			if rate := q.Rate(); rate > 0 {
				s += fmt.Sprintf(", %.0f rows/s, %s left", rate, q.ETA().Round(time.Second))
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
