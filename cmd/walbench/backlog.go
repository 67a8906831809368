package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// aggTypeBacklog is the aggregate type of preloaded rows; walstream
// publishes them to outbox.event.Order.
const aggTypeBacklog = "Order"

// topicFor is walstream's default topic of an aggregate type.
func topicFor(aggType string) string { return "outbox.event." + aggType }

// pollEvery is how often a drain's end is checked and processes sampled.
const pollEvery = 50 * time.Millisecond

// Drain is one client draining the backlog of one slot.
type Drain struct {
	Tool    string  `json:"tool"`
	Seconds float64 `json:"seconds"` // from starting the process to done
	// StartupSeconds is walstream's time from exec to streaming: fencing,
	// reading the checkpoint, acquiring the slot. Included in Seconds.
	StartupSeconds float64 `json:"startup_seconds,omitempty"`
	RowsPerSec     float64 `json:"rows_per_sec"`
	WALMBPerSec    float64 `json:"wal_mb_per_sec"`    // WAL between the slots' start and the end LSN, per second
	RecordMBPerSec float64 `json:"record_mb_per_sec"` // key, value and id header bytes, per second
	// CPUSeconds is the tool's own process; the walsender and the broker
	// are counted apart.
	CPUSeconds          float64 `json:"cpu_seconds"`
	CPUMicrosPerRow     float64 `json:"cpu_us_per_row"`
	PeakRSSBytes        int64   `json:"peak_rss_bytes"`
	WalsenderCPUSeconds float64 `json:"walsender_cpu_seconds"`
	BrokerCPUSeconds    float64 `json:"broker_cpu_seconds,omitempty"`
	// RecordsCounted is what a read_committed consumer found in the topic
	// after the drain (walstream only); it must equal the rows.
	RecordsCounted int64 `json:"records_counted,omitempty"`
	Machine        Quiet `json:"machine"`
}

// BacklogRun is one run of the backlog or huge-transaction scenario: the
// same preloaded WAL drained by pg_recvlogical and then by walstream.
type BacklogRun struct {
	Scenario     string  `json:"scenario"`
	Run          int     `json:"run"`
	Profiled     bool    `json:"profiled"`
	Rows         int64   `json:"rows"`
	RowsPerTx    int64   `json:"rows_per_tx"`
	PayloadBytes float64 `json:"payload_bytes_avg"`
	RecordBytes  int64   `json:"record_bytes"`
	WALBytes     int64   `json:"wal_bytes"`
	LoadSeconds  float64 `json:"load_seconds"`
	StartLSN     string  `json:"start_lsn"`
	EndLSN       string  `json:"end_lsn"`
	Ceiling      Drain   `json:"pg_recvlogical"`
	GoRecv       Drain   `json:"pgoutput_recv"`
	Walstream    Drain   `json:"walstream"`
	// WalstreamAvro is walstream under the Avro converter (-avro).
	WalstreamAvro *Drain `json:"walstream_avro,omitempty"`
	// Ratio is walstream's rows/s over pg_recvlogical's in this run, and
	// RatioGoRecv over the Go receive-only client's; RatioAvro is the
	// Avro drain's over walstream's.
	Ratio       float64           `json:"ratio"`
	RatioGoRecv float64           `json:"ratio_pgoutput_recv"`
	RatioAvro   float64           `json:"ratio_avro,omitempty"`
	Profiles    map[string]string `json:"profiles,omitempty"`
}

