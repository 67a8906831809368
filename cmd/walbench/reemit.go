package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/walstream/walstream/checkpoint"
)

// ReemitRun is one run of the reemit scenario: a backlog of outbox rows
// the stream never published (they were written before its slot existed)
// re-emitted by one walstream reemit request, while a live load runs
// through the same walstream at its defaults.
type ReemitRun struct {
	Run  int   `json:"run"`
	Rows int64 `json:"rows"`
	// Seconds is from the request's commit (walstream reemit returning) to
	// the checkpoint that records it done, committed with its last chunk,
	// visible to a read_committed consumer; RowsPerSec is Rows over it.
	// Its records are read after that.
	Seconds    float64 `json:"seconds"`
	RowsPerSec float64 `json:"rows_per_sec"`
	// Live is the live load's latency, insert to visible, over the rows
	// inserted while the request ran; LiveBefore over the warm-up's end
	// to the request, the same load without a re-emit.
	Load         Load    `json:"live_load"`
	LiveSamples  int     `json:"live_samples"`
	LiveP50Ms    float64 `json:"live_p50_ms"`
	LiveP99Ms    float64 `json:"live_p99_ms"`
	LiveMaxMs    float64 `json:"live_max_ms"`
	LiveMissing  int64   `json:"live_missing"`
	LiveBehind   int64   `json:"live_behind_schedule"`
	BeforeP99Ms  float64 `json:"live_p99_before_ms"`
	BeforeSample int     `json:"live_samples_before"`
	// The live p99s split at walstream's producer, as in the latency
	// scenario: from the insert to walstream handing the record to the
	// Kafka client (the record's timestamp), and from there to visible.
	ToProducerP99Ms         float64 `json:"live_to_producer_p99_ms"`
	FromProducerP99Ms       float64 `json:"live_from_producer_p99_ms"`
	BeforeToProducerP99Ms   float64 `json:"live_to_producer_p99_before_ms"`
	BeforeFromProducerP99Ms float64 `json:"live_from_producer_p99_before_ms"`
	// WalstreamCPUSeconds is walstream's CPU time while the request ran,
	// and its peak RSS over the run.
	WalstreamCPUSeconds   float64 `json:"walstream_cpu_seconds"`
	WalstreamPeakRSSBytes int64   `json:"walstream_peak_rss_bytes"`
	Machine               Quiet   `json:"machine"`
	// Floors are Kafka's own latency under walstream's transactions while
	// the request ran, re-emitted rows and live ones, committed again by
	// bare producers after the run (floor.go); the live records are timed.
	Floors []LatencyFloor `json:"kafka_floors,omitempty"`
}

// aggTypeReemit routes the re-emitted rows to a topic of their own, which
// only re-emitted records reach.
const aggTypeReemit = "Reemit"

// reemitBefore is how long the live load runs, after its warm-up, before
// the request: the latency without a re-emit to compare with.
const reemitBefore = 5 * time.Second

