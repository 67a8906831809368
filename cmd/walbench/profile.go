package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// perfRecorder is `perf record` sampling every CPU, with call graphs, for
// the duration of one drain.
type perfRecorder struct {
	cmd  *exec.Cmd
	done chan error
}

// perfUsable reports whether perf can sample here: VMs often lack
// hardware counters, so walbench samples the cpu-clock software event.
func perfUsable(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return exec.CommandContext(cctx, "perf", "record", "-e", "cpu-clock", "-o", "/dev/null", "--", "true").Run() == nil
}

// startPerf starts sampling all CPUs at 499 Hz into path.
func startPerf(path string) (*perfRecorder, error) {
	logf, err := os.Create(path + ".log")
	if err != nil {
		return nil, fmt.Errorf("creating perf log: %w", err)
	}
	p := &perfRecorder{done: make(chan error, 1)}
	p.cmd = exec.Command("perf", "record", "-a", "-g", "-F", "499", "-e", "cpu-clock", "-o", path)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting perf record: %w", err)
	}
	go func() {
		p.done <- p.cmd.Wait()
		logf.Close()
	}()
	time.Sleep(300 * time.Millisecond) // let it open its events before the phase starts
	return p, nil
}

// stop ends the recording and waits for perf to write its file. A nil
// recorder does nothing.
func (p *perfRecorder) stop() error {
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return fmt.Errorf("waiting for perf record: %w", err)
		}
		return nil
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		return errors.New("perf record did not stop within 60s of SIGINT; killed it")
	}
}

// profileReports turns a profiled run's recordings into text reports
// beside them and returns their paths by name.
func (b *bench) profileReports(ctx context.Context, dir string, broker *brokerProc, walstreamPID int) (map[string]string, error) {
	out := make(map[string]string)
	report := func(name string, cmd ...string) error {
		path := filepath.Join(dir, name+".txt")
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		c := exec.CommandContext(cctx, cmd[0], cmd[1:]...)
		text, err := c.Output()
		if err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				text = append(text, exit.Stderr...)
			}
			return fmt.Errorf("running %v: %w: %s", cmd, err, text)
		}
		if err := os.WriteFile(path, text, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		out[name] = path
		return nil
	}
	// pprof reads the broker's profile; go is on PATH, since walbench is
	// run with go run.
	prof, err := broker.stopProfile(ctx)
	if err != nil {
		return nil, err
	}
	if err := report("broker-pprof-top", "go", "tool", "pprof", "-top", "-nodecount=40", prof); err != nil {
		return nil, err
	}
	if err := report("broker-pprof-top-cum", "go", "tool", "pprof", "-top", "-cum", "-nodecount=40", prof); err != nil {
		return nil, err
	}
	if !b.perf {
		return out, nil
	}
	perfReport := func(data string, args ...string) []string {
		return append([]string{"perf", "report", "-i", data, "--stdio", "--percentage", "relative"}, args...)
	}
	ceiling := filepath.Join(dir, "perf-pg_recvlogical.data")
	walstream := filepath.Join(dir, "perf-walstream.data")
	reports := []struct {
		name string
		cmd  []string
	}{
		{"perf-pg_recvlogical-by-process", perfReport(ceiling, "--no-children", "--sort", "comm,pid", "-g", "none", "--percent-limit", "0.5")},
		{"perf-pg_recvlogical-postgres-self", perfReport(ceiling, "--no-children", "--comm", "postgres", "--sort", "dso,sym", "-g", "none", "--percent-limit", "0.5")},
		{"perf-walstream-by-process", perfReport(walstream, "--no-children", "--sort", "comm,pid", "-g", "none", "--percent-limit", "0.5")},
		{"perf-walstream-self", perfReport(walstream, "--no-children", "--pid", strconv.Itoa(walstreamPID), "--sort", "sym", "-g", "none", "--percent-limit", "0.5")},
		{"perf-walstream-cumulative", perfReport(walstream, "--children", "--pid", strconv.Itoa(walstreamPID), "--sort", "sym", "-g", "none", "--percent-limit", "3")},
		{"perf-walstream-postgres-self", perfReport(walstream, "--no-children", "--comm", "postgres", "--sort", "dso,sym", "-g", "none", "--percent-limit", "0.5")},
		{"perf-broker-self", perfReport(walstream, "--no-children", "--pid", strconv.Itoa(broker.pid()), "--sort", "sym", "-g", "none", "--percent-limit", "0.5")},
	}
	for _, r := range reports {
		if err := report(r.name, r.cmd...); err != nil {
			return nil, err
		}
	}
	return out, nil
}