// backlogRun preloads rows (perTx per transaction) while three slots
// exist, then drains one with pg_recvlogical (the ceiling), one with the Go
// receive-only client and the last with walstream, one after the other.
func (b *bench) backlogRun(ctx context.Context, scenario string, run int, rows, perTx int64, profile bool) (*BacklogRun, error) {
	name := fmt.Sprintf("%s-%d", scenario, run)
	if scenario == ScenarioHuge {
		name = fmt.Sprintf("%s-%d-%d", scenario, rows, run)
	}
	if profile {
		name = scenario + "-profile"
	}
	dir := filepath.Join(b.cfg.OutDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	r := &BacklogRun{Scenario: scenario, Run: run, Profiled: profile, Rows: rows, RowsPerTx: perTx}
	b.logf("%s: preloading %d rows, %d per transaction", name, rows, perTx)
	if err := b.db.reset(ctx); err != nil {
		return nil, err
	}
	start, err := b.db.createSlot(ctx, slotRecvLogical)
	if err != nil {
		return nil, err
	}
	slots := []string{slotGoRecv, slotWalstream}
	if b.cfg.Avro {
		slots = append(slots, slotWalstreamAvro)
	}
	for _, slot := range slots {
		if _, err := b.db.createSlot(ctx, slot); err != nil {
			return nil, err
		}
	}
	lctx, cancel := context.WithTimeout(ctx, b.cfg.DrainTimeout)
	t0 := time.Now()
	end, err := b.db.load(lctx, 1, rows, perTx, b.pad, aggTypeBacklog)
	cancel()
	if err != nil {
		return nil, err
	}
	r.LoadSeconds = time.Since(t0).Seconds()
	n, bytes, payload, err := b.db.loaded(ctx, aggTypeBacklog)
	if err != nil {
		return nil, err
	}
	if n != rows {
		return nil, fmt.Errorf("%s: the outbox holds %d rows after loading %d", name, n, rows)
	}
	r.StartLSN, r.EndLSN, r.WALBytes, r.RecordBytes, r.PayloadBytes = start.String(), end.String(), int64(end-start), bytes, payload
	b.logf("%s: loaded in %.1fs, %d MB of WAL to %s", name, r.LoadSeconds, r.WALBytes>>20, end)

	// The broker is idle until walstream starts; starting it now keeps its
	// start-up out of the quiet window before the measured drains.
	topics := []string{topicFor(aggTypeBacklog)}
	if b.cfg.Avro {
		topics = append(topics, avroTopicPrefix+aggTypeBacklog)
	}
	broker, err := b.startPhaseBroker(ctx, name, filepath.Join(b.workDir, name+"-kafka"), dir, filepath.Join(dir, "broker.log"), topics...)
	if err != nil {
		return nil, err
	}
	defer b.closeBroker(name, broker)

	var ceilingProf, goRecvProf, walstreamProf *profiler
	if profile {
		ceilingProf = &profiler{dir: dir, prefix: "pg_recvlogical", perf: b.perf}
		goRecvProf = &profiler{dir: dir, prefix: "pgoutput-recv", perf: b.perf}
		walstreamProf = &profiler{dir: dir, prefix: "walstream", perf: b.perf, broker: broker}
	}
	if r.Ceiling, err = b.drainClient(ctx, r, "pg_recvlogical", slotRecvLogical, b.recvLogicalCmd(end), filepath.Join(dir, "pg_recvlogical.log"), ceilingProf); err != nil {
		return nil, err
	}
	b.logf("%s: pg_recvlogical %.0f rows/s", name, r.Ceiling.RowsPerSec)
	if r.GoRecv, err = b.drainClient(ctx, r, "pgoutput-recv", slotGoRecv, b.goRecvCmd(end), filepath.Join(dir, "pgoutput-recv.log"), goRecvProf); err != nil {
		return nil, err
	}
	b.logf("%s: Go receive-only %.0f rows/s", name, r.GoRecv.RowsPerSec)
	var walstreamPID int
	plainDrain := func() (err error) {
		plain := walstreamDrain{tool: "walstream", slot: slotWalstream, topic: topicFor(aggTypeBacklog), args: b.walstreamArgs(broker.addr)}
		r.Walstream, walstreamPID, err = b.drainWalstream(ctx, r, end, broker, filepath.Join(dir, "walstream.log"), walstreamProf, plain)
		return err
	}
	avroDrain := func() error {
		avro := walstreamDrain{tool: "walstream-avro", slot: slotWalstreamAvro, topic: avroTopicPrefix + aggTypeBacklog, args: b.avroArgs(broker.addr)}
		d, _, err := b.drainWalstream(ctx, r, end, broker, filepath.Join(dir, "walstream-avro.log"), nil, avro)
		r.WalstreamAvro = &d
		return err
	}
	// With -avro, even runs drain the Avro slot first, so that neither
	// drain always finds the broker and the page cache warmed by the other;
	// and the broker is warmed before either, with the transactions a
	// drain commits: a JVM broker's first seconds under load are slower,
	// which would charge whichever drain comes first.
	if b.cfg.Avro {
		b.logf("%s: warming the broker for 20 s", name)
		cmd := exec.CommandContext(ctx, b.kafkaTxnExe, kafkaTxnCommand, "-broker", broker.addr, "-rate", "100", "-records", "500", "-for", "20s")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("warming the broker with %s: %w: %s", kafkaTxnCommand, err, out)
		}
	}
	order := []func() error{plainDrain}
	if b.cfg.Avro && run%2 == 0 {
		order = []func() error{avroDrain, plainDrain}
	} else if b.cfg.Avro {
		order = append(order, avroDrain)
	}
	for _, drain := range order {
		if err := drain(); err != nil {
			return nil, err
		}
	}
	if d := r.WalstreamAvro; d != nil {
		r.RatioAvro = d.RowsPerSec / r.Walstream.RowsPerSec
		b.logf("%s: walstream with Avro %.0f rows/s (%.2f of walstream's), %.2f µs CPU per row", name, d.RowsPerSec, r.RatioAvro, d.CPUMicrosPerRow)
	}
	r.Ratio = r.Walstream.RowsPerSec / r.Ceiling.RowsPerSec
	r.RatioGoRecv = r.Walstream.RowsPerSec / r.GoRecv.RowsPerSec
	b.logf("%s: walstream %.0f rows/s (%.2f of pg_recvlogical), %.2f µs CPU per row, peak RSS %d MB",
		name, r.Walstream.RowsPerSec, r.Ratio, r.Walstream.CPUMicrosPerRow, r.Walstream.PeakRSSBytes>>20)
	if profile {
		r.Profiles = make(map[string]string)
		if err := ceilingProf.reports(ctx, nil, r.Profiles); err != nil {
			return nil, err
		}
		if err := goRecvProf.reports(ctx, nil, r.Profiles); err != nil {
			return nil, err
		}
		if err := walstreamProf.reports(ctx, map[string]int{"walstream": walstreamPID, "broker": broker.pid()}, r.Profiles); err != nil {
			return nil, err
		}
	}
	return r, b.db.dropSlots(ctx)
}

