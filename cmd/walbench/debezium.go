package main

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// The debezium scenario measures Debezium's Postgres connector with the
// outbox router, in Kafka Connect, as the peer of walstream: on the same
// Postgres and the same Apache Kafka, one tool at a time, round after
// round, each tool the same backlog drain and the same live loads.

// Tools of the debezium scenario, in the order each round runs them.
const (
	toolWalstream   = "walstream"
	toolStandalone  = "debezium-standalone"
	toolDistributed = "debezium-distributed"
)

// Slots of the debezium scenario's tools; dropSlots drops them with the
// others.
const (
	slotDbzStandalone  = "walbench_dbz_standalone"
	slotDbzDistributed = "walbench_dbz_distributed"
)

// peer is one tool of the scenario.
type peer struct {
	name string
	slot string
	// debezium, with its worker's mode; walstream otherwise.
	debezium bool
	mode     testenv.ConnectMode
}

func (b *bench) peers() []peer {
	out := []peer{{name: toolWalstream, slot: slotWalstream}}
	for _, m := range b.cfg.DebeziumModes {
		if m == "standalone" {
			out = append(out, peer{name: toolStandalone, slot: slotDbzStandalone, debezium: true, mode: testenv.ConnectStandalone})
		} else {
			out = append(out, peer{name: toolDistributed, slot: slotDbzDistributed, debezium: true, mode: testenv.ConnectDistributed})
		}
	}
	return out
}

// debeziumWorker are the Kafka Connect worker settings the scenario
// changes from what the harness sets (testenv.ConnectConfig): the offset
// flush back to Connect's default, and the JVM as connect-distributed.sh
// and connect-standalone.sh start it (heap -Xms256M -Xmx2G, G1 and
// kafka-run-class.sh's flags). The harness's own settings, which the report
// names too: plugin.discovery=service_load (Connect's default scans every
// class at start, which its own warning advises against, and doubles the
// worker's memory), a standalone worker's producer with acks=all and
// idempotence, a distributed worker with exactly.once.source.support.
var debeziumWorker = map[string]string{"offset.flush.interval.ms": "60000"}

func debeziumJVM() []string { return append(slices.Clone(kafkaJVM), "-Xms256M") }

// debeziumHeap is connect-distributed.sh's -Xmx.
const debeziumHeap = "2G"

// debeziumJVMFlags are the worker's JVM flags, its heap with them.
func debeziumJVMFlags() []string { return append([]string{"-Xmx" + debeziumHeap}, debeziumJVM()...) }

// debeziumChanged are the connector settings that differ from Debezium's
// defaults, beside the connection's and the slot's, named in the report:
// pgoutput (Debezium's default is decoderbufs), walbench's publication
// (filtered: the publication of the outbox table, which exists), the
// outbox table alone, no snapshot (the rows are in the WAL), the outbox
// router, and the converters walstream's defaults match (the worker's are
// JsonConverter).
var debeziumChanged = map[string]string{
	"tasks.max":                   "1",
	"topic.prefix":                "walbench",
	"table.include.list":          benchTable,
	"plugin.name":                 "pgoutput",
	"publication.name":            benchPublication,
	"publication.autocreate.mode": "filtered",
	"snapshot.mode":               "no_data",
	"transforms":                  "outbox",
	"transforms.outbox.type":      "io.debezium.transforms.outbox.EventRouter",
	"key.converter":               "org.apache.kafka.connect.storage.StringConverter",
	"value.converter":             "org.apache.kafka.connect.storage.StringConverter",
}

// debeziumConnector is the connector config: debeziumChanged, the
// connection to pgURL, the tool's slot and, in a distributed worker,
// exactly-once.
func debeziumConnector(pgURL string, p peer) (map[string]string, error) {
	u, err := url.Parse(pgURL)
	if err != nil {
		return nil, fmt.Errorf("parsing the Postgres URL: %w", err)
	}
	password, _ := u.User.Password()
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	cfg := maps.Clone(debeziumChanged)
	maps.Copy(cfg, map[string]string{
		"connector.class":   "io.debezium.connector.postgresql.PostgresConnector",
		"database.hostname": u.Hostname(),
		"database.port":     port,
		"database.user":     u.User.Username(),
		"database.password": password,
		"database.dbname":   strings.TrimPrefix(u.Path, "/"),
		"slot.name":         p.slot,
	})
	if p.mode == testenv.ConnectDistributed {
		cfg["exactly.once.support"] = "required"
	}
	return cfg, nil
}

