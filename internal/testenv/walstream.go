package testenv

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// WalstreamBuild is the build of walstream: with faults, crash points
// (WALSTREAM_CRASH_AT) are compiled in with the walstream_faults tag.
func WalstreamBuild(race, faults bool) Build {
	b := Build{Pkg: "cmd/walstream", Race: race}
	if faults {
		b.Tags = []string{"walstream_faults"}
	}
	return b
}

// StreamingLine is what walstream logs once it holds the slot and streams.
const StreamingLine = "msg=streaming"

// StartWalstream runs `bin args...` in WalstreamEnv(env...). At the end of the test it is stopped with
// SIGTERM (killed after 30 s), a data race it reported fails the test, and
// its log is shown when the test failed.
func StartWalstream(t testing.TB, bin string, args []string, env ...string) *Process {
	t.Helper()
	p, err := StartProcess(ProcessConfig{Name: "walstream", Path: bin, Args: args, Env: WalstreamEnv(env...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop(syscall.SIGTERM, 30*time.Second)
		if p.reportedRace() {
			t.Errorf("walstream reported a data race:\n%s", p.Log())
		} else if t.Failed() {
			t.Logf("walstream log:\n%s", p.Log())
		}
	})
	return p
}

// WalstreamEnv is the environment for a walstream under test: this
// process's, less its WALSTREAM_* variables (a developer's own settings
// must not leak into a test), plus env.
func WalstreamEnv(env ...string) []string {
	out := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WALSTREAM_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// WaitStreaming waits up to d until walstream streams, failing the test
// when it exits first.
func WaitStreaming(t testing.TB, p *Process, d time.Duration) {
	t.Helper()
	if err := p.WaitLog(context.Background(), StreamingLine, d); err != nil {
		t.Fatal(err)
	}
}