// drainClient runs a client that drains a slot to end and exits by
// itself: pg_recvlogical with --endpos stops at the first message at or
// past end, which is the last transaction's COMMIT (whose position is the
// commit's end LSN) or a keepalive past it; walbench recv does the same.
// Its CPU time and peak RSS come from its rusage, the walsender's from
// /proc, sampled every 50ms while it lives.
func (b *bench) drainClient(ctx context.Context, r *BacklogRun, tool, slot string, cmdline []string, logPath string, pr *profiler) (Drain, error) {
	d := Drain{Tool: tool}
	var err error
	if d.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return d, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return d, fmt.Errorf("creating %s: %w", logPath, err)
	}
	defer logf.Close()
	cctx, cancel := context.WithTimeout(ctx, b.cfg.DrainTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, cmdline[0], cmdline[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	s := newSampler()
	var walsender int
	if err := pr.start(ctx); err != nil {
		return d, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return d, errors.Join(fmt.Errorf("starting %s: %w", tool, err), pr.stop(ctx))
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			d.Seconds = time.Since(t0).Seconds()
			if perr := pr.stop(ctx); err == nil {
				err = perr
			}
			if err != nil {
				return d, fmt.Errorf("running %s (log %s): %w", tool, logPath, err)
			}
			d.CPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				d.PeakRSSBytes = ru.Maxrss << 10
			}
			d.WalsenderCPUSeconds = s.get(walsender).CPU.Seconds()
			d.fill(r)
			return d, nil
		case <-tick.C:
			if walsender == 0 {
				if _, walsender, err = b.db.slotState(ctx, slot); err != nil {
					return d, err
				}
			}
			s.sample(walsender)
		}
	}
}

// recvLogicalCmd drains the pg_recvlogical slot to end, or with end 0
// until stopped, into /dev/null; pgoutput needs the protocol version and
// the publication.
func (b *bench) recvLogicalCmd(end pglogrepl.LSN) []string {
	return b.recvLogicalCmdOn(b.pg.url, end)
}

// recvLogicalCmdOn is recvLogicalCmd in the database at url.
func (b *bench) recvLogicalCmdOn(url string, end pglogrepl.LSN) []string {
	args := []string{b.cfg.RecvLogical, "-d", url, "--slot", slotRecvLogical, "--start", "--no-loop",
		"--plugin", "pgoutput", "-o", "proto_version=1", "-o", "publication_names=" + benchPublication, "-f", "/dev/null"}
	if end != 0 {
		args = append(args, "--endpos", end.String())
	}
	return args
}

// goRecvCmd drains the Go receiver's slot to end.
func (b *bench) goRecvCmd(end pglogrepl.LSN) []string {
	return []string{b.recvExe, recvCommand, "-pg-url", b.pg.url, "-slot", slotGoRecv, "-publication", benchPublication, "-endpos", end.String()}
}

// drainWalstream runs walstream on its slot until the slot's
// confirmed_flush_lsn reaches end. walstream confirms a position only after
// the Kafka transaction holding everything before it has committed, so at
// that instant every row is visible to read_committed consumers; a count of
// the topic afterwards checks that.
// walstreamDrain is one walstream drain of a backlog run: its slot, the
// topic its records go to and its command line.
type walstreamDrain struct {
	tool, slot, topic string
	args              []string
}

