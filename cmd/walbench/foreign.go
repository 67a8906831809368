package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// aggTypeForeign is the aggregate type of the outbox rows committed after
// each large transaction of the foreign scenario.
const aggTypeForeign = "Foreign"

// foreignTable is the table outside the publication the large
// transactions write.
const foreignTable = "public.walbench_foreign"

// ForeignRun is the foreign scenario with streaming of in-progress
// transactions on or off: walstream streams a caught-up outbox while, again
// and again, a large transaction commits on a table outside the
// publication and one outbox row commits right after it. Latency is from
// the outbox row's insert (its own transaction, committed at once) to its
// record becoming visible to a read_committed consumer; the server's
// spilled and streamed bytes are pg_stat_replication_slots' growth over
// each repetition.
type ForeignRun struct {
	Streaming bool          `json:"stream_in_progress"`
	Rows      int64         `json:"rows_per_transaction"`
	Reps      []ForeignRep  `json:"repetitions"`
	P50Ms     float64       `json:"p50_ms"`
	P99Ms     float64       `json:"p99_ms"`
	MaxMs     float64       `json:"max_ms"`
	Spilled   DecodingDelta `json:"decoding"`
	Machine   Quiet         `json:"machine"`
}

// ForeignRep is one large transaction and the outbox row after it.
type ForeignRep struct {
	InsertSeconds float64       `json:"insert_seconds"`
	LatencyMs     float64       `json:"commit_to_visible_ms"`
	Decoding      DecodingDelta `json:"decoding"`
}

// DecodingDelta is the growth of the slot's pg_stat_replication_slots
// counters.
type DecodingDelta struct {
	SpillTxns   int64 `json:"spill_txns"`
	SpillBytes  int64 `json:"spill_bytes"`
	StreamTxns  int64 `json:"stream_txns"`
	StreamBytes int64 `json:"stream_bytes"`
	TotalTxns   int64 `json:"total_txns"`
}

func (d DecodingDelta) minus(o DecodingDelta) DecodingDelta {
	return DecodingDelta{d.SpillTxns - o.SpillTxns, d.SpillBytes - o.SpillBytes, d.StreamTxns - o.StreamTxns, d.StreamBytes - o.StreamBytes, d.TotalTxns - o.TotalTxns}
}

func (d *DecodingDelta) add(o DecodingDelta) {
	d.SpillTxns += o.SpillTxns
	d.SpillBytes += o.SpillBytes
	d.StreamTxns += o.StreamTxns
	d.StreamBytes += o.StreamBytes
	d.TotalTxns += o.TotalTxns
}

// decoding reads the slot's pg_stat_replication_slots counters.
func (d *db) decoding(ctx context.Context, slot string) (DecodingDelta, error) {
	var s DecodingDelta
	err := d.conn.QueryRow(ctx, "SELECT spill_txns, spill_bytes, stream_txns, stream_bytes, total_txns FROM pg_stat_replication_slots WHERE slot_name = $1", slot).
		Scan(&s.SpillTxns, &s.SpillBytes, &s.StreamTxns, &s.StreamBytes, &s.TotalTxns)
	if err != nil {
		return s, fmt.Errorf("reading pg_stat_replication_slots of %s (Postgres 14 and later): %w", slot, err)
	}
	return s, nil
}

// foreignInsert is the outbox row after each large transaction, stamped
// with its insert time as the latency scenario's rows are.
const foreignInsert = `INSERT INTO public.outbox (aggregatetype, aggregateid, type, payload)
VALUES ($1, 'order-' || $2::int, 'OrderCreated', jsonb_build_object('rep', $2::int, 'ts_us', floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint))`

