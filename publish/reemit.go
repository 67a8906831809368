package publish

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish/format"
)

// HeaderReemit names, on a re-emitted record, the re-emit request that
// published it again; live records never carry it. Debezium's outbox
// router puts nothing on the records of an incremental snapshot that
// tells them from live ones.
const HeaderReemit = "walstream.reemit"

// requests records the re-emit requests and cancels of tx, which the
// stream met in commit order: the checkpoint of the Kafka transaction that
// completes tx records them, so each is met once however often tx is
// replayed. A request for another stream is left to it.
func (p *Producer) requests(tx *decode.Tx) {
	now := time.Now().UTC()
	for _, r := range tx.Requests {
		log := p.log.With("request", r.ID, "request_lsn", r.LSN.String(), "origin", r.Origin)
		if r.Stream != "" && r.Stream != p.cfg.Stream {
			log.Info("ignoring a re-emit request for another stream", "stream", r.Stream)
			continue
		}
		switch r.Action {
		case decode.ActionReemit:
			if p.notes.Reemits.Find(r.ID) >= 0 {
				log.Warn("ignoring a re-emit request whose id a request met before has", "table", r.Table)
				continue
			}
			rec := checkpoint.Reemit{ID: r.ID, Table: r.Table, Where: r.Where, Origin: r.Origin, LSN: tx.CommitLSN, State: checkpoint.ReemitQueued, Accepted: now}
			if r.Err != "" {
				rec.State, rec.Error, rec.Ended = checkpoint.ReemitFailed, r.Err, now
				log.Warn("refusing a re-emit request", "table", r.Table, "reason", r.Err)
			} else {
				log.Info("re-emit request accepted", "table", r.Table, "where", r.Where)
			}
			p.notes.Reemits = p.notes.Reemits.With(rec)
		case decode.ActionCancel:
			p.cancel(r, now, log)
		default:
			log.Warn("ignoring a request walstream cannot act on", "reason", r.Err)
			continue
		}
		p.dirty = true
	}
}

// cancel ends the active requests a cancel names: by id, or by table.
func (p *Producer) cancel(r decode.Request, now time.Time, log *slog.Logger) {
	cancelled := 0
	for _, q := range p.notes.Reemits {
		switch {
		case !q.State.Active():
		case r.ID != "" && q.ID != r.ID:
		case r.ID == "" && len(r.Tables) > 0 && !slices.Contains(r.Tables, q.Table):
		default:
			q.State, q.Ended = checkpoint.ReemitCancelled, now
			p.notes.Reemits = p.notes.Reemits.With(q)
			cancelled++
			log.Info("re-emit request cancelled", "cancelled", q.ID, "table", q.Table, "rows", q.Rows)
		}
	}
	if cancelled == 0 {
		log.Info("cancel met no active re-emit request", "cancelled", r.ID, "tables", r.Tables)
	}
}