// reemitRun preloads the rows, creates walstream's slot after them, starts
// walstream and the live load and, once the load is measured on its own,
// requests the re-emit of the preloaded rows and waits until every one is
// visible in Kafka.
func (b *bench) reemitRun(ctx context.Context, run int) (*ReemitRun, error) {
	name := fmt.Sprintf("reemit-%d", run)
	dir := filepath.Join(b.cfg.OutDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	r := &ReemitRun{Run: run, Rows: int64(b.cfg.ReemitRows), Load: b.cfg.ReemitLoad}
	b.logf("%s: preloading %d rows before the slot exists", name, r.Rows)
	if err := b.db.reset(ctx); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, b.cfg.DrainTimeout)
	_, err := b.db.load(lctx, 1, r.Rows, min(r.Rows, 10000), b.pad, aggTypeReemit)
	cancel()
	if err != nil {
		return nil, err
	}
	if err := b.db.exec(ctx, "ANALYZE public.outbox"); err != nil {
		return nil, err
	}
	broker, p, stop, err := b.streamingPhase(ctx, name, dir, topicFor(latencyAggType(r.Load)), topicFor(aggTypeReemit))
	if err != nil {
		return nil, err
	}
	defer stop()
	if r.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return nil, err
	}
	topic := topicFor(latencyAggType(r.Load))
	live, err := startTimedConsumer(broker.addr, []string{topic}, time.Time{})
	if err != nil {
		return nil, err
	}
	defer live.close()
	// The request's end is its checkpoint read back: the one that records
	// it done, committed with its last chunk. Its records are counted
	// after that, so that walbench reads them after the measured time, as
	// the backlog drain it is compared with reads none.
	cps, err := b.watchCheckpoints(ctx, broker.addr, slotWalstream)
	if err != nil {
		return nil, err
	}
	defer cps.stop()

	// The live load runs until the re-emit is done, at most the drain
	// timeout.
	wctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	start := time.Now()
	w := b.newWriter(r.Load, start, b.cfg.DrainTimeout)
	loadDone := make(chan error, 1)
	go func() { loadDone <- w.run(wctx, b.pg.url, b.cfg.LatencyWriters, start) }()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case err := <-loadDone:
		return nil, fmt.Errorf("the live load ended before the re-emit: %w", err)
	case <-time.After(b.cfg.LatencyWarmup + reemitBefore):
	}
	s := newSampler()
	s.sample(p.pid())
	cpu0 := s.get(p.pid()).CPU
	id, err := b.requestReemit(ctx, broker.addr, filepath.Join(dir, "reemit.log"))
	if err != nil {
		return nil, err
	}
	requested := time.Now()
	b.logf("%s: re-emit request %s made; waiting for it done", name, id)
	done, err := cps.reemitDone(ctx, id, r.Rows, b.cfg.DrainTimeout, p.exited)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (walstream log %s)", name, err, filepath.Join(dir, "walstream.log"))
	}
	s.sample(p.pid())
	stopLoad()
	if err := <-loadDone; err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	ws := s.get(p.pid())
	r.WalstreamCPUSeconds, r.WalstreamPeakRSSBytes = (ws.CPU - cpu0).Seconds(), ws.HWM
	r.Seconds = done.Sub(requested).Seconds()
	r.RowsPerSec = float64(r.Rows) / r.Seconds
	re, err := startCounter(broker.addr, topicFor(aggTypeReemit))
	if err != nil {
		return nil, err
	}
	defer re.close()
	if _, err := re.wait(ctx, r.Rows, b.cfg.DrainTimeout, p.exited); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	time.Sleep(time.Second) // a record past the last would be a duplicate
	if n := re.count(); n != r.Rows {
		return nil, fmt.Errorf("%s: %d re-emitted records, want %d", name, n, r.Rows)
	}
	// The live rows inserted before the load stopped must all arrive.
	_ = awaitArrival(live.received, w.written.Load(), nil) // what does not arrive is LiveMissing
	if err := live.err(); err != nil {
		return nil, err
	}
	// A writer stopped within a statement may have committed rows it did not
	// count: more received than written is no miss.
	r.LiveMissing, r.LiveBehind = max(w.written.Load()-live.received(), 0), w.behind.Load()
	during, to, from := live.between(topic, requested.UnixMicro(), done.UnixMicro())
	r.LiveSamples = len(during)
	r.LiveP50Ms, r.LiveP99Ms = percentile(during, 0.50)/1e3, percentile(during, 0.99)/1e3
	r.ToProducerP99Ms, r.FromProducerP99Ms = percentile(to, 0.99)/1e3, percentile(from, 0.99)/1e3
	if len(during) > 0 {
		r.LiveMaxMs = float64(slices.Max(during)) / 1e3
	}
	before, to, from := live.between(topic, w.measureFrom.UnixMicro(), requested.UnixMicro())
	r.BeforeSample, r.BeforeP99Ms = len(before), percentile(before, 0.99)/1e3
	r.BeforeToProducerP99Ms, r.BeforeFromProducerP99Ms = percentile(to, 0.99)/1e3, percentile(from, 0.99)/1e3
	b.logf("%s: %d rows re-emitted in %.1f s, %.0f rows/s; live %s p50 %.1f ms, p99 %.1f ms (insert → producer p99 %.1f ms, producer → visible p99 %.1f ms; before the request: p99 %.1f ms, %.1f and %.1f), %d missing, %d behind",
		name, r.Rows, r.Seconds, r.RowsPerSec, r.Load, r.LiveP50Ms, r.LiveP99Ms, r.ToProducerP99Ms, r.FromProducerP99Ms,
		r.BeforeP99Ms, r.BeforeToProducerP99Ms, r.BeforeFromProducerP99Ms, r.LiveMissing, r.LiveBehind)
	if b.cfg.LatencyFloor {
		if r.Floors, err = b.latencyFloors(ctx, broker.addr, filepath.Join(dir, name), cps, live, topic, requested, done); err != nil {
			return nil, err
		}
	}
	if err := p.stop(); err != nil {
		return nil, err
	}
	return r, b.db.dropSlots(ctx)
}

