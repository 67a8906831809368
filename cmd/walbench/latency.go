package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Latency is one offered load held for a while against a caught-up
// walstream: the time from each row's insert to its record becoming
// visible to a read_committed consumer.
type Latency struct {
	Run          int     `json:"run"`
	Load         Load    `json:"load"`
	AchievedRate float64 `json:"achieved_rows_per_sec"` // rows inserted in the measured window per second
	Seconds      float64 `json:"measured_seconds"`
	Samples      int     `json:"samples"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	P999Ms       float64 `json:"p999_ms"`
	// ToProducerP99Ms is the p99 from the insert to walstream handing the
	// record to the Kafka client (Postgres's commit, the walsender,
	// decoding, the queue); FromProducerP99Ms from there to visible (the
	// linger, the Kafka transaction, the consumer's fetch).
	ToProducerP99Ms   float64 `json:"to_producer_p99_ms"`
	FromProducerP99Ms float64 `json:"from_producer_p99_ms"`
	MaxMs             float64 `json:"max_ms"`
	// Missing rows were inserted but not seen within 30s of the writers
	// stopping.
	Missing int64 `json:"missing"`
	// Behind counts transactions the writers could not start on schedule;
	// they were skipped, so the offered load was not met when it is not 0.
	Behind int64 `json:"behind_schedule"`
	// InsertToAckP50Us and P99 are, from the writers, the time from the
	// row's timestamp (clock_timestamp() while inserting) to the client
	// seeing the commit acknowledged: an upper bound of the offset between
	// the timestamp and the commit.
	InsertToAckP50Us float64 `json:"insert_to_ack_p50_us"`
	InsertToAckP99Us float64 `json:"insert_to_ack_p99_us"`
	// WalstreamCPUMicrosPerRow is walstream's CPU time in the measured
	// window over the rows inserted in it.
	// Confirm*: from a checkpoint becoming visible in Kafka to the slot's
	// confirmed_flush_lsn covering it (see confirmWatch); Unconfirmed were
	// not covered when the phase ended.
	ConfirmSamples           int     `json:"confirm_samples"`
	ConfirmP50Ms             float64 `json:"confirm_p50_ms"`
	ConfirmP99Ms             float64 `json:"confirm_p99_ms"`
	ConfirmMaxMs             float64 `json:"confirm_max_ms"`
	ConfirmUnconfirmed       int     `json:"confirm_unconfirmed"`
	WalstreamCPUMicrosPerRow float64 `json:"walstream_cpu_us_per_row"`
	// KafkaTxns are walstream's Kafka transactions in the measured window
	// (its checkpoints), and WalstreamCPUMicrosPerTxn its CPU time over
	// them. KafkaClientCPUMicrosPerRow is the floor under walstream's CPU
	// per row: franz-go alone committing as many transactions a second,
	// of as many records, against the same broker (kafka-txn), over the
	// same rows. MinimalClientCPUMicrosPerRow is the same for the minimal
	// client (minimalClient), the floor under any Kafka client's.
	// RecvLogicalCPUMicrosPerRow is the Postgres side's: pg_recvlogical's
	// CPU time per row receiving the same load (recvLogicalFloor).
	KafkaTxns                    int               `json:"kafka_txns"`
	WalstreamCPUMicrosPerTxn     float64           `json:"walstream_cpu_us_per_txn"`
	KafkaClientCPUMicrosPerRow   float64           `json:"kafka_client_cpu_us_per_row"`
	MinimalClientCPUMicrosPerRow float64           `json:"minimal_client_cpu_us_per_row"`
	RecvLogicalCPUMicrosPerRow   float64           `json:"pg_recvlogical_cpu_us_per_row"`
	WalstreamPeakRSSBytes        int64             `json:"walstream_peak_rss_bytes"`
	Machine                      Quiet             `json:"machine"`
	Profiles                     map[string]string `json:"profiles,omitempty"`
	// Floors are Kafka's own latency under walstream's transactions of the
	// measured window, committed again by bare producers right after it
	// (floor.go); none with -latency-floor=false.
	Floors []LatencyFloor `json:"kafka_floors,omitempty"`
}

// kafkaTxnRate is walstream's Kafka transactions a second in the phase.
func (l Latency) kafkaTxnRate() float64 { return float64(l.KafkaTxns) / l.Seconds }

// latencyInsert inserts $4 outbox rows numbered from $2 in one statement;
// each row's payload carries the time of its insert in microseconds since
// the epoch, which the statement returns.
const latencyInsert = `INSERT INTO public.outbox (aggregatetype, aggregateid, type, payload)
SELECT $1, 'order-' || (g % 100000), 'OrderCreated',
	walbench_payload(g, $3) || jsonb_build_object('ts_us', floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
FROM generate_series($2::bigint, $2::bigint + $4 - 1) AS g
RETURNING (payload->>'ts_us')::bigint`

// tsField is the timestamp's name in the payload's text form, which a
// record holds as it is (the string converter, Avro's string) or escaped
// in a JSON string (the JSON converter: \"ts_us\": ).
var tsField = []byte(`ts_us`)

// latencyRun starts walstream on an empty outbox and holds each offered
// load in turn. A profiled run records perf and the broker's CPU profile
// over each measured window.
func (b *bench) latencyRun(ctx context.Context, run int, profile bool) ([]Latency, error) {
	name := fmt.Sprintf("latency-%d", run)
	if profile {
		name = "latency-profile"
	}
	dir := filepath.Join(b.cfg.OutDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := b.db.reset(ctx); err != nil {
		return nil, err
	}
	topics := latencyTopics(b.cfg.LatencyLoads)
	broker, p, stop, err := b.streamingPhase(ctx, name, dir, topics...)
	if err != nil {
		return nil, err
	}
	defer stop()
	var out []Latency
	for _, load := range b.cfg.LatencyLoads {
		var pr *profiler
		if profile {
			pr = &profiler{dir: dir, prefix: "latency-" + load.String(), broker: broker, perf: b.perf}
		}
		l, err := b.latencyPhase(ctx, run, load, p, broker.addr, filepath.Join(dir, name+"-"+load.String()), pr)
		if err != nil {
			return nil, fmt.Errorf("%s at %s: %w", name, load, err)
		}
		b.logf("%s: %d rows/s offered in transactions of %d, %.0f achieved: p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, %d missing, %d behind",
			name, load.Rate, load.RowsPerTx, l.AchievedRate, l.P50Ms, l.P99Ms, l.P999Ms, l.Missing, l.Behind)
		out = append(out, l)
	}
	if err := p.stop(); err != nil {
		return nil, err
	}
	if err := b.db.dropSlots(ctx); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].RecvLogicalCPUMicrosPerRow, err = b.recvLogicalFloor(ctx, out[i].Load, filepath.Join(dir, "pg_recvlogical-"+out[i].Load.String()+".log")); err != nil {
			return nil, fmt.Errorf("%s: pg_recvlogical at %s: %w", name, out[i].Load, err)
		}
	}
	return out, nil
}

// recvLogicalFloor offers load again, with walstream stopped, while
// pg_recvlogical receives it on a slot of its own and discards it, and
// returns pg_recvlogical's CPU time per row over 10 s after the warm-up,
// counted as walstream's is. It is the Postgres side of walstream's floor
// at that load, as kafkaFloor is the Kafka side: a C client that only
// receives the same messages.
func (b *bench) recvLogicalFloor(ctx context.Context, load Load, logPath string) (float64, error) {
	return b.recvLogicalFloorIn(ctx, b.db, b.pg.url, load, logPath, latencyAggType(load))
}

// recvLogicalFloorIn is recvLogicalFloor in the database d is connected
// to, at url, its rows of aggregate type aggType.
func (b *bench) recvLogicalFloorIn(ctx context.Context, d *db, url string, load Load, logPath, aggType string) (float64, error) {
	if _, err := d.createSlot(ctx, slotRecvLogical); err != nil {
		return 0, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	args := b.recvLogicalCmdOn(url, 0)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting pg_recvlogical: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	start := time.Now()
	w := b.newWriter(load, start, 10*time.Second)
	w.aggType = aggType
	s := newSampler()
	if _, err := measure(b.cfg.LatencyWarmup, func() error { s.sample(cmd.Process.Pid); return nil },
		func() error { return w.run(ctx, url, b.cfg.LatencyWriters, start) }); err != nil {
		return 0, err
	}
	cpu0 := s.get(cmd.Process.Pid).CPU
	s.sample(cmd.Process.Pid)
	cpu := s.get(cmd.Process.Pid).CPU - cpu0
	// Stopped by SIGINT, pg_recvlogical exits 0, though its log then says
	// "unexpected termination of replication stream"; an exit before it
	// means it failed, and its log says why.
	select {
	case err := <-exited:
		stopped = true
		return 0, fmt.Errorf("pg_recvlogical exited during the load (log %s): %v", logPath, err)
	default:
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		return 0, err
	}
	err = <-exited
	stopped = true
	if err != nil {
		return 0, fmt.Errorf("stopping pg_recvlogical (log %s): %w", logPath, err)
	}
	if err := d.dropSlots(ctx); err != nil {
		return 0, err
	}
	n := w.measured.Load()
	if n == 0 {
		return 0, errors.New("no rows inserted in the measured time")
	}
	return cpu.Seconds() * 1e6 / float64(n), nil
}

// measure runs write, a phase's writers, and calls atWarmup once the
// warm-up has passed, as the measured window starts; it returns when the
// writers stopped, and fails when they stopped before the warm-up ended.
func measure(warmup time.Duration, atWarmup, write func() error) (end time.Time, err error) {
	done := make(chan error, 1)
	timer := time.AfterFunc(warmup, func() { done <- atWarmup() })
	err = write()
	end = time.Now()
	if timer.Stop() {
		return end, errors.Join(err, errors.New("the writers finished before the warm-up ended"))
	}
	if werr := <-done; err == nil {
		err = werr
	}
	return end, err
}

// latencyTopics are the topics of the latency phases' loads.
func latencyTopics(loads []Load) []string {
	topics := make([]string, len(loads))
	for i, l := range loads {
		topics[i] = topicFor(latencyAggType(l))
	}
	return topics
}

func latencyAggType(l Load) string { return fmt.Sprintf("Latency%dx%d", l.Rate, l.RowsPerTx) }

// latencyPhase holds one offered load for warm-up plus the measured time.
// prefix names the files and topics of Kafka's floor.
func (b *bench) latencyPhase(ctx context.Context, run int, load Load, p *walstreamProc, broker, prefix string, pr *profiler) (Latency, error) {
	l := Latency{Run: run, Load: load}
	var err error
	if l.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return l, err
	}
	aggType := latencyAggType(load)
	topic := topicFor(aggType)
	c, err := startTimedConsumer(broker, []string{topic}, time.Time{})
	if err != nil {
		return l, err
	}
	defer c.close()
	cw, err := startConfirmWatch(broker, b.pg.url, slotWalstream)
	if err != nil {
		return l, err
	}
	confirmStopped := false
	defer func() {
		if !confirmStopped {
			_, _, _ = cw.stop(time.Time{}, time.Time{})
		}
	}()

	start := time.Now()
	w := b.newWriter(load, start, b.cfg.LatencyFor)
	measureFrom := w.measureFrom
	// walstream's CPU time is sampled when the warm-up ends and when the
	// writers stop; a profile covers the same window.
	s := newSampler()
	var pgo *pgoPhase
	measureTo, err := measure(b.cfg.LatencyWarmup, func() error {
		s.sample(p.pid())
		pgo = b.pgo.start(ctx, fmt.Sprintf("latency-%d-%s", run, load))
		return pr.start(ctx)
	}, func() error { return w.run(ctx, b.pg.url, b.cfg.LatencyWriters, start) })
	if err != nil {
		return l, errors.Join(err, pgo.stop())
	}
	cpu0 := s.get(p.pid()).CPU
	s.sample(p.pid())
	ws := s.get(p.pid())
	if err := pgo.stop(); err != nil {
		return l, err
	}
	l.WalstreamPeakRSSBytes = ws.HWM
	if err := pr.stop(ctx); err != nil {
		return l, err
	}
	if pr != nil {
		l.Profiles = make(map[string]string)
		if err := pr.reports(ctx, map[string]int{"walstream": p.pid(), "broker": pr.broker.pid()}, l.Profiles); err != nil {
			return l, err
		}
	}

	// Everything written must arrive; wait for the stragglers.
	if err := awaitArrival(c.received, w.written.Load(), p.exited); err != nil {
		return l, err
	}
	c.close()
	if err := c.err(); err != nil {
		return l, err
	}
	// Give the last commits of the window time to be confirmed: well over
	// the 1 s the target allows, well under the status interval.
	time.Sleep(3 * time.Second)
	confirms, unconfirmed, err := cw.stop(measureFrom, measureTo)
	confirmStopped = true
	if err != nil {
		return l, err
	}
	if len(confirms)+unconfirmed == 0 {
		// walstream committed under load, so a watch that saw no
		// checkpoint read the wrong key or topic: no figure from it.
		return l, fmt.Errorf("no checkpoint of slot %s became visible in %s while the load ran", slotWalstream, checkpointTopic)
	}
	l.ConfirmSamples, l.ConfirmUnconfirmed = len(confirms), unconfirmed
	l.ConfirmP50Ms, l.ConfirmP99Ms = percentile(confirms, 0.50)/1e3, percentile(confirms, 0.99)/1e3
	if len(confirms) > 0 {
		l.ConfirmMaxMs = float64(slices.Max(confirms)) / 1e3
	}
	l.Missing = w.written.Load() - c.received()
	l.Behind = w.behind.Load()
	l.Seconds = measureTo.Sub(measureFrom).Seconds()
	l.AchievedRate = float64(w.measured.Load()) / l.Seconds
	l.KafkaTxns = len(confirms) + unconfirmed
	// The bare producers follow walstream at once, with the writers
	// stopped, each into topics of its own on the same broker.
	if b.cfg.LatencyFloor {
		if l.Floors, err = b.latencyFloors(ctx, broker, prefix, cw.log, c, topic, measureFrom, measureTo); err != nil {
			return l, err
		}
	}
	if n := w.measured.Load(); n > 0 && l.KafkaTxns > 0 {
		cpu := (ws.CPU - cpu0).Seconds() * 1e6
		l.WalstreamCPUMicrosPerRow = cpu / float64(n)
		l.WalstreamCPUMicrosPerTxn = cpu / float64(l.KafkaTxns)
		// The writers have stopped, so the client runs without their load.
		for _, f := range []struct {
			client string
			perRow *float64
		}{{"franz-go", &l.KafkaClientCPUMicrosPerRow}, {"minimal", &l.MinimalClientCPUMicrosPerRow}} {
			perTxn, err := b.kafkaFloor(ctx, f.client, broker, l.kafkaTxnRate(), max(1, int(n)/l.KafkaTxns))
			if err != nil {
				return l, err
			}
			*f.perRow = perTxn.Seconds() * 1e6 * float64(l.KafkaTxns) / float64(n)
		}
	}
	lat, toProducer, fromProducer := c.latencies(topic, measureFrom.UnixMicro())
	l.ToProducerP99Ms, l.FromProducerP99Ms = percentile(toProducer, 0.99)/1e3, percentile(fromProducer, 0.99)/1e3
	l.Samples = len(lat)
	l.P50Ms, l.P99Ms, l.P999Ms = percentile(lat, 0.50)/1e3, percentile(lat, 0.99)/1e3, percentile(lat, 0.999)/1e3
	if len(lat) > 0 {
		l.MaxMs = float64(slices.Max(lat)) / 1e3
	}
	acks := w.ackOffsets()
	l.InsertToAckP50Us, l.InsertToAckP99Us = percentile(acks, 0.50), percentile(acks, 0.99)
	return l, nil
}

// percentile is the q-quantile of v by the nearest-rank method, 0 for no
// values; v is sorted in place.
func percentile(v []int64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return float64(v[max(i, 0)])
}

// writer inserts rows at a fixed rate, open loop: a pacer schedules
// transactions every millisecond and connections run them; a transaction
// that cannot be handed to a connection on time is skipped and counted as
// behind.
type writer struct {
	load        Load
	total       int64 // rows to schedule, a multiple of load.RowsPerTx
	aggType     string
	pad         int
	measureFrom time.Time

	written  atomic.Int64 // rows inserted
	measured atomic.Int64 // rows inserted with a timestamp after measureFrom
	behind   atomic.Int64
	mu       sync.Mutex
	acks     []int64 // µs from each row's timestamp to its commit's acknowledgement
}

// newWriter is a writer of load from start for the warm-up plus measured,
// counting the rows after the warm-up as measured.
func (b *bench) newWriter(load Load, start time.Time, measured time.Duration) *writer {
	return &writer{load: load, aggType: latencyAggType(load), pad: b.pad, measureFrom: start.Add(b.cfg.LatencyWarmup),
		total: int64(float64(load.Rate)/float64(load.RowsPerTx)*(b.cfg.LatencyWarmup+measured).Seconds()) * int64(load.RowsPerTx)}
}

func (w *writer) run(ctx context.Context, url string, conns int, start time.Time) error {
	txPerSec := float64(w.load.Rate) / float64(w.load.RowsPerTx)
	per := int64(w.load.RowsPerTx)
	jobs := make(chan int64, max(int(txPerSec/10), 16)) // at most 100ms of slack
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(jobs)
		// The pacer sleeps until the next transaction is due, at least a
		// millisecond: a ticker every millisecond woke it a thousand times
		// a second whatever the rate, which at low rates, many writers at
		// once (the fleet scenario), took the cores from what is measured.
		timer := time.NewTimer(0)
		defer timer.Stop()
		var next int64 // first row of the next transaction
		for next < w.total {
			select {
			case <-gctx.Done():
				return gctx.Err()
			case <-timer.C:
			}
			due := min(int64(time.Since(start).Seconds()*txPerSec)*per, w.total)
			for ; next < due; next += per {
				select {
				case jobs <- next:
				default:
					w.behind.Add(1)
				}
			}
			at := start.Add(time.Duration(float64(next/per+1) / txPerSec * float64(time.Second)))
			timer.Reset(max(time.Until(at), time.Millisecond))
		}
		return nil
	})
	for range conns {
		g.Go(func() error {
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				return fmt.Errorf("parsing the Postgres URL: %w", err)
			}
			// Postgres's default. With the cluster's synchronous_commit=off
			// a commit waits for the WAL writer (wal_writer_delay, 200ms)
			// before a walsender may send it, which would be measured as
			// walstream's latency.
			cfg.RuntimeParams["synchronous_commit"] = "on"
			conn, err := pgx.ConnectConfig(gctx, cfg)
			if err != nil {
				return fmt.Errorf("connecting a writer: %w", err)
			}
			defer conn.Close(context.WithoutCancel(gctx))
			from := w.measureFrom.UnixMicro()
			var ts []int64
			for first := range jobs {
				ts = ts[:0]
				rows, err := conn.Query(gctx, latencyInsert, w.aggType, first, w.pad, per)
				if err != nil {
					return fmt.Errorf("inserting rows from %d: %w", first, err)
				}
				for rows.Next() {
					var t int64
					if err := rows.Scan(&t); err != nil {
						rows.Close()
						return fmt.Errorf("reading the timestamps of rows from %d: %w", first, err)
					}
					ts = append(ts, t)
				}
				if err := rows.Err(); err != nil {
					return fmt.Errorf("inserting rows from %d: %w", first, err)
				}
				ack := time.Now().UnixMicro()
				w.written.Add(int64(len(ts)))
				w.mu.Lock()
				for _, t := range ts {
					if t >= from {
						w.measured.Add(1)
						w.acks = append(w.acks, ack-t)
					}
				}
				w.mu.Unlock()
			}
			return nil
		})
	}
	return g.Wait()
}

func (w *writer) ackOffsets() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acks)
}

// timings are the records read, in the order read: each one's row
// timestamp, the time it was seen and when walstream handed it on.
type timings struct {
	ts  []int64 // row timestamps, µs since the epoch
	lat []int64 // seen minus timestamp, µs
	// produced is the record's timestamp minus the row's, µs: walstream
	// leaves the record timestamp to franz-go, which sets it when
	// walstream hands it the record. It splits lat into the time up to
	// walstream's producer (Postgres's commit, the walsender, decoding)
	// and the time after it (the Kafka transaction and the consumer).
	produced []int64
	bytes    int64 // of the records' values and headers
}

// add notes r, whose row is timestamped ts, seen at now (µs).
func (t *timings) add(r *kgo.Record, ts, now int64) {
	t.ts = append(t.ts, ts)
	t.lat = append(t.lat, now-ts)
	t.produced = append(t.produced, r.Timestamp.UnixMicro()-ts)
	t.bytes += int64(len(r.Value))
	for _, h := range r.Headers {
		t.bytes += int64(len(h.Key) + len(h.Value))
	}
}

// meanBytes is the mean size of the records' values and headers, 0 before
// the first.
func (t *timings) meanBytes() int {
	if len(t.ts) == 0 {
		return 0
	}
	return int(t.bytes / int64(len(t.ts)))
}

// recordTimes returns the records' Kafka timestamps, sorted: when
// walstream handed each to franz-go, in ms.
func (t *timings) recordTimes() []time.Time {
	out := make([]time.Time, len(t.ts))
	for i := range t.ts {
		out[i] = time.UnixMicro(t.ts[i] + t.produced[i])
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// between returns, in µs, for the rows timestamped from from to to: the
// latencies, the time to walstream's producer and the time from there.
func (t *timings) between(from, to int64) (lat, toProducer, fromProducer []int64) {
	for i, ts := range t.ts {
		if ts >= from && ts < to {
			lat = append(lat, t.lat[i])
			toProducer = append(toProducer, t.produced[i])
			fromProducer = append(fromProducer, t.lat[i]-t.produced[i])
		}
	}
	return lat, toProducer, fromProducer
}

// poller polls a client reading topics read_committed from their start,
// in a goroutine of its own until close, and hands each poll's fetches
// to its consumer with when they came (µs since the epoch).
type poller struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// startPoller starts polling topics on broker for take; what names the
// consumer in an error.
func startPoller(broker, what string, topics []string, take func(fs kgo.Fetches, now int64)) (*poller, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", what, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &poller{cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			fs := cl.PollFetches(ctx)
			now := time.Now().UnixMicro()
			if ctx.Err() != nil {
				return
			}
			take(fs, now)
		}
	}()
	return p, nil
}

// close stops the polling and closes the client; it may be called again.
func (p *poller) close() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
		p.cl.Close()
	})
}

// eachTimed calls f with each fetched record and its row's timestamp; a
// record without one is an error, the first kept in *failed.
func eachTimed(fs kgo.Fetches, failed *error, f func(r *kgo.Record, ts int64)) {
	fs.EachRecord(func(r *kgo.Record) {
		ts, err := recordTimestamp(r.Value)
		if err != nil {
			if *failed == nil {
				*failed = err
			}
			return
		}
		f(r, ts)
	})
}

// recordTimestamp finds ts_us in a record's JSON value.
func recordTimestamp(v []byte) (int64, error) {
	i := bytes.Index(v, tsField)
	if i < 0 {
		return 0, fmt.Errorf("record value without %s: %.80q", tsField, v)
	}
	rest := bytes.TrimLeft(v[i+len(tsField):], `\": `)
	j := 0
	for j < len(rest) && '0' <= rest[j] && rest[j] <= '9' {
		j++
	}
	ts, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parsing ts_us %.30q: %w", rest, err)
	}
	return ts, nil
}