// addChunk publishes a chunk of a re-emit request's rows through the
// routes and encoders of live events, each record naming the request, and
// records the request's progress, which the checkpoint of the same Kafka
// transaction carries. A chunk that does not continue the request's
// progress (it was read before a cancel met in between) is dropped. A row
// that cannot be published fails the request, with none of the chunk's
// rows published, unless dead letters are on; live events go on.
func (p *Producer) addChunk(ctx context.Context, tx *decode.Tx) error {
	c := tx.Chunk
	if c.Taken != nil {
		defer c.Taken()
	}
	i := p.notes.Reemits.Find(c.Request)
	if i < 0 || !p.notes.Reemits[i].State.Active() || !slices.Equal(p.notes.Reemits[i].Last, c.After) {
		p.log.Debug("dropping a chunk of a re-emit request that ended or moved on", "request", c.Request)
		return nil
	}
	r := p.notes.Reemits[i]
	now := time.Now().UTC()
	if r.State == checkpoint.ReemitQueued {
		r.State, r.Started, r.Key, r.Upper, r.Estimate = checkpoint.ReemitRunning, now, c.Key, c.Upper, c.Estimate
		p.log.Info("re-emit request started", "request", r.ID, "table", r.Table, "estimated_rows", r.Estimate)
	}
	fail := func(reason string) error {
		r.State, r.Error, r.Ended = checkpoint.ReemitFailed, reason, now
		p.notes.Reemits, p.dirty = p.notes.Reemits.With(r), true
		p.log.Error("re-emit request failed; live events go on", "request", r.ID, "table", r.Table, "rows", r.Rows, "last_key", r.Last, "reason", reason)
		return nil
	}
	if c.Err != "" {
		return fail(c.Err)
	}
	recs := make([]*kgo.Record, len(tx.Events))
	dead := 0
	for j := range tx.Events {
		ev := &tx.Events[j]
		rec, bad, err := p.encode(ctx, ev)
		switch {
		case err != nil:
			return fmt.Errorf("re-emit request %s: %w", r.ID, err)
		case bad != nil && (p.cfg.DeadLetterTopic == "" || bad.Unmapped):
			return fail(fmt.Sprintf("%s; the chunk after key %v is not published (with dead letters on, such a row goes to the dead-letter topic)", bad, r.Last))
		case bad != nil:
			p.log.Warn("dead-lettering a re-emitted event", "request", r.ID, "event_id", string(ev.ID), "table", ev.Table,
				"column", bad.Column, "reason", bad.Reason, "topic", p.cfg.DeadLetterTopic)
			rec = format.DeadLetter(p.cfg.DeadLetterTopic, ev, bad, p.cfg.MaxRecordBytes)
			dead++
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderReemit, Value: []byte(r.ID)})
		recs[j] = rec
	}
	n := len(recs)
	if n > 0 {
		// The chunk joins the open transaction, which holds live events
		// only: every chunk is committed as soon as it is added, below.
		if err := p.room(ctx, n, tx.Bytes); err != nil {
			return err
		}
		for j, rec := range recs {
			if err := p.topics.Ensure(ctx, rec.Topic); err != nil {
				return kafka.Authorization(fmt.Errorf("re-emit request %s: %s: %w", r.ID, &tx.Events[j].Identity, err), p.cfg.TransactionalID)
			}
			p.byTopic[rec.Topic]++
			p.produce(ctx, rec, &tx.Events[j].Identity)
			if j == n/2 {
				p.hook("mid-chunk")
			}
		}
		p.records, p.reemitted, p.bytes, p.dead = p.records+n, p.reemitted+n, p.bytes+tx.Bytes, p.dead+dead
		r.Rows += int64(n)
		r.Updated = now
	}
	if c.Last != nil {
		r.Last = c.Last
	}
	if c.Done {
		r.State, r.Ended = checkpoint.ReemitDone, now
		p.log.Info("re-emit request done", "request", r.ID, "table", r.Table, "rows", r.Rows)
	}
	p.notes.Reemits, p.dirty = p.notes.Reemits.With(r), true
	// A Kafka transaction holds one chunk at most, so that a live event
	// waits for one chunk's commit at most (chunks sharing a transaction
	// up to MaxBatchEvents held live events behind thousands of
	// re-emitted rows), and the chunk is committed at once: it is a batch
	// already, and lingering after the commit before, as live events do,
	// only idled the re-emit a Linger per chunk and held the live events
	// that joined it as long.
	return p.flush(ctx)
}

// reemitMetrics are the metrics of re-emit requests.
type reemitMetrics struct {
	rows   prometheus.Counter
	active prometheus.Gauge
}

func newReemitMetrics(reg prometheus.Registerer) *reemitMetrics {
	m := &reemitMetrics{
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walstream_reemitted_events_total", Help: "Outbox rows published again by re-emit requests, in committed Kafka transactions (the dead-letter topic included)."}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_reemit_requests_active", Help: "Re-emit requests queued or running, as the last committed checkpoint records them."}),
	}
	reg.MustRegister(m.rows, m.active)
	return m
}

func (m *Metrics) reemitCommitted(rows int, requests checkpoint.Reemits) {
	if m == nil {
		return
	}
	m.reemit.rows.Add(float64(rows))
	m.reemit.active.Set(float64(requests.Active()))
}
