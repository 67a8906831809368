package pipeline

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A wait is logged when it begins and again once per interval, shows on
// /readyz while it lasts, and is logged as over with how long it took.
func TestWaits(t *testing.T) {
	var buf bytes.Buffer
	p := New(Config{StatusInterval: time.Second, CommitTimeout: time.Second, ReadyConfirmAge: time.Minute, ProgressInterval: 300 * time.Millisecond},
		slog.New(slog.NewTextHandler(&buf, nil)), prometheus.NewRegistry())
	readyz := func() string {
		w := httptest.NewRecorder()
		p.Readyz(w, httptest.NewRequest("GET", "/readyz", nil))
		return w.Body.String()
	}
	p.waits.waiting("slot", `creating slot "walstream": waiting for 1 transaction to end: pid 7`)
	p.waits.waiting("slot", `creating slot "walstream": waiting for 1 transaction to end: pid 7`)
	if got := strings.Count(buf.String(), "waiting for 1 transaction"); got != 1 {
		t.Fatalf("logged %d times within the interval, want once:\n%s", got, &buf)
	}
	if body := readyz(); !strings.Contains(body, `not streaming: creating slot "walstream": waiting for 1 transaction to end: pid 7`) {
		t.Fatalf("/readyz while waiting: %q", body)
	}
	time.Sleep(350 * time.Millisecond)
	p.waits.waiting("slot", `creating slot "walstream": waiting for 1 transaction to end: pid 8`)
	if !strings.Contains(buf.String(), "pid 8") {
		t.Fatalf("not logged again after the interval:\n%s", &buf)
	}
	p.waits.done("standby", "no longer a standby")
	if strings.Contains(buf.String(), "no longer a standby") {
		t.Fatal("the end of a wait of another kind was logged")
	}
	p.waits.done("slot", "slot created")
	if !strings.Contains(buf.String(), `msg="slot created" waited_seconds=0`) {
		t.Fatalf("the end of the wait not logged:\n%s", &buf)
	}
	if body := readyz(); strings.Contains(body, "creating slot") {
		t.Fatalf("/readyz after the wait: %q", body)
	}
	// A wait never logged ends quietly.
	buf.Reset()
	p.waits.done("slot", "slot created")
	if buf.Len() != 0 {
		t.Fatalf("a wait that did not happen was logged as over: %s", &buf)
	}
}
