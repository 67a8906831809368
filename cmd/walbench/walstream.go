package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// walstreamProc is a running walstream.
type walstreamProc struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	mu      sync.Mutex
	err     error     // the process's exit, once done is closed
	stream  time.Time // when it logged that it streams; zero before
	tail    []string  // its last log lines, for error messages
}

// walstreamArgs are the settings of every measured walstream: defaults,
// except no HTTP listener and a short status interval (see
// DefaultStatusInterval). -walstream-args come last and override them.
func (b *bench) walstreamArgs(broker string) []string {
	return append([]string{"run",
		"--pg-url", b.pg.url,
		"--kafka-brokers", broker,
		"--slot", slotWalstream,
		"--publication", benchPublication,
		"--table", benchTable,
		"--create=false",
		"--http-addr", "",
		"--status-interval", b.cfg.StatusInterval.String(),
	}, b.cfg.WalstreamArgs...)
}

// startWalstream starts walstream, logging to logPath.
func startWalstream(bin string, args []string, logPath string) (*walstreamProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating walstream log: %w", err)
	}
	p := &walstreamProc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout = logf
	out, err := p.cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("piping walstream's log: %w", err)
	}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting walstream: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			p.mu.Lock()
			if p.stream.IsZero() && strings.Contains(line, "msg=streaming") {
				p.stream = time.Now()
			}
			if p.tail = append(p.tail, line); len(p.tail) > 20 {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
		}
		err := p.cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *walstreamProc) pid() int { return p.cmd.Process.Pid }

// streamingSince is when walstream logged that it streams, zero before.
func (p *walstreamProc) streamingSince() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stream
}

// exited returns an error naming the exit and the last log lines once the
// process has ended, nil while it runs.
func (p *walstreamProc) exited() error {
	select {
	case <-p.done:
	default:
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("walstream exited (%v); its last log lines:\n%s", p.err, strings.Join(p.tail, "\n"))
}

// waitStreaming waits until walstream holds the slot and streams.
func (p *walstreamProc) waitStreaming(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for p.streamingSince().IsZero() {
		if err := p.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("walstream did not stream within %s", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// stop sends SIGTERM and waits for walstream to exit cleanly; it is
// killed after 30s.
func (p *walstreamProc) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("walstream did not stop within 30s of SIGTERM; killed it")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("walstream exited uncleanly: %w", p.err)
	}
	return nil
}