// requestID is the id walstream reemit prints.
var requestID = regexp.MustCompile(`re-emit request (r-[0-9a-f]+) `)

// requestReemit runs walstream reemit for every preloaded row, with the
// measured walstream's connection and names, and returns the request's id.
func (b *bench) requestReemit(ctx context.Context, broker, logPath string) (string, error) {
	args := append([]string{"reemit"}, b.walstreamArgs(broker)[1:]...)
	args = append(args, "--where", fmt.Sprintf("aggregatetype = '%s'", aggTypeReemit))
	out, err := exec.CommandContext(ctx, b.walstream, args...).CombinedOutput()
	if werr := os.WriteFile(logPath, out, 0o644); werr != nil {
		return "", werr
	}
	if err != nil {
		return "", fmt.Errorf("walstream reemit: %w: %s", err, out)
	}
	m := requestID.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("walstream reemit printed no request id: %s", out)
	}
	return string(m[1]), nil
}

// wait waits until the counter read n records and returns when it saw
// the last.
func (c *counter) wait(ctx context.Context, n int64, within time.Duration, exited func() error) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		last := time.Unix(0, c.last.Load())
		switch got := c.count(); {
		case c.err() != nil:
			return last, c.err()
		case got >= n:
			return last, nil
		case time.Now().After(deadline):
			return last, fmt.Errorf("%d re-emitted records of %d within %s", got, n, within)
		case ctx.Err() != nil:
			return last, ctx.Err()
		}
		if err := exited(); err != nil {
			return last, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reemitDone waits until the log reads a checkpoint that records request
// id done with rows rows, and returns when it read it: the commit of the
// request's last chunk, visible to read_committed readers.
func (l *checkpointLog) reemitDone(ctx context.Context, id string, rows int64, within time.Duration, exited func() error) (time.Time, error) {
	deadline := time.Now().Add(within)
	for next := 0; ; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		seen, failed := l.seen[next:], l.failed
		next = len(l.seen)
		l.mu.Unlock()
		if failed != nil {
			return time.Time{}, failed
		}
		for _, c := range seen {
			i := -1
			if c.cp.Notes != nil {
				i = c.cp.Notes.Reemits.Find(id)
			}
			if i < 0 {
				continue
			}
			switch q := c.cp.Notes.Reemits[i]; {
			case q.State == checkpoint.ReemitDone && q.Rows == rows:
				return c.visible, nil
			case !q.State.Active():
				return time.Time{}, fmt.Errorf("re-emit request %s ended %s after %d rows of %d: %s", id, q.State, q.Rows, rows, q.Error)
			}
		}
		switch {
		case ctx.Err() != nil:
			return time.Time{}, ctx.Err()
		case time.Now().After(deadline):
			return time.Time{}, fmt.Errorf("re-emit request %s not done within %s", id, within)
		}
		if err := exited(); err != nil {
			return time.Time{}, err
		}
	}
}