// awaitArrival waits up to 30 s for a phase's stragglers, until received
// reaches want; a process under test that exits meanwhile (exited, when
// given) ends the wait with its error.
func awaitArrival(received func() int64, want int64, exited func() error) error {
	for deadline := time.Now().Add(30 * time.Second); received() < want && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if exited != nil {
			if err := exited(); err != nil {
				return err
			}
		}
	}
	return nil
}

// timedConsumer reads topics read_committed and keeps, per topic, each
// record's timings, for the rows written from a moment on (a phase's); the
// zero time keeps them all.
type timedConsumer struct {
	*poller
	from   int64 // µs since the epoch
	mu     sync.Mutex
	by     map[string]*timings // by topic
	n      int64
	failed error
}

func startTimedConsumer(broker string, topics []string, from time.Time) (*timedConsumer, error) {
	c := &timedConsumer{from: from.UnixMicro(), by: make(map[string]*timings)}
	p, err := startPoller(broker, "the timing consumer", topics, c.take)
	if err != nil {
		return nil, err
	}
	c.poller = p
	return c, nil
}

func (c *timedConsumer) take(fs kgo.Fetches, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fs.EachError(func(t string, p int32, err error) {
		if c.failed == nil {
			c.failed = fmt.Errorf("consuming %s partition %d: %w", t, p, err)
		}
	})
	eachTimed(fs, &c.failed, func(r *kgo.Record, ts int64) {
		if ts < c.from {
			return // an earlier phase's
		}
		t := c.by[r.Topic]
		if t == nil {
			t = new(timings)
			c.by[r.Topic] = t
		}
		t.add(r, ts, now)
		c.n++
	})
}

// received counts the records kept, of every topic.
func (c *timedConsumer) received() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *timedConsumer) receivedOf(topic string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.of(topic).ts))
}

// latencies are topic's latencies, and the times to and from walstream's
// producer, µs, of the rows timestamped at or after from.
func (c *timedConsumer) latencies(topic string, from int64) (lat, toProducer, fromProducer []int64) {
	return c.between(topic, from, math.MaxInt64)
}

// between is latencies of the rows timestamped from from to to.
func (c *timedConsumer) between(topic string, from, to int64) (lat, toProducer, fromProducer []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.of(topic).between(from, to)
}

// of is topic's timings, empty before its first record.
func (c *timedConsumer) of(topic string) *timings {
	if t := c.by[topic]; t != nil {
		return t
	}
	return new(timings)
}

// stamps are topic's records' row timestamps and latencies from them, µs,
// in the order read.
func (c *timedConsumer) stamps(topic string) (ts, lat []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.of(topic)
	return slices.Clone(t.ts), slices.Clone(t.lat)
}

func (c *timedConsumer) recordTimes(topic string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.of(topic).recordTimes()
}

func (c *timedConsumer) meanBytes(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.of(topic).meanBytes()
}

func (c *timedConsumer) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}
