package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// httpGet returns the status and body of a GET, 0 when nothing answers.
func httpGet(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestReadinessStates: /readyz?standby=1 answers "streaming" on the
// instance holding the slot and "standby" on the one waiting for it, where
// plain /readyz answers 503. Once the broker is gone, both answer 503
// within seconds, naming Kafka.
func TestReadinessStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	http := []string{"--http-addr", "127.0.0.1:0"}
	first := e.start(http).streaming(t)
	second := e.start(http)
	second.waitLog(t, "is active for PID", 30*time.Second)
	a1, a2 := first.httpAddr(t), second.httpAddr(t)

	want := func(addr, path string, code int, body string, within time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
			got, text := httpGet(addr, path)
			if got == code && strings.Contains(text, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s%s = %d %q, not %d %q within %s", addr, path, got, text, code, body, within)
			}
		}
	}
	want(a1, "/readyz?standby=1", 200, "streaming", 10*time.Second)
	want(a1, "/readyz", 200, "ready", 10*time.Second)
	want(a2, "/readyz?standby=1", 200, "standby", 10*time.Second)
	if code, body := httpGet(a2, "/readyz"); code != 503 || !strings.Contains(body, "not streaming") {
		t.Errorf("plain /readyz of the standby = %d %q, want 503 not streaming", code, body)
	}

	e.kafka.Stop(syscall.SIGTERM)
	lost := time.Now()
	want(a1, "/readyz", 503, "Kafka", 8*time.Second)
	t.Logf("streaming instance not ready %s after the broker stopped", time.Since(lost).Round(100*time.Millisecond))
	want(a1, "/readyz?standby=1", 503, "", 8*time.Second)
	want(a2, "/readyz?standby=1", 503, "Kafka", 8*time.Second)
	if code, _ := httpGet(a1, "/healthz"); code != 200 {
		t.Errorf("/healthz = %d with the broker down, want 200: the process is fine", code)
	}
}

// TestUnreachablePeers: a wrong Postgres or broker address says so plainly,
// naming the address, and never speaks of a session or a checkpoint.
func TestUnreachablePeers(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	port := testenv.FreePort(t)
	nobody := fmt.Sprintf("127.0.0.1:%d", port)
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"postgres", "cannot reach Postgres at " + nobody + ": connection refused; retrying in", []string{"--pg-url", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port), "--http-addr", ":0"}},
		{"kafka", "cannot reach Kafka at " + nobody + ": connection refused; retrying in", []string{"--kafka-brokers", nobody}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := e.start(tc.args)
			p.waitLog(t, tc.want, 60*time.Second)
			t.Logf("%s", grepLines(p.Log(), "cannot reach"))
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
			if tc.name == "postgres" && !regexpFind(`level=WARN msg="the HTTP listener binds every interface.* addr=:0`, p.Log()) {
				t.Errorf("--http-addr :0 binds every interface without a warning:\n%s", p.Log())
			}
			for _, bad := range []string{"session ended", "restarting from the checkpoint", "server refused TLS"} {
				if strings.Contains(p.Log(), bad) {
					t.Errorf("log says %q:\n%s", bad, grepLines(p.Log(), "WARN|ERROR"))
				}
			}
		})
	}
}

// TestFatalErrorIsLogged: with --log-format=json the reason walstream stops
// is an ERROR record with its fields, besides the plain stderr line.
func TestFatalErrorIsLogged(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	p := e.start([]string{"--log-format", "json", "--create=false"})
	last := exitMessage(t, p)
	wantAll(t, last, "walstream: ", `publication "walstream_outbox"`, "does not exist")
	var found bool
	sc := bufio.NewScanner(strings.NewReader(p.Log()))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec["level"] != "ERROR" {
			continue
		}
		found = true
		err, _ := rec["err"].(string)
		if !strings.Contains(err, "does not exist") || rec["kind"] != "setup" || rec["peer"] != "postgres" || rec["slot"] != "walstream" {
			t.Errorf("ERROR record lacks the error or its fields: %s", sc.Text())
		}
	}
	if !found {
		t.Fatalf("no ERROR record in the JSON log:\n%s", p.Log())
	}
}

// TestStatusKafkaDown: status --json prints the slot's state with the
// Kafka error in its error field, and exits non-zero.
func TestStatusKafkaDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.start(nil).streaming(t)
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	e.kafka.Stop(syscall.SIGTERM)
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, "status", "--json", "--pg-url", e.pg.URL("postgres", "postgres"), "--kafka-brokers", e.broker)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("status with Kafka down: %v, want a non-zero exit\n%s%s", err, out.String(), errOut.String())
	}
	var r statusReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("status --json with Kafka down printed no JSON: %v\nstdout %q\nstderr %q", err, out.String(), errOut.String())
	}
	if !r.Slot.Exists || r.Slot.ConfirmedFlush == "" || r.Slot.RetainedWALBytes == nil {
		t.Errorf("slot part missing: %+v", r.Slot)
	}
	if !strings.Contains(r.Error, "reading the checkpoint") || !strings.Contains(r.Error, e.broker) || r.Checkpoint.Found {
		t.Errorf("error field %q, checkpoint %+v; want the Kafka error naming the broker", r.Error, r.Checkpoint)
	}
	if len(r.Problems) == 0 {
		t.Error("no problem reported with Kafka down")
	}
	t.Logf("status with Kafka down took %s; error field: %s", time.Since(start).Round(100*time.Millisecond), r.Error)
}

// TestGOGC: walstream runs the collector at defaultGOGC, and under a soft
// memory limit of its queue and three batches, unless GOGC or GOMEMLIMIT
// is in the environment, and its first log line says which.
func TestGOGC(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	for _, tc := range []struct {
		args []string
		env  []string
		want []string
	}{
		{nil, []string{"GOGC=", "GOMEMLIMIT="}, []string{fmt.Sprintf("gogc=%d", defaultGOGC), fmt.Sprintf("gomemlimit=%d", 64<<20)}},
		{[]string{"--queue-bytes", "1048576", "--max-batch-bytes", "2097152"}, []string{"GOGC=50", "GOMEMLIMIT="},
			[]string{"gogc=50", fmt.Sprintf("gomemlimit=%d", 7<<20)}},
		{nil, []string{"GOMEMLIMIT=off"}, []string{"gomemlimit=off"}},
	} {
		p := e.start(append([]string{"--create=false"}, tc.args...), tc.env...)
		exitMessage(t, p)
		first, _, _ := strings.Cut(p.Log(), "\n")
		for _, want := range tc.want {
			if !strings.Contains(first, "msg=starting") || !strings.Contains(first, want) {
				t.Errorf("with %s %s the first log line is %q, want the starting line with %s", tc.env, tc.args, first, want)
			}
		}
	}
}
