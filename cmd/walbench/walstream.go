package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// walstreamProc is a running walstream.
type walstreamProc struct {
	p      *testenv.Process
	mu     sync.Mutex
	stream time.Time // when it logged that it streams; zero before
	// streams counts the lines saying a stream streams: one per stream of
	// a streams: list, again after each new session.
	streams int
}

// walstreamArgs are the settings of every measured walstream: its
// defaults, with the bench's connections and names and no HTTP listener.
// -walstream-args come last and override them; the report names them.
func (b *bench) walstreamArgs(broker string) []string {
	args := []string{"run",
		"--pg-url", b.pg.url,
		"--kafka-brokers", broker,
		"--slot", slotWalstream,
		"--publication", benchPublication,
		"--table", benchTable,
		"--create=false",
		"--http-addr", "",
	}
	for _, a := range b.cfg.WalstreamArgs {
		if b.registry != nil {
			a = strings.ReplaceAll(a, registryArg, b.registry.URL())
		}
		args = append(args, a)
	}
	return args
}

// registryArg in -walstream-args stands for the schema registry's URL.
const registryArg = "{registry}"

// avroArgs are the arguments of the -avro drain: walstream's, on a slot
// and topics of its own, with Avro keys and values. A later flag wins, so
// they override -walstream-args.
func (b *bench) avroArgs(broker string) []string {
	return append(b.walstreamArgs(broker), "--slot", slotWalstreamAvro, "--converter", "avro",
		"--schema-registry-url", b.registry.URL(), "--topic-template", avroTopicPrefix+"${routedByValue}")
}

// avroTopicPrefix names the -avro drain's topics.
const avroTopicPrefix = "outbox.avro."

// streamingPhase makes walstream's slot and starts the phase's broker
// with its topics and walstream streaming into it; stop ends both.
func (b *bench) streamingPhase(ctx context.Context, name, dir string, topics ...string) (*brokerProc, *walstreamProc, func(), error) {
	if _, err := b.db.createSlot(ctx, slotWalstream); err != nil {
		return nil, nil, nil, err
	}
	broker, err := b.startPhaseBroker(ctx, name, filepath.Join(b.workDir, name+"-kafka"), dir, filepath.Join(dir, "broker.log"), topics...)
	if err != nil {
		return nil, nil, nil, err
	}
	p, stop, err := b.startStreaming(ctx, name, broker.addr, dir)
	if err != nil {
		b.closeBroker(name, broker)
		return nil, nil, nil, err
	}
	return broker, p, func() { stop(); b.closeBroker(name, broker) }, nil
}

// startStreaming starts walstream on the broker at addr, with extra
// arguments besides the bench's, its log in dir, and waits until it
// streams. stop, which the caller defers, stops it and logs what fails.
func (b *bench) startStreaming(ctx context.Context, name, addr, dir string, extra ...string) (p *walstreamProc, stop func(), err error) {
	p, err = startWalstream(b.walstream, append(b.walstreamArgs(addr), extra...), filepath.Join(dir, "walstream.log"))
	if err != nil {
		return nil, nil, err
	}
	stop = func() {
		if err := p.stop(); err != nil {
			b.logf("%s: stopping walstream: %v", name, err)
		}
	}
	if err := p.waitStreaming(ctx, time.Minute); err != nil {
		stop()
		return nil, nil, err
	}
	return p, stop, nil
}

// startWalstream starts walstream, logging to logPath.
func startWalstream(bin string, args []string, logPath string) (*walstreamProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating walstream log: %w", err)
	}
	w := &walstreamProc{}
	w.p, err = testenv.StartProcess(testenv.ProcessConfig{Name: "walstream", Path: bin, Args: args, Output: logf,
		OnLine: func(line string) {
			if strings.Contains(line, testenv.StreamingLine) {
				w.mu.Lock()
				if w.stream.IsZero() {
					w.stream = time.Now()
				}
				w.streams++
				w.mu.Unlock()
			}
		}})
	if err != nil {
		logf.Close()
		return nil, err
	}
	go func() { <-w.p.Done(); logf.Close() }()
	return w, nil
}

func (w *walstreamProc) pid() int { return w.p.Pid() }

func (w *walstreamProc) started() time.Time { return w.p.Started }

// streamingSince is when walstream logged that it streams, zero before.
func (w *walstreamProc) streamingSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stream
}

// exited returns an error naming the exit and the last log lines once the
// process has ended, nil while it runs.
func (w *walstreamProc) exited() error {
	if !w.p.Exited() {
		return nil
	}
	return fmt.Errorf("walstream exited (%v); its last log lines:\n%s", w.p.Err(), w.p.LastLines(20))
}

// waitStreaming waits until walstream holds the slot and streams.
func (w *walstreamProc) waitStreaming(ctx context.Context, within time.Duration) error {
	return w.p.WaitLog(ctx, testenv.StreamingLine, within)
}

// waitStreams waits until n streams of a streams: list stream.
func (w *walstreamProc) waitStreams(ctx context.Context, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		w.mu.Lock()
		streams := w.streams
		w.mu.Unlock()
		switch {
		case streams >= n:
			return nil
		case w.p.Exited():
			return w.exited()
		case time.Now().After(deadline):
			return fmt.Errorf("%d of %d streams stream after %s; walstream's last log lines:\n%s", streams, n, within, w.p.LastLines(20))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// stop sends SIGTERM and waits for walstream to exit cleanly; it is
// killed after 30s. A walstream that exited before is reported by exited.
func (w *walstreamProc) stop() error {
	if w.p.Exited() {
		return nil
	}
	if err := w.p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		return fmt.Errorf("stopping walstream: %w", err)
	}
	return nil
}
