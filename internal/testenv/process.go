package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ProcessConfig says what StartProcess runs.
type ProcessConfig struct {
	Name string // for messages; the base name of Path when empty
	Path string
	Args []string
	// Env is the whole environment; nil means this process's.
	Env []string
	// Output, when set, gets a copy of everything the process writes
	// (stdout and stderr), e.g. a log file.
	Output io.Writer
	// OnLine, when set, is called with each line the process writes, in
	// order, from one goroutine. It must not call the Process's methods:
	// the process's writes wait for it.
	OnLine func(line string)
}

// Process is a running child process whose output is kept in memory, for
// waiting on log lines and for failure messages.
type Process struct {
	Name    string
	Cmd     *exec.Cmd
	Started time.Time
	done    chan struct{}

	mu   sync.Mutex
	log  bytes.Buffer
	err  error // the exit, once done is closed
	pw   *io.PipeWriter
	out  io.Writer
	line func(string)
}

// StartProcess starts a child process.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	if cfg.Name == "" {
		cfg.Name = filepath.Base(cfg.Path)
	}
	p := &Process{Name: cfg.Name, Cmd: exec.Command(cfg.Path, cfg.Args...), done: make(chan struct{}), out: cfg.Output, line: cfg.OnLine}
	p.Cmd.Env = cfg.Env
	// A child outlives no test binary, even one killed by its timeout:
	// a JVM broker left behind would hold its memory and ports.
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.Cmd.Stdout, p.Cmd.Stderr = p, p
	var lines sync.WaitGroup
	if cfg.OnLine != nil {
		pr, pw := io.Pipe()
		p.pw = pw
		lines.Add(1)
		go func() {
			defer lines.Done()
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 64<<10), 4<<20)
			for sc.Scan() {
				cfg.OnLine(sc.Text())
			}
			_, _ = io.Copy(io.Discard, pr) // a line too long for the scanner must not block the writer
		}()
	}
	p.Started = time.Now()
	if err := p.Cmd.Start(); err != nil {
		if p.pw != nil {
			p.pw.Close()
		}
		return nil, fmt.Errorf("starting %s: %w", cfg.Name, err)
	}
	go func() {
		err := p.Cmd.Wait()
		if p.pw != nil {
			p.pw.Close()
			lines.Wait()
		}
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// StartProcessT starts a child process for a test: it is killed at the
// end of the test if it still runs, its output is logged when the test
// failed, and a data race it reports fails the test.
func StartProcessT(t testing.TB, cfg ProcessConfig) *Process {
	t.Helper()
	p, err := StartProcess(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if p.reportedRace() {
			t.Errorf("%s reported a data race:\n%s", p.Name, p.Log())
		} else if t.Failed() {
			t.Logf("%s output:\n%s", p.Name, p.Log())
		}
	})
	return p
}

// reportedRace reports whether the process, built with -race, printed a
// data race.
func (p *Process) reportedRace() bool { return strings.Contains(p.Log(), "WARNING: DATA RACE") }

// saidPortTaken reports whether the process's log says, anywhere, that a
// port it would listen on was in use: a JVM's stack trace after it
// pushes it out of the last lines an error quotes.
func (p *Process) saidPortTaken() bool { return strings.Contains(p.Log(), "Address already in use") }

// Write keeps what the process writes; it is the process's stdout and
// stderr.
func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log.Write(b)
	if p.out != nil {
		_, _ = p.out.Write(b) // a full disk must not stop the process under test
	}
	if p.pw != nil {
		_, _ = p.pw.Write(b)
	}
	return len(b), nil
}

// Log returns everything the process wrote so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// LastLines returns the last n lines of the log.
func (p *Process) LastLines(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RSS is the process's resident set size in bytes.
func (p *Process) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", p.Pid()))
	if err != nil {
		return 0, fmt.Errorf("reading the memory of %s: %w", p.Name, err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("reading the memory of %s: /proc/%d/statm is %q", p.Name, p.Pid(), b)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading the memory of %s: %w", p.Name, err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit (nil for exit 0); nil while it runs.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// ExitDesc describes how the process ended, "running" while it runs.
func (p *Process) ExitDesc() string {
	if !p.Exited() {
		return "running"
	}
	return p.Cmd.ProcessState.String()
}

// KilledBy reports whether the process has exited by signal sig.
func (p *Process) KilledBy(sig syscall.Signal) bool {
	if !p.Exited() {
		return false
	}
	ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// Signal sends sig, if the process still runs.
func (p *Process) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = p.Cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// ErrKilled means a process did not exit within its time after a signal
// and was killed.
var ErrKilled = errors.New("did not exit in time and was killed")

// Stop sends sig (SIGTERM for a clean stop) and waits up to d for the
// process to exit; then it is killed and Stop returns ErrKilled. Otherwise
// it returns the process's exit, nil for exit 0. A process that has exited
// already returns its exit at once.
func (p *Process) Stop(sig syscall.Signal, d time.Duration) error {
	p.Signal(sig)
	select {
	case <-p.done:
		return p.Err()
	case <-time.After(d):
		p.Kill()
		return fmt.Errorf("%s %w (%s after %s)", p.Name, ErrKilled, d, sig)
	}
}

// Eventually polls cond every 50 ms until it holds, failing the test
// when it has not within d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Wait waits up to d for the process to exit by itself and returns its
// exit; ok is false when it still runs.
func (p *Process) Wait(d time.Duration) (exit error, ok bool) {
	select {
	case <-p.done:
		return p.Err(), true
	case <-time.After(d):
		return nil, false
	}
}

// WaitLog waits until the log contains s. It fails when the process exits
// first, d passes or ctx ends, with the last lines of the log.
func (p *Process) WaitLog(ctx context.Context, s string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !strings.Contains(p.Log(), s) {
		if p.Exited() {
			err := fmt.Errorf("%s exited (%v) before logging %q:\n%s", p.Name, p.Err(), s, p.LastLines(20))
			if p.saidPortTaken() {
				// The caller moves to another port on this error alone.
				err = fmt.Errorf("%w: %w", syscall.EADDRINUSE, err)
			}
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not log %q within %s:\n%s", p.Name, s, d, p.LastLines(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
