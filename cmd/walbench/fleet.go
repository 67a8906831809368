package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/pipeline"
	"golang.org/x/sync/errgroup"
)

// The fleet scenario: many streams in one walstream process (a streams:
// list), each its own outbox table, publication and slot, each under the
// same live load, on one Postgres server or spread over several
// (-fleet-servers: a walsender reads all of its server's WAL, so that on
// one server a hundred streams' walsenders each read all hundred loads).
// It measures, in one run:
//   - stream 1 alone in its process under that load, then every stream
//     in one process under it: each stream's insert → visible latency, so
//     that what sharing the process costs a stream shows;
//   - the process's CPU per Kafka transaction under the load, beside the
//     floors of the same transactions: franz-go alone committing them
//     (kafka-txn at their rate and size) and pg_recvlogical receiving one
//     stream's load (per transaction);
//   - the process idle, every stream streaming an outbox nobody writes:
//     its CPU (cores) and resident memory.

// FleetRun is one run of the fleet scenario.
type FleetRun struct {
	Run     int  `json:"run"`
	Streams int  `json:"streams"`
	Servers int  `json:"postgres_servers"` // the streams are spread over
	Load    Load `json:"load"`             // each stream's
	// Alone is stream 1 alone in its process; Fleet every stream in one.
	Alone FleetPhase `json:"alone"`
	Fleet FleetPhase `json:"fleet"`
	Idle  FleetIdle  `json:"idle"`
	// Debezium is the same streams as connectors of one Kafka Connect
	// worker (-fleet-debezium), under the same load; nil when not run.
	Debezium     *FleetPhase `json:"debezium,omitempty"`
	DebeziumMode string      `json:"debezium_mode,omitempty"`
	// KafkaClientCPUMicrosPerTxn is franz-go alone committing the fleet's
	// Kafka transactions (their rate, records and size), and
	// RecvLogicalCPUMicrosPerTxn pg_recvlogical receiving one stream's
	// load, per Postgres transaction: the floors under the fleet's CPU per
	// Kafka transaction at low rates, where each Kafka transaction is one
	// Postgres transaction.
	KafkaClientCPUMicrosPerTxn float64 `json:"kafka_client_cpu_us_per_txn"`
	RecvLogicalCPUMicrosPerTxn float64 `json:"pg_recvlogical_cpu_us_per_txn"`
}

// FleetPhase is a process of streams under the load.
type FleetPhase struct {
	Streams []StreamLatency `json:"streams"`
	// WorstP99Ms is the highest of the streams' p99s.
	WorstP99Ms float64 `json:"worst_p99_ms"`
	Seconds    float64 `json:"measured_seconds"`
	// CPUCores is the process's CPU time over the measured time;
	// KafkaTxns its Kafka transactions then (every stream's commits), and
	// CPUMicrosPerTxn the one over the other.
	CPUCores        float64 `json:"cpu_cores"`
	KafkaTxns       int64   `json:"kafka_txns"`
	CPUMicrosPerTxn float64 `json:"cpu_us_per_txn"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	Machine         Quiet   `json:"machine"`
	// Floors are Kafka's floor under each stream's transactions of the
	// measured time: franz-go committing them again, a producer per
	// stream, all at once (fleetFloors); FloorWorstP99Ms is the highest
	// of their p99s. None for Debezium, or with -latency-floor=false.
	Floors          []LatencyFloor `json:"floors,omitempty"`
	FloorWorstP99Ms float64        `json:"floor_worst_p99_ms,omitempty"`
}

// StreamLatency is one stream's insert → visible latency in a phase.
type StreamLatency struct {
	Stream  int     `json:"stream"`
	Samples int     `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
	Missing int64   `json:"missing"`
	Behind  int64   `json:"behind_schedule"`
	// ToProducerP99Ms is the p99 from the insert to the publisher handing
	// the record to its Kafka client (the record's timestamp), as in the
	// latency scenario: Postgres's commit, the walsender, decoding.
	ToProducerP99Ms float64 `json:"to_producer_p99_ms"`
	// FromProducerP99Ms is the p99 from there to visible: the Kafka
	// transaction, its markers and walbench's reader.
	FromProducerP99Ms float64 `json:"from_producer_p99_ms"`
}

