package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// which is 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procSample is what /proc says of a process at one instant.
type procSample struct {
	CPU time.Duration // utime + stime
	HWM int64         // VmHWM: peak resident set, bytes
	RSS int64         // VmRSS, bytes
}

// readProc reads a process's CPU time and memory from /proc.
func readProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("reading /proc/%d/stat: %w", pid, err)
	}
	// The command name may hold spaces; the fields after it do not.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("parsing /proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("parsing utime %q and stime %q of /proc/%d/stat", f[11], f[12], pid)
	}
	s.CPU = time.Duration(utime+stime) * clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("reading /proc/%d/status: %w", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "VmHWM" && name != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return s, fmt.Errorf("parsing %s %q of /proc/%d/status: %w", name, val, pid, err)
		}
		if name == "VmHWM" {
			s.HWM = kb << 10
		} else {
			s.RSS = kb << 10
		}
	}
	return s, nil
}

// sampler samples processes every interval and keeps the last sample of
// each, so that a process that exits (a walsender whose client left) still
// has figures, at most one interval old.
type sampler struct {
	mu   sync.Mutex
	last map[int]procSample
}

func newSampler() *sampler { return &sampler{last: make(map[int]procSample)} }

// sample reads pid now and remembers it; a process that has gone keeps its
// last sample.
func (s *sampler) sample(pid int) {
	if pid <= 0 {
		return
	}
	p, err := readProc(pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.last[pid] = p
	s.mu.Unlock()
}

func (s *sampler) get(pid int) procSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[pid]
}

// loadAvg is the 1-minute load average.
func loadAvg() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, fmt.Errorf("reading /proc/loadavg: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("parsing /proc/loadavg %q", b)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("parsing /proc/loadavg %q: %w", b, err)
	}
	return v, nil
}

// cpuBusy is the fraction of all CPUs' time that was not idle over d,
// from /proc/stat.
func cpuBusy(ctx context.Context, d time.Duration) (float64, error) {
	read := func() (busy, total int64, err error) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0, fmt.Errorf("reading /proc/stat: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "cpu" {
			return 0, 0, fmt.Errorf("parsing /proc/stat %q", line)
		}
		for i, v := range f[1:] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("parsing /proc/stat %q: %w", line, err)
			}
			total += n
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
		return busy, total, nil
	}
	b0, t0, err := read()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	b1, t1, err := read()
	if err != nil {
		return 0, err
	}
	if t1 == t0 {
		return 0, nil
	}
	return float64(b1-b0) / float64(t1-t0), nil
}

// chaosProcs lists running processes of walstream's chaos suite (the
// chaos.test binary or `go test ./chaos`), which load the machine.
func chaosProcs() []string {
	var found []string
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		isChaos := filepath.Base(args[0]) == "chaos.test" ||
			(filepath.Base(args[0]) == "go" && slices.ContainsFunc(args[1:], func(a string) bool {
				return a == "./chaos" || strings.HasSuffix(a, "/chaos")
			}))
		if isChaos {
			pid := strings.TrimSuffix(strings.TrimPrefix(p, "/proc/"), "/cmdline")
			found = append(found, pid+" "+strings.Join(args, " "))
		}
	}
	return found
}

// Quiet is the state of the machine when a measured phase began.
type Quiet struct {
	Load1 float64 `json:"load1"` // 1-minute load average at the start
	// Busy is the fraction of CPU time not idle over 2s just before.
	Busy   float64 `json:"cpu_busy"`
	Waited float64 `json:"waited_seconds"`
	// Quiet is false when the wait timed out and the phase ran anyway.
	Quiet bool     `json:"quiet"`
	Chaos []string `json:"chaos_processes,omitempty"`
}

// waitQuiet waits until the load average is under maxLoad and no chaos
// test runs, at most timeout, polling every 10s; it reports progress once
// a minute.
func waitQuiet(ctx context.Context, maxLoad float64, timeout time.Duration, log io.Writer) (Quiet, error) {
	start := time.Now()
	var lastSaid time.Time
	for {
		load, err := loadAvg()
		if err != nil {
			return Quiet{}, err
		}
		chaos := chaosProcs()
		quiet := load < maxLoad && len(chaos) == 0
		if quiet || time.Since(start) >= timeout {
			busy, err := cpuBusy(ctx, 2*time.Second)
			if err != nil {
				return Quiet{}, err
			}
			q := Quiet{Load1: load, Busy: busy, Waited: time.Since(start).Seconds(), Quiet: quiet, Chaos: chaos}
			if !quiet {
				fmt.Fprintf(log, "walbench: machine still busy after %s (load %.2f, chaos processes %d); measuring anyway, marked not quiet\n",
					timeout, load, len(chaos))
			}
			return q, nil
		}
		if time.Since(lastSaid) >= time.Minute {
			fmt.Fprintf(log, "walbench: waiting for a quiet machine: load %.2f (want < %.2f), chaos processes %d\n", load, maxLoad, len(chaos))
			lastSaid = time.Now()
		}
		select {
		case <-ctx.Done():
			return Quiet{}, ctx.Err()
		case <-time.After(10 * time.Second):
		}
	}
}