// debeziumHarness are the worker settings testenv.LaunchConnect sets,
// changed from Kafka Connect's defaults (the converters aside: the
// connector sets its own).
const debeziumHarness = "plugin.discovery=service_load; standalone: producer.acks=all, producer.enable.idempotence=true; distributed: exactly.once.source.support=enabled"

// debeziumSettings are the scenario's settings of Debezium and Kafka
// Connect, for the report: the connector's changed from Debezium's
// defaults, the worker's changed from the harness's, and the JVM.
func debeziumSettings() map[string]any {
	return map[string]any{
		"connector":             debeziumChanged,
		"connector_distributed": map[string]string{"exactly.once.support": "required"},
		"worker":                debeziumWorker,
		"worker_harness":        debeziumHarness,
		"jvm":                   debeziumJVMFlags(),
	}
}

// PeerRun is one tool in one round.
type PeerRun struct {
	Tool    string        `json:"tool"`
	Round   int           `json:"round"`
	Backlog *PeerDrain    `json:"backlog,omitempty"`
	Latency []PeerLatency `json:"latency,omitempty"`
}

// PeerDrain is one tool draining the round's backlog: from the tool's
// start (walstream's process; Debezium's connector, its worker started
// before) until a read_committed consumer has counted every row.
type PeerDrain struct {
	Rows       int64   `json:"rows"`
	Seconds    float64 `json:"seconds"`
	RowsPerSec float64 `json:"rows_per_sec"`
	// CPUSeconds is the tool's process in the drain's time: walstream's,
	// or the Kafka Connect worker's.
	CPUSeconds      float64 `json:"cpu_seconds"`
	CPUMicrosPerRow float64 `json:"cpu_us_per_row"`
	// PeakRSSBytes is the process's VmHWM at the drain's end: the worker's
	// over its whole life, its start included.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// WalsenderCPUSeconds is the server's walsender streaming the slot to
	// the tool, in the same time: the side no client can make faster.
	WalsenderCPUSeconds float64 `json:"walsender_cpu_seconds"`
	// WorkerStartSeconds is the Kafka Connect worker's start before the
	// drain, not in Seconds.
	WorkerStartSeconds float64 `json:"worker_start_seconds,omitempty"`
	RecordsCounted     int64   `json:"records_counted"`
	Machine            Quiet   `json:"machine"`
}