func (b *bench) drainWalstream(ctx context.Context, r *BacklogRun, end pglogrepl.LSN, broker *brokerProc, logPath string, pr *profiler, w walstreamDrain) (d Drain, pid int, err error) {
	d = Drain{Tool: w.tool}
	if d.Machine, err = waitQuiet(ctx, b.cfg.MaxLoad, b.cfg.QuietTimeout, b.log); err != nil {
		return d, 0, err
	}
	s := newSampler()
	s.sample(broker.pid())
	brokerCPU0 := s.get(broker.pid()).CPU
	if err := pr.start(ctx); err != nil {
		return d, 0, err
	}
	stopped := false
	defer func() {
		if !stopped {
			err = errors.Join(err, pr.stop(ctx))
		}
	}()
	p, err := startWalstream(b.walstream, w.args, logPath)
	if err != nil {
		return d, 0, err
	}
	defer func() {
		if err := p.stop(); err != nil {
			b.logf("stopping walstream: %v", err)
		}
	}()
	pgo := b.pgo.start(ctx, fmt.Sprintf("%s-%d-%d", r.Scenario, r.Run, r.Rows))
	defer func() { err = errors.Join(err, pgo.stop()) }()
	deadline := time.Now().Add(b.cfg.DrainTimeout)
	var walsender int
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return d, 0, ctx.Err()
		case <-tick.C:
		}
		confirmed, active, err := b.db.slotState(ctx, w.slot)
		if err != nil {
			return d, 0, err
		}
		if active != 0 {
			walsender = active
		}
		s.sample(p.pid())
		s.sample(walsender)
		if confirmed >= end {
			break
		}
		if err := p.exited(); err != nil {
			return d, 0, err
		}
		if time.Now().After(deadline) {
			return d, 0, fmt.Errorf("slot %s confirmed %s, not %s, after %s (log %s)", w.slot, confirmed, end, b.cfg.DrainTimeout, logPath)
		}
	}
	d.Seconds = time.Since(p.started()).Seconds()
	s.sample(p.pid())
	s.sample(broker.pid())
	perr := pgo.stop()
	if pgo = nil; perr != nil {
		return d, 0, perr
	}
	stopped = true
	if err := pr.stop(ctx); err != nil {
		return d, 0, err
	}
	if at := p.streamingSince(); !at.IsZero() {
		d.StartupSeconds = at.Sub(p.started()).Seconds()
	}
	ws := s.get(p.pid())
	d.CPUSeconds, d.PeakRSSBytes = ws.CPU.Seconds(), ws.HWM
	d.WalsenderCPUSeconds = s.get(walsender).CPU.Seconds()
	d.BrokerCPUSeconds = (s.get(broker.pid()).CPU - brokerCPU0).Seconds()
	d.fill(r)
	if d.RecordsCounted, err = countRecords(ctx, broker.addr, w.topic); err != nil {
		return d, 0, err
	}
	if d.RecordsCounted != r.Rows {
		return d, 0, fmt.Errorf("a read_committed consumer counted %d records in %s, want %d", d.RecordsCounted, w.topic, r.Rows)
	}
	return d, p.pid(), nil
}

// fill derives the rates from Seconds and CPUSeconds.
func (d *Drain) fill(r *BacklogRun) {
	d.RowsPerSec = float64(r.Rows) / d.Seconds
	d.WALMBPerSec = float64(r.WALBytes) / 1e6 / d.Seconds
	d.RecordMBPerSec = float64(r.RecordBytes) / 1e6 / d.Seconds
	d.CPUMicrosPerRow = d.CPUSeconds * 1e6 / float64(r.Rows)
}

// createTopics creates topics before walstream writes to them, as an
// operator would.
func createTopics(ctx context.Context, broker string, partitions int, topics ...string) error {
	return createTopicsWith(ctx, broker, partitions, nil, topics...)
}

// createTopicsWith is createTopics with the topics' configs.
func createTopicsWith(ctx context.Context, broker string, partitions int, configs map[string]*string, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopics(cctx, int32(partitions), 1, configs, topics...)
	if err != nil {
		return fmt.Errorf("creating topics %v: %w", topics, err)
	}
	if err := resp.Error(); err != nil {
		return fmt.Errorf("creating topics %v: %w", topics, err)
	}
	return nil
}

// countRecords counts the records of topic a read_committed consumer sees
// up to the topic's last stable offsets.
func countRecords(ctx context.Context, broker, topic string) (int64, error) {
	var n int64
	err := testenv.ReadCommitted(ctx, broker, topic, func(*kgo.Record) { n++ })
	return n, err
}