// foreignRun starts walstream, streaming in-progress transactions or not,
// on an empty outbox and runs the repetitions.
func (b *bench) foreignRun(ctx context.Context, streaming bool) (*ForeignRun, error) {
	name := "foreign-streaming-" + map[bool]string{true: "on", false: "off"}[streaming]
	dir := filepath.Join(b.cfg.OutDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	r := &ForeignRun{Streaming: streaming, Rows: int64(b.cfg.ForeignRows)}
	if err := b.db.reset(ctx); err != nil {
		return nil, err
	}
	if err := b.db.exec(ctx, "DROP TABLE IF EXISTS "+foreignTable+"; CREATE TABLE "+foreignTable+" (n bigint, pad text)"); err != nil {
		return nil, err
	}
	if _, err := b.db.createSlot(ctx, slotWalstream); err != nil {
		return nil, err
	}
	topic := topicFor(aggTypeForeign)
	broker, err := b.startPhaseBroker(ctx, name, filepath.Join(b.workDir, name+"-kafka"), dir, filepath.Join(dir, "broker.log"), topic)
	if err != nil {
		return nil, err
	}
	defer b.closeBroker(name, broker)
	p, stop, err := b.startStreaming(ctx, name, broker.addr, dir, "--stream-in-progress="+strconv.FormatBool(streaming))
	if err != nil {
		return nil, err
	}
	defer stop()
	c, err := startTimedConsumer(broker.addr, []string{topic}, time.Time{})
	if err != nil {
		return nil, err
	}
	defer c.close()
	cfg, err := pgx.ParseConfig(b.pg.url)
	if err != nil {
		return nil, fmt.Errorf("parsing the Postgres URL: %w", err)
	}
	// Postgres's default: with synchronous_commit off a commit waits for
	// the WAL writer before a walsender may send it (see writer.run).
	cfg.RuntimeParams["synchronous_commit"] = "on"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting the writer: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if r.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return nil, err
	}
	var lat []int64
	for rep := 1; rep <= b.cfg.ForeignRuns; rep++ {
		before, err := b.db.decoding(ctx, slotWalstream)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT g, repeat('x', 100) FROM generate_series(1, %d) g", foreignTable, b.cfg.ForeignRows)); err != nil {
			return nil, fmt.Errorf("%s: the large transaction of repetition %d: %w", name, rep, err)
		}
		insert := time.Since(t0)
		if _, err := conn.Exec(ctx, foreignInsert, aggTypeForeign, rep); err != nil {
			return nil, fmt.Errorf("%s: the outbox row of repetition %d: %w", name, rep, err)
		}
		deadline := time.Now().Add(b.cfg.DrainTimeout)
		for c.received() < int64(rep) {
			if err := p.exited(); err != nil {
				return nil, err
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s: the outbox row of repetition %d not visible within %s", name, rep, b.cfg.DrainTimeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := c.err(); err != nil {
			return nil, err
		}
		samples, _, _ := c.latencies(topic, 0)
		l := samples[len(samples)-1]
		lat = append(lat, l)
		// The large transaction is decoded once the row after it is
		// visible; the statistics may follow a moment later.
		var d DecodingDelta
		for wait := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			after, err := b.db.decoding(ctx, slotWalstream)
			if err != nil {
				return nil, err
			}
			if d = after.minus(before); d.TotalTxns >= 2 || time.Now().After(wait) {
				break
			}
		}
		r.Reps = append(r.Reps, ForeignRep{InsertSeconds: insert.Seconds(), LatencyMs: float64(l) / 1e3, Decoding: d})
		r.Spilled.add(d)
		b.logf("%s: repetition %d: %d rows inserted in %.1fs; the outbox row visible %.0f ms after its insert; spilled %d MB, streamed %d MB",
			name, rep, b.cfg.ForeignRows, insert.Seconds(), float64(l)/1e3, d.SpillBytes>>20, d.StreamBytes>>20)
		// Keep the WAL from piling up over the repetitions.
		if err := b.db.exec(ctx, "TRUNCATE "+foreignTable+"; CHECKPOINT"); err != nil {
			return nil, err
		}
	}
	r.P50Ms, r.P99Ms = percentile(lat, 0.50)/1e3, percentile(lat, 0.99)/1e3
	r.MaxMs = percentile(lat, 1) / 1e3
	if err := p.stop(); err != nil {
		return nil, err
	}
	return r, b.db.dropSlots(ctx)
}