// PeerLatency is one offered load against one tool, caught up and
// streaming.
type PeerLatency struct {
	Load            Load    `json:"load"`
	AchievedRate    float64 `json:"achieved_rows_per_sec"`
	Seconds         float64 `json:"measured_seconds"`
	Samples         int     `json:"samples"`
	P50Ms           float64 `json:"p50_ms"`
	P99Ms           float64 `json:"p99_ms"`
	P999Ms          float64 `json:"p999_ms"`
	MaxMs           float64 `json:"max_ms"`
	Missing         int64   `json:"missing"`
	Behind          int64   `json:"behind_schedule"`
	CPUMicrosPerRow float64 `json:"cpu_us_per_row"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	Machine         Quiet   `json:"machine"`
	// Floors, walstream's only, are Kafka's own latency under its
	// transactions of the measured window (floor.go).
	Floors []LatencyFloor `json:"kafka_floors,omitempty"`
}

// debeziumRound runs every tool once: the backlog, then the live loads.
func (b *bench) debeziumRound(ctx context.Context, round int, rep *Report, save func() error) error {
	runs := make(map[string]*PeerRun)
	for _, p := range b.peers() {
		r := &PeerRun{Tool: p.name, Round: round}
		runs[p.name] = r
		rep.Peers = append(rep.Peers, r)
	}
	if b.cfg.DebeziumRows > 0 {
		if err := b.peerBacklog(ctx, round, runs, save); err != nil {
			return err
		}
	}
	for _, p := range b.peers() {
		if len(b.cfg.LatencyLoads) == 0 {
			break
		}
		l, err := b.peerLatency(ctx, round, p)
		if err != nil {
			return fmt.Errorf("%s, round %d: %w", p.name, round, err)
		}
		runs[p.name].Latency = l
		if err := save(); err != nil {
			return err
		}
	}
	return nil
}

// peerBacklog preloads the round's rows while every tool's slot exists,
// then lets each tool drain its slot, one after the other, each into a
// broker of its own.
func (b *bench) peerBacklog(ctx context.Context, round int, runs map[string]*PeerRun, save func() error) error {
	name := fmt.Sprintf("debezium-backlog-%d", round)
	dir := filepath.Join(b.cfg.OutDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := b.db.reset(ctx); err != nil {
		return err
	}
	for _, p := range b.peers() {
		if _, err := b.db.createSlot(ctx, p.slot); err != nil {
			return err
		}
	}
	rows := int64(b.cfg.DebeziumRows)
	b.logf("%s: preloading %d rows, one per transaction", name, rows)
	lctx, cancel := context.WithTimeout(ctx, b.cfg.DrainTimeout)
	_, err := b.db.load(lctx, 1, rows, 1, b.pad, aggTypeBacklog)
	cancel()
	if err != nil {
		return err
	}
	for _, p := range b.peers() {
		d, err := b.peerDrain(ctx, p, rows, filepath.Join(dir, p.name))
		if err != nil {
			return fmt.Errorf("%s drain, round %d: %w", p.name, round, err)
		}
		b.logf("%s: %s %.0f rows/s, %.2f µs CPU per row, peak RSS %d MB", name, p.name, d.RowsPerSec, d.CPUMicrosPerRow, d.PeakRSSBytes>>20)
		runs[p.name].Backlog = d
		if err := save(); err != nil {
			return err
		}
	}
	return b.db.dropSlots(ctx)
}

// running is a tool started for a measurement.
type running struct {
	pid int
	// begin starts what is measured: Debezium's connector, in a worker
	// started before; nothing for walstream, whose process start is.
	begin func(ctx context.Context) error
	stop  func() error
	// exited reports the tool's end, nil while it runs.
	exited func() error
	// workerStart is how long the Kafka Connect worker took to start.
	workerStart time.Duration
	started     time.Time // when the measured tool was started
}

// startPeer starts a tool on its slot, writing to broker, logging into
// logPrefix.log: walstream's process, or a Kafka Connect worker whose
// connector begin creates.
func (b *bench) startPeer(ctx context.Context, p peer, broker *brokerProc, logPrefix string) (*running, error) {
	if !p.debezium {
		w, err := startWalstream(b.walstream, b.walstreamArgs(broker.addr), logPrefix+".log")
		if err != nil {
			return nil, err
		}
		return &running{pid: w.pid(), begin: func(context.Context) error { return nil }, stop: w.stop, exited: w.exited, started: w.started()}, nil
	}
	cfg, err := debeziumConnector(b.pg.url, p)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPrefix + ".log")
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	c, err := testenv.LaunchConnect(ctx, testenv.ConnectConfig{Mode: p.mode, Kafka: broker.addr, Props: debeziumWorker,
		Heap: debeziumHeap, JVM: debeziumJVM(), Output: logf})
	if err != nil {
		logf.Close()
		return nil, err
	}
	r := &running{pid: c.Process().Pid(), workerStart: time.Since(t0)}
	r.stop = func() error {
		c.Close()
		return logf.Close()
	}
	r.exited = func() error {
		if c.Running() {
			return nil
		}
		return fmt.Errorf("kafka connect exited; its last log lines:\n%s", c.LastLines(20))
	}
	r.begin = func(ctx context.Context) error {
		r.started = time.Now()
		return c.CreateConnector(ctx, "walbench", cfg)
	}
	return r, nil
}

// peerDrain is one tool draining rows from its slot into a fresh broker.
func (b *bench) peerDrain(ctx context.Context, p peer, rows int64, logPrefix string) (*PeerDrain, error) {
	topic := topicFor(aggTypeBacklog)
	broker, err := b.startPhaseBroker(ctx, filepath.Base(logPrefix), logPrefix+"-kafka-data", filepath.Dir(logPrefix), logPrefix+"-broker.log", topic)
	if err != nil {
		return nil, err
	}
	defer b.closeBroker(filepath.Base(logPrefix), broker)
	c, err := startCounter(broker.addr, topic)
	if err != nil {
		return nil, err
	}
	defer c.close()
	d := &PeerDrain{Rows: rows}
	if d.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return nil, err
	}
	r, err := b.startPeer(ctx, p, broker, logPrefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := r.stop(); err != nil {
			b.logf("stopping %s: %v", p.name, err)
		}
	}()
	d.WorkerStartSeconds = r.workerStart.Seconds()
	// walstream's CPU counts from its process's start; a worker's from
	// its connector's creation, its own start being no part of the drain.
	var cpu0 time.Duration
	s := newSampler()
	if p.debezium {
		s.sample(r.pid)
		cpu0 = s.get(r.pid).CPU
	}
	if err := r.begin(ctx); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(b.cfg.DrainTimeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	walsender := 0
	for c.count() < rows {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		if walsender == 0 {
			if _, walsender, err = b.db.slotState(ctx, p.slot); err != nil {
				return nil, err
			}
		}
		s.sample(r.pid)
		s.sample(walsender)
		if err := r.exited(); err != nil {
			return nil, err
		}
		if err := c.err(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d rows visible after %s (log %s.log)", c.count(), rows, b.cfg.DrainTimeout, logPrefix)
		}
	}
	d.Seconds = time.Since(r.started).Seconds()
	s.sample(r.pid)
	ps := s.get(r.pid)
	s.sample(walsender)
	d.CPUSeconds, d.PeakRSSBytes = (ps.CPU - cpu0).Seconds(), ps.HWM
	d.WalsenderCPUSeconds = s.get(walsender).CPU.Seconds()
	d.RowsPerSec = float64(rows) / d.Seconds
	d.CPUMicrosPerRow = d.CPUSeconds * 1e6 / float64(rows)
	// Whatever arrives late: duplicates a drain would hide.
	time.Sleep(time.Second)
	d.RecordsCounted = c.count()
	return d, nil
}

// peerLatency starts the tool on an empty outbox and holds each offered
// load in turn.
func (b *bench) peerLatency(ctx context.Context, round int, p peer) ([]PeerLatency, error) {
	name := fmt.Sprintf("debezium-latency-%d", round)
	dir := filepath.Join(b.cfg.OutDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := b.db.reset(ctx); err != nil {
		return nil, err
	}
	if _, err := b.db.createSlot(ctx, p.slot); err != nil {
		return nil, err
	}
	prefix := filepath.Join(dir, p.name)
	topics := latencyTopics(b.cfg.LatencyLoads)
	broker, err := b.startPhaseBroker(ctx, name, prefix+"-kafka-data", dir, prefix+"-broker.log", topics...)
	if err != nil {
		return nil, err
	}
	defer b.closeBroker(name, broker)
	r, err := b.startPeer(ctx, p, broker, prefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := r.stop(); err != nil {
			b.logf("%s: stopping %s: %v", name, p.name, err)
		}
	}()
	if err := r.begin(ctx); err != nil {
		return nil, err
	}
	if err := b.waitPeerStreaming(ctx, p, r, broker.addr); err != nil {
		return nil, err
	}
	var out []PeerLatency
	for _, load := range b.cfg.LatencyLoads {
		l, err := b.peerLatencyPhase(ctx, fmt.Sprintf("%s-%s", prefix, load), load, p, r, broker.addr)
		if err != nil {
			return nil, fmt.Errorf("%s at %s: %w", p.name, load, err)
		}
		b.logf("%s: %s at %d rows/s in transactions of %d, %.0f achieved: p50 %.1f ms, p99 %.1f ms, max %.1f ms, %.1f µs CPU per row, %d missing, %d behind",
			name, p.name, load.Rate, load.RowsPerTx, l.AchievedRate, l.P50Ms, l.P99Ms, l.MaxMs, l.CPUMicrosPerRow, l.Missing, l.Behind)
		out = append(out, l)
	}
	if err := r.stop(); err != nil {
		return nil, err
	}
	r.stop = func() error { return nil }
	return out, b.db.dropSlots(ctx)
}

// waitPeerStreaming waits until the tool reads its slot: a row inserted
// now reaches Kafka. Each tool says so in its own way; the probe row
// proves it for both.
func (b *bench) waitPeerStreaming(ctx context.Context, p peer, r *running, broker string) error {
	topic := topicFor("Probe")
	c, err := startCounter(broker, topic)
	if err != nil {
		return err
	}
	defer c.close()
	deadline := time.Now().Add(2 * time.Minute)
	for i := int64(0); c.count() == 0; i++ {
		if err := r.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s published no probe row within 2 minutes", p.name)
		}
		if i%20 == 0 { // a row a second until one arrives
			if err := b.db.probe(ctx, i); err != nil {
				return err
			}
		}
		time.Sleep(pollEvery)
	}
	return nil
}

// peerLatencyPhase holds one offered load for the warm-up plus the
// measured time, as latencyPhase does for walstream alone, without the
// figures only walstream has (its producer's timestamps, the confirmed
// slot) but Kafka's floor under walstream's transactions, its files and
// topics named from prefix.
func (b *bench) peerLatencyPhase(ctx context.Context, prefix string, load Load, p peer, r *running, broker string) (PeerLatency, error) {
	l := PeerLatency{Load: load}
	var err error
	if l.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return l, err
	}
	topic := topicFor(latencyAggType(load))
	c, err := startTimedConsumer(broker, []string{topic}, time.Time{})
	if err != nil {
		return l, err
	}
	defer c.close()
	var cps *checkpointLog
	if b.cfg.LatencyFloor && !p.debezium {
		if cps, err = b.watchCheckpoints(ctx, broker, p.slot); err != nil {
			return l, err
		}
		defer cps.stop()
	}
	start := time.Now()
	w := b.newWriter(load, start, b.cfg.LatencyFor)
	// The tool's CPU time is sampled when the warm-up ends and when the
	// writers stop.
	s := newSampler()
	measureTo, err := measure(b.cfg.LatencyWarmup, func() error { s.sample(r.pid); return nil },
		func() error { return w.run(ctx, b.pg.url, b.cfg.LatencyWriters, start) })
	if err != nil {
		return l, err
	}
	cpu0 := s.get(r.pid).CPU
	s.sample(r.pid)
	ps := s.get(r.pid)
	l.PeakRSSBytes = ps.HWM
	if err := awaitArrival(c.received, w.written.Load(), r.exited); err != nil {
		return l, err
	}
	c.close()
	if err := c.err(); err != nil {
		return l, err
	}
	l.Missing = w.written.Load() - c.received()
	l.Behind = w.behind.Load()
	l.Seconds = measureTo.Sub(w.measureFrom).Seconds()
	l.AchievedRate = float64(w.measured.Load()) / l.Seconds
	if n := w.measured.Load(); n > 0 {
		l.CPUMicrosPerRow = (ps.CPU - cpu0).Seconds() * 1e6 / float64(n)
	}
	lat, _, _ := c.latencies(topic, w.measureFrom.UnixMicro())
	l.Samples = len(lat)
	l.P50Ms, l.P99Ms, l.P999Ms = percentile(lat, 0.50)/1e3, percentile(lat, 0.99)/1e3, percentile(lat, 0.999)/1e3
	if len(lat) > 0 {
		l.MaxMs = float64(slices.Max(lat)) / 1e3
	}
	if cps != nil {
		if l.Floors, err = b.latencyFloors(ctx, broker, prefix, cps, c, topic, w.measureFrom, measureTo); err != nil {
			return l, err
		}
	}
	return l, nil
}

// counter counts a topic's records as a read_committed consumer sees them.
type counter struct {
	*poller
	n      atomic.Int64
	last   atomic.Int64 // when a record was last seen, Unix nanoseconds
	failed atomic.Pointer[error]
}

func startCounter(broker, topic string) (*counter, error) {
	c := &counter{}
	p, err := startPoller(broker, "the counter of "+topic, []string{topic}, func(fs kgo.Fetches, _ int64) {
		fs.EachError(func(t string, p int32, err error) {
			e := fmt.Errorf("consuming %s partition %d: %w", t, p, err)
			c.failed.CompareAndSwap(nil, &e)
		})
		if n := fs.NumRecords(); n > 0 {
			c.n.Add(int64(n))
			c.last.Store(time.Now().UnixNano())
		}
	})
	if err != nil {
		return nil, err
	}
	c.poller = p
	return c, nil
}

func (c *counter) count() int64 { return c.n.Load() }

func (c *counter) err() error {
	if e := c.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// debeziumVersions names Kafka Connect's and Debezium's releases.
func debeziumVersions() string {
	v, err := testenv.JavaVersions()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("Kafka Connect %s with Debezium %s", v["CONNECT_VERSION"], v["DEBEZIUM_VERSION"])
}

// probe inserts one row of the probe's aggregate type.
func (d *db) probe(ctx context.Context, n int64) error {
	_, err := d.conn.Exec(ctx, `INSERT INTO public.outbox (aggregatetype, aggregateid, type, payload) VALUES ('Probe', $1, 'Probe', '{}')`,
		pgx.QueryExecModeSimpleProtocol, strconv.FormatInt(n, 10))
	if err != nil {
		return fmt.Errorf("inserting a probe row: %w", err)
	}
	return nil
}
