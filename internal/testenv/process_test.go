package testenv

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestProcess: output is kept and handed out line by line, a SIGTERM the
// process handles gives its own exit, and one it ignores ends in SIGKILL.
func TestProcess(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	p, err := StartProcess(ProcessConfig{Path: "sh", Args: []string{"-c", `trap 'echo bye; exit 3' TERM; echo ready; while :; do sleep 0.05; done`},
		OnLine: func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitLog(context.Background(), "ready", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	err = p.Stop(syscall.SIGTERM, 10*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Stop = %v, want exit status 3 from the trap", err)
	}
	mu.Lock()
	got := strings.Join(lines, "|")
	mu.Unlock()
	if got != "ready|bye" || p.Log() != "ready\nbye\n" {
		t.Fatalf("lines %q, log %q; want ready and bye", got, p.Log())
	}

	p, err = StartProcess(ProcessConfig{Path: "sh", Args: []string{"-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitLog(context.Background(), "ready", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(syscall.SIGTERM, 300*time.Millisecond); !errors.Is(err, ErrKilled) || !p.KilledBy(syscall.SIGKILL) {
		t.Fatalf("Stop of a process ignoring SIGTERM = %v (%s), want ErrKilled and SIGKILL", err, p.ExitDesc())
	}
	if err := p.WaitLog(context.Background(), "never", time.Second); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitLog on an exited process = %v, want an error saying it exited", err)
	}
}

// TestWaitLogPortTaken: a process that exits after saying its address is
// taken is portTaken however many lines follow the saying, as a JVM's
// stack trace does.
func TestWaitLogPortTaken(t *testing.T) {
	for _, tc := range []struct {
		script string
		taken  bool
	}{
		{`echo 'java.net.BindException: Address already in use'; for i in $(seq 1 40); do echo "	at frame$i"; done; exit 1`, true},
		{`for i in $(seq 1 40); do echo "line $i"; done; exit 1`, false},
	} {
		p, err := StartProcess(ProcessConfig{Path: "sh", Args: []string{"-c", tc.script}})
		if err != nil {
			t.Fatal(err)
		}
		err = p.WaitLog(context.Background(), "never", 10*time.Second)
		if err == nil || !strings.Contains(err.Error(), "exited") || portTaken(err) != tc.taken {
			t.Errorf("WaitLog = %v; portTaken %v, want %v", err, portTaken(err), tc.taken)
		}
	}
}