// FleetIdle is the process with every stream streaming and nothing
// written.
type FleetIdle struct {
	Seconds  float64 `json:"measured_seconds"`
	CPUCores float64 `json:"cpu_cores"`
	RSSBytes int64   `json:"rss_bytes"` // VmRSS at the end
	Machine  Quiet   `json:"machine"`
}

// fleetStream is stream i, 1-based: its database, which holds its outbox
// table and publication as walbench's own does (public.outbox, walbench),
// its slot and its rows' aggregate type (its topic). A database each: a
// walsender decodes every change of its database and only then filters
// by publication, so streams of tables of one database would each decode
// every stream's rows.
type fleetStream int

func (s fleetStream) database() string { return fmt.Sprintf("walbench_fleet_%d", s) }
func (s fleetStream) slot() string     { return fmt.Sprintf("walbench_fleet_%d", s) }
func (s fleetStream) aggType() string  { return fmt.Sprintf("Fleet%d", s) }

// url is the stream's database's URL, on the server at base.
func (s fleetStream) url(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("parsing the Postgres URL: %w", err)
	}
	u.Path = "/" + s.database()
	return u.String(), nil
}

// fleetSlots matches every slot of the fleet scenario, for dropping them.
const fleetSlots = "walbench_fleet_%"

// fleetServer is the server stream s is on: with -fleet-servers n, server
// (s-1) mod n of b.fleetPG, whose first is b.pg.
func (b *bench) fleetServer(s fleetStream) *postgres {
	if len(b.fleetPG) == 0 {
		return b.pg
	}
	return b.fleetPG[(int(s)-1)%len(b.fleetPG)]
}

// fleetURL is stream s's database's URL.
func (b *bench) fleetURL(s fleetStream) (string, error) { return s.url(b.fleetServer(s).url) }

// startFleetServers starts the servers of -fleet-servers beyond b.pg, each
// a throwaway cluster like it, and returns what stops them.
func (b *bench) startFleetServers(ctx context.Context) (stop func(), err error) {
	b.fleetPG = []*postgres{b.pg}
	stop = func() {
		for _, pg := range b.fleetPG[1:] {
			if err := pg.stop(); err != nil {
				b.logf("stopping Postgres: %v", err)
			}
		}
		b.fleetPG = nil
	}
	for len(b.fleetPG) < b.cfg.FleetServers {
		b.logf("starting Postgres server %d of %d for the fleet", len(b.fleetPG)+1, b.cfg.FleetServers)
		pg, err := startPostgres(ctx, b.cfg.PGBin, b.cfg.PGSettings)
		if err != nil {
			stop()
			return nil, err
		}
		b.fleetPG = append(b.fleetPG, pg)
	}
	return stop, nil
}

// onFleetServers calls fn on each server of streams 1 to n, with a
// connection to it and the streams on it.
func (b *bench) onFleetServers(ctx context.Context, n int, fn func(d *db, streams []fleetStream) error) error {
	on := make(map[*postgres][]fleetStream)
	var servers []*postgres
	for i := 1; i <= n; i++ {
		pg := b.fleetServer(fleetStream(i))
		if on[pg] == nil {
			servers = append(servers, pg)
		}
		on[pg] = append(on[pg], fleetStream(i))
	}
	for _, pg := range servers {
		d, err := connect(ctx, pg.url)
		if err != nil {
			return err
		}
		err = fn(d, on[pg])
		d.close()
		if err != nil {
			return err
		}
	}
	return nil
}

