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

// textReport runs a reporting command and saves its output as
// dir/name.txt, returning that path.
func textReport(ctx context.Context, dir, name string, cmd ...string) (string, error) {
	path := filepath.Join(dir, name+".txt")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	text, err := exec.CommandContext(cctx, cmd[0], cmd[1:]...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			text = append(text, exit.Stderr...)
		}
		return "", fmt.Errorf("running %v: %w: %s", cmd, err, text)
	}
	if err := os.WriteFile(path, text, 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// perfReports writes text reports of one perf recording into dir, named
// prefix-*: CPU by process, Postgres by function, and for each named
// process its functions by self time and by cumulative time (the latter
// needs the call graphs Go's frame pointers give).
func perfReports(ctx context.Context, dir, prefix, data string, pids map[string]int, out map[string]string) error {
	perf := func(args ...string) []string {
		return append([]string{"perf", "report", "-i", data, "--stdio", "--percentage", "relative", "-g", "none"}, args...)
	}
	reports := map[string][]string{
		prefix + "-by-process":    perf("--no-children", "--sort", "comm", "--percent-limit", "0.5"),
		prefix + "-postgres-self": perf("--no-children", "--comm", "postgres", "--sort", "dso,sym", "--percent-limit", "0.5"),
	}
	for name, pid := range pids {
		reports[prefix+"-"+name+"-self"] = perf("--no-children", "--pid", strconv.Itoa(pid), "--sort", "sym", "--percent-limit", "0.5")
		reports[prefix+"-"+name+"-cumulative"] = perf("--children", "--pid", strconv.Itoa(pid), "--sort", "sym", "--percent-limit", "3")
	}
	for name, cmd := range reports {
		path, err := textReport(ctx, dir, name, cmd...)
		if err != nil {
			return err
		}
		out[name] = path
	}
	return nil
}

// pprofReports writes `go tool pprof -top` of a Go CPU profile, by self
// and by cumulative time, into dir.
func pprofReports(ctx context.Context, dir, prefix, prof string, out map[string]string) error {
	for name, args := range map[string][]string{
		prefix + "-pprof-top":     {"-top", "-nodecount=40"},
		prefix + "-pprof-top-cum": {"-top", "-cum", "-nodecount=40"},
	} {
		path, err := textReport(ctx, dir, name, append(append([]string{"go", "tool", "pprof"}, args...), prof)...)
		if err != nil {
			return err
		}
		out[name] = path
	}
	return nil
}

// profiler profiles one measured window: perf over every CPU when perf
// can sample here, and the broker's Go CPU profile when there is a
// broker. A nil profiler does nothing, so unprofiled runs pass nil.
type profiler struct {
	dir, prefix string
	perf        bool
	broker      *brokerProc
	rec         *perfRecorder
	brokerProf  string
}

func (p *profiler) perfData() string { return filepath.Join(p.dir, p.prefix+"-perf.data") }

// start begins profiling, just before the measured process starts.
func (p *profiler) start(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if p.perf {
		var err error
		if p.rec, err = startPerf(p.perfData()); err != nil {
			return err
		}
	}
	if p.broker != nil && p.broker.profiles() {
		if err := p.broker.startProfile(ctx); err != nil {
			return errors.Join(err, p.rec.stop())
		}
	}
	return nil
}

// stop ends profiling at the end of the measured window.
func (p *profiler) stop(ctx context.Context) error {
	if p == nil {
		return nil
	}
	err := p.rec.stop()
	p.rec = nil
	if p.broker != nil && p.broker.profiles() {
		prof, perr := p.broker.stopProfile(ctx)
		p.brokerProf = prof
		err = errors.Join(err, perr)
	}
	return err
}

// reports writes the text reports of the window, with a report per named
// process, and adds their paths to out.
func (p *profiler) reports(ctx context.Context, pids map[string]int, out map[string]string) error {
	if p == nil {
		return nil
	}
	if p.brokerProf != "" {
		if err := pprofReports(ctx, p.dir, p.prefix+"-broker", p.brokerProf, out); err != nil {
			return err
		}
	}
	if !p.perf {
		return nil
	}
	return perfReports(ctx, p.dir, p.prefix+"-perf", p.perfData(), pids, out)
}