// fleetSetup drops the slots an earlier run left, and creates, for each of
// n streams, its database (once), its outbox table and publication anew,
// then the slots: after all of it, so that no walsender reads the WAL of
// the other databases' setup.
func (b *bench) fleetSetup(ctx context.Context, n int) error {
	err := b.onFleetServers(ctx, n, func(d *db, streams []fleetStream) error {
		if err := d.dropSlotsLike(ctx, fleetSlots); err != nil {
			return err
		}
		for _, s := range streams {
			var exists bool
			if err := d.conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", s.database()).Scan(&exists); err != nil {
				return fmt.Errorf("looking for database %s: %w", s.database(), err)
			}
			// FILE_COPY writes a record to the WAL where the default
			// writes the template's every page.
			if !exists {
				if err := d.exec(ctx, "CREATE DATABASE "+s.database()+" STRATEGY = FILE_COPY"); err != nil {
					return err
				}
			}
			if err := b.inFleetDB(ctx, s, func(d *db) error {
				if err := d.exec(ctx, setupSQL); err != nil {
					return err
				}
				return d.exec(ctx, resetSQL)
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		s := fleetStream(i)
		if err := b.inFleetDB(ctx, s, func(d *db) error {
			_, err := d.createSlot(ctx, s.slot())
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// inFleetDB calls fn with a connection to stream s's database.
func (b *bench) inFleetDB(ctx context.Context, s fleetStream, fn func(*db) error) error {
	u, err := b.fleetURL(s)
	if err != nil {
		return err
	}
	d, err := connect(ctx, u)
	if err != nil {
		return fmt.Errorf("database %s: %w", s.database(), err)
	}
	defer d.close()
	return fn(d)
}

// fleetRun runs the scenario once.
func (b *bench) fleetRun(ctx context.Context, run int) (*FleetRun, error) {
	name := fmt.Sprintf("fleet-%d", run)
	dir := filepath.Join(b.cfg.OutDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	n, load := b.cfg.FleetStreams, b.cfg.FleetLoad
	r := &FleetRun{Run: run, Streams: n, Servers: b.cfg.FleetServers, Load: load}
	b.logf("%s: %d streams at %s each", name, n, load)
	if err := b.fleetSetup(ctx, n); err != nil {
		return nil, err
	}
	topics := make([]string, n)
	for i := range topics {
		topics[i] = topicFor(fleetStream(i + 1).aggType())
	}
	broker, err := b.startPhaseBroker(ctx, name, filepath.Join(b.workDir, name+"-kafka"), dir, filepath.Join(dir, "broker.log"), topics...)
	if err != nil {
		return nil, err
	}
	defer b.closeBroker(name, broker)

	// Stream 1 alone, then the fleet, each in a process of its own.
	if r.Alone, err = b.fleetPhase(ctx, filepath.Join(dir, "alone"), broker.addr, 1, nil); err != nil {
		return nil, fmt.Errorf("%s, stream 1 alone: %w", name, err)
	}
	b.logf("%s: stream 1 alone: p50 %.1f ms, p99 %.1f ms; %.3f cores, %.0f µs CPU per Kafka transaction",
		name, r.Alone.Streams[0].P50Ms, r.Alone.Streams[0].P99Ms, r.Alone.CPUCores, r.Alone.CPUMicrosPerTxn)
	if r.Fleet, err = b.fleetPhase(ctx, filepath.Join(dir, "fleet"), broker.addr, n, &r.Idle); err != nil {
		return nil, fmt.Errorf("%s, %d streams: %w", name, n, err)
	}
	b.logf("%s: %d streams: worst p99 %.1f ms (stream 1 alone %.1f); %.3f cores, %.0f µs CPU per Kafka transaction, peak RSS %.0f MB; idle %.3f cores, RSS %.0f MB",
		name, n, r.Fleet.WorstP99Ms, r.Alone.Streams[0].P99Ms, r.Fleet.CPUCores, r.Fleet.CPUMicrosPerTxn, float64(r.Fleet.PeakRSSBytes)/1e6,
		r.Idle.CPUCores, float64(r.Idle.RSSBytes)/1e6)

	// The floors, with the fleet stopped.
	if r.Fleet.KafkaTxns > 0 {
		rate := float64(r.Fleet.KafkaTxns) / r.Fleet.Seconds
		var rows int64
		for _, s := range r.Fleet.Streams {
			rows += int64(s.Samples)
		}
		perTxn, err := b.kafkaFloor(ctx, "franz-go", broker.addr, rate, max(1, int(rows/r.Fleet.KafkaTxns)))
		if err != nil {
			return nil, err
		}
		r.KafkaClientCPUMicrosPerTxn = perTxn.Seconds() * 1e6
	}
	var perRow float64
	err = b.inFleetDB(ctx, fleetStream(1), func(d *db) error {
		u, err := b.fleetURL(fleetStream(1))
		if err == nil {
			perRow, err = b.recvLogicalFloorIn(ctx, d, u, load, filepath.Join(dir, "pg_recvlogical.log"), fleetStream(1).aggType())
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: pg_recvlogical: %w", name, err)
	}
	r.RecvLogicalCPUMicrosPerTxn = perRow * float64(load.RowsPerTx)
	b.logf("%s: floors per Kafka transaction: franz-go alone %.0f µs, pg_recvlogical %.0f µs", name, r.KafkaClientCPUMicrosPerTxn, r.RecvLogicalCPUMicrosPerTxn)
	if mode := b.cfg.FleetDebezium; mode != "" {
		m := testenv.ConnectStandalone
		if mode == "distributed" {
			m = testenv.ConnectDistributed
		}
		d, err := b.fleetDebezium(ctx, filepath.Join(dir, "debezium"), broker.addr, n, m)
		if err != nil {
			return nil, fmt.Errorf("%s, Debezium: %w", name, err)
		}
		r.Debezium, r.DebeziumMode = &d, mode
		b.logf("%s: Debezium (%s worker, %d connectors): worst p99 %.1f ms; %.3f cores (walstream's fleet %.3f, %.2f of it), peak RSS %.0f MB",
			name, mode, n, d.WorstP99Ms, d.CPUCores, r.Fleet.CPUCores, r.Fleet.CPUCores/d.CPUCores, float64(d.PeakRSSBytes)/1e6)
	}
	return r, b.onFleetServers(ctx, n, func(d *db, _ []fleetStream) error { return d.dropSlotsLike(ctx, fleetSlots) })
}

// fleetPhase starts walstream with streams 1 to n and measures it
// (fleetLoad).
func (b *bench) fleetPhase(ctx context.Context, dir, broker string, n int, idle *FleetIdle) (FleetPhase, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return FleetPhase{}, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return FleetPhase{}, err
	}
	args, err := b.fleetArgs(dir, broker, metricsAddr, n)
	if err != nil {
		return FleetPhase{}, err
	}
	p, err := startWalstream(b.walstream, args, filepath.Join(dir, "walstream.log"))
	if err != nil {
		return FleetPhase{}, err
	}
	defer func() {
		if err := p.stop(); err != nil {
			b.logf("%s: stopping walstream: %v", dir, err)
		}
	}()
	if err := p.waitStreams(ctx, n, time.Minute+time.Duration(n)*time.Second); err != nil {
		return FleetPhase{}, err
	}
	name := filepath.Base(filepath.Dir(dir)) + "-" + filepath.Base(dir)
	fp := fleetProc{pid: p.pid(), exited: p.exited, txns: func() (int64, error) { return committedTxns(metricsAddr) }, profile: name}
	if b.cfg.LatencyFloor {
		fp.floor = filepath.Join(dir, name+"-floor")
	}
	return b.fleetLoad(ctx, broker, n, fp, idle)
}

// fleetProc is the process under the fleet's load: walstream, or a Kafka
// Connect worker; txns counts its Kafka transactions, when it can.
type fleetProc struct {
	pid    int
	exited func() error
	txns   func() (int64, error)
	// profile names the phase in walstream's profiles of -pgo; empty for
	// a process walbench does not profile.
	profile string
	// floor, a path, names the files of Kafka's floor under the streams'
	// transactions (fleetFloors) and, its last element, their topics;
	// empty for no floor.
	floor string
}

// fleetLoad holds the load on streams 1 to n for the warm-up and the
// measured time, while p publishes them, and measures. With idle set, it
// then measures p idle.
func (b *bench) fleetLoad(ctx context.Context, broker string, n int, p fleetProc, idle *FleetIdle) (FleetPhase, error) {
	var ph FleetPhase
	var err error
	if ph.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return ph, err
	}
	topics := make([]string, n)
	for i := range topics {
		topics[i] = topicFor(fleetStream(i + 1).aggType())
	}
	t0 := time.Now()
	if err := seasonTopics(ctx, broker, b.cfg.Partitions, topics...); err != nil {
		return ph, err
	}
	b.logf("seasoned %d topics in %s", len(topics), time.Since(t0).Round(time.Millisecond))
	// Each stream's checkpoints are its Kafka transactions, for the floor.
	var cps []*checkpointLog
	defer func() {
		if len(cps) > 0 {
			_, _ = cps[0].stop() // one reader
		}
	}()
	if p.floor != "" {
		keys := make([]string, n)
		for i := range keys {
			s := fleetStream(i + 1)
			keys[i] = pipeline.StreamName(s.database(), s.slot())
		}
		if cps, err = startCheckpointLogs(broker, keys); err != nil {
			return ph, err
		}
	}
	start := time.Now()
	c, err := startTimedConsumer(broker, topics, start)
	if err != nil {
		return ph, err
	}
	defer c.close()

	writers := make([]*writer, n)
	urls := make([]string, n)
	for i := range writers {
		s := fleetStream(i + 1)
		w := b.newWriter(b.cfg.FleetLoad, start, b.cfg.LatencyFor)
		w.aggType = s.aggType()
		writers[i] = w
		if urls[i], err = b.fleetURL(s); err != nil {
			return ph, err
		}
	}
	s := newSampler()
	var txns0 int64
	txns := p.txns
	if txns == nil {
		txns = func() (int64, error) { return 0, nil }
	}
	var pgo *pgoPhase
	measureTo, err := measure(b.cfg.LatencyWarmup, func() error {
		s.sample(p.pid)
		if p.profile != "" {
			pgo = b.pgo.start(ctx, p.profile)
		}
		var err error
		txns0, err = txns()
		return err
	}, func() error {
		g, gctx := errgroup.WithContext(ctx)
		for i, w := range writers {
			g.Go(func() error { return w.run(gctx, urls[i], 1, start) })
		}
		return g.Wait()
	})
	if err != nil {
		return ph, errors.Join(err, pgo.stop())
	}
	cpu0 := s.get(p.pid).CPU
	s.sample(p.pid)
	if err := pgo.stop(); err != nil {
		return ph, err
	}
	txns1, err := txns()
	if err != nil {
		return ph, err
	}
	ws := s.get(p.pid)
	ph.Seconds = measureTo.Sub(writers[0].measureFrom).Seconds()
	ph.CPUCores = (ws.CPU - cpu0).Seconds() / ph.Seconds
	ph.KafkaTxns = txns1 - txns0
	if ph.KafkaTxns > 0 {
		ph.CPUMicrosPerTxn = (ws.CPU - cpu0).Seconds() * 1e6 / float64(ph.KafkaTxns)
	}
	ph.PeakRSSBytes = ws.HWM

	// Every row written must arrive.
	var written int64
	for _, w := range writers {
		written += w.written.Load()
	}
	if err := awaitArrival(c.received, written, p.exited); err != nil {
		return ph, err
	}
	if err := c.err(); err != nil {
		return ph, err
	}
	for i, w := range writers {
		lat, toProducer, fromProducer := c.latencies(topics[i], w.measureFrom.UnixMicro())
		sl := StreamLatency{Stream: i + 1, Samples: len(lat), P50Ms: percentile(lat, 0.50) / 1e3, P99Ms: percentile(lat, 0.99) / 1e3,
			ToProducerP99Ms: percentile(toProducer, 0.99) / 1e3, FromProducerP99Ms: percentile(fromProducer, 0.99) / 1e3, Missing: max(w.written.Load()-c.receivedOf(topics[i]), 0), Behind: w.behind.Load()}
		if len(lat) > 0 {
			sl.MaxMs = float64(slices.Max(lat)) / 1e3
		}
		ph.Streams = append(ph.Streams, sl)
		ph.WorstP99Ms = max(ph.WorstP99Ms, sl.P99Ms)
	}
	if len(cps) > 0 {
		if ph.Floors, err = b.fleetFloors(ctx, broker, p.floor, cps, c, topics, writers[0].measureFrom, measureTo); err != nil {
			return ph, fmt.Errorf("measuring Kafka's floor: %w", err)
		}
		for _, f := range ph.Floors {
			ph.FloorWorstP99Ms = max(ph.FloorWorstP99Ms, f.P99Ms)
		}
		b.logf("%s: franz-go committing the %d streams' transactions again at once: worst stream's send → visible p99 %.1f ms", filepath.Base(p.floor), n, ph.FloorWorstP99Ms)
	}
	if idle == nil {
		return ph, nil
	}
	// Idle: nothing is written; the walsenders send keepalives and each
	// stream its status updates and idle checkpoints.
	if idle.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return ph, err
	}
	s.sample(p.pid)
	cpu0, from := s.get(p.pid).CPU, time.Now()
	if err := sleepCtx(ctx, b.cfg.LatencyFor); err != nil {
		return ph, err
	}
	s.sample(p.pid)
	idle.Seconds = time.Since(from).Seconds()
	idle.CPUCores = (s.get(p.pid).CPU - cpu0).Seconds() / idle.Seconds
	idle.RSSBytes = s.get(p.pid).RSS
	return ph, p.exited()
}

// fleetDebezium runs streams 1 to n as n connectors of Debezium's Postgres
// connector with the outbox router in one Kafka Connect worker of mode, on
// the slots walstream streamed, and measures it under the same load
// (fleetLoad).
func (b *bench) fleetDebezium(ctx context.Context, dir, broker string, n int, mode testenv.ConnectMode) (FleetPhase, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return FleetPhase{}, err
	}
	logf, err := os.Create(filepath.Join(dir, "connect.log"))
	if err != nil {
		return FleetPhase{}, err
	}
	defer logf.Close()
	c, err := testenv.LaunchConnect(ctx, testenv.ConnectConfig{Mode: mode, Kafka: broker, Props: debeziumWorker,
		Heap: debeziumHeap, JVM: debeziumJVM(), Output: logf})
	if err != nil {
		return FleetPhase{}, err
	}
	defer c.Close()
	exited := func() error {
		if c.Running() {
			return nil
		}
		return fmt.Errorf("kafka connect exited; its last log lines:\n%s", c.LastLines(20))
	}
	for i := 1; i <= n; i++ {
		s := fleetStream(i)
		u, err := b.fleetURL(s)
		if err != nil {
			return FleetPhase{}, err
		}
		cfg, err := debeziumConnector(u, peer{slot: s.slot(), debezium: true, mode: mode})
		if err != nil {
			return FleetPhase{}, err
		}
		cfg["topic.prefix"] = fmt.Sprintf("walbench%d", i)
		if err := c.CreateConnector(ctx, fmt.Sprintf("walbench-%d", i), cfg); err != nil {
			return FleetPhase{}, err
		}
	}
	// Each connector streams once a probe row of its table arrives.
	probes, err := startCounter(broker, topicFor("Probe"))
	if err != nil {
		return FleetPhase{}, err
	}
	defer probes.close()
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*5*time.Second)
	for i := 1; i <= n; i++ {
		for j := int64(0); probes.count() < int64(i); j++ {
			if err := exited(); err != nil {
				return FleetPhase{}, err
			}
			if time.Now().After(deadline) {
				return FleetPhase{}, fmt.Errorf("connector %d of %d published no probe row in time", i, n)
			}
			if j%20 == 0 { // a row a second until one arrives
				if err := b.inFleetDB(ctx, fleetStream(i), func(d *db) error { return d.probe(ctx, j) }); err != nil {
					return FleetPhase{}, err
				}
			}
			time.Sleep(pollEvery)
		}
	}
	return b.fleetLoad(ctx, broker, n, fleetProc{pid: c.Process().Pid(), exited: exited}, nil)
}

// fleetArgs writes the config file of streams 1 to n and returns
// walstream's arguments: the file, the bench's connections, a metrics
// listener on metricsAddr, and -walstream-args.
func (b *bench) fleetArgs(dir, broker, metricsAddr string, n int) ([]string, error) {
	var f strings.Builder
	f.WriteString("streams:\n")
	for i := 1; i <= n; i++ {
		s := fleetStream(i)
		u, err := b.fleetURL(s)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&f, "  - pg-url: %q\n    slot: %s\n", u, s.slot())
	}
	path := filepath.Join(dir, "walstream.yaml")
	if err := os.WriteFile(path, []byte(f.String()), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return append([]string{"run", "--config", path, "--publication", benchPublication, "--table", benchTable, "--kafka-brokers", broker,
		"--create=false", "--http-addr", metricsAddr}, b.cfg.WalstreamArgs...), nil
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// committedTxns sums walstream_kafka_transactions_total{result="committed"}
// over every stream walstream's /metrics at addr reports.
func committedTxns(addr string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading walstream's metrics: %w", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "walstream_kafka_transactions_total{") || !strings.Contains(line, `result="committed"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %q: %w", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading walstream's metrics: %w", err)
	}
	return int64(sum), nil
}
