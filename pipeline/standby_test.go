package pipeline

import (
	"log/slog"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// A standby waits on one connection it keeps, not a new one a second; a
// Postgres restart breaks it, and it connects again and goes on waiting
// (or takes the slot); when the instance streaming stops, it takes over.
// pg logs connections, and is restarted.
func standbyKeepsOneConnection(t *testing.T, pg *testenv.Postgres, broker string) {
	cfg := testConfig(t, pg, broker)
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	start := func(name string) *instance { return startInstance(t, cfg, log, name) }
	streaming := func(in *instance) bool { _, ok := in.p.state.streaming(time.Now()); return ok }
	waiting := func(in *instance) bool { return in.p.state.standbyAt.Load() != 0 && !streaming(in) }
	// opened counts the connections walstream opened, as log_connections
	// logs them.
	opened := func() int {
		b, err := os.ReadFile(pg.LogFile())
		if err != nil {
			t.Fatal(err)
		}
		return len(regexp.MustCompile(`connection authorized: .*application_name=walstream`).FindAll(b, -1))
	}
	// steady checks that once the instances settled (no connection opened
	// for 1.5 s), none opens for 2 s: two reads of a waiting standby.
	// A standby that tried a session every second opened two a second.
	steady := func(when string) {
		t.Helper()
		last, since := opened(), time.Now()
		testenv.Eventually(t, 30*time.Second, when+": no new connection for 1.5 s", func() bool {
			if n := opened(); n != last {
				last, since = n, time.Now()
			}
			return time.Since(since) > 1500*time.Millisecond
		})
		time.Sleep(2 * time.Second)
		if n := opened(); n != last {
			t.Fatalf("%s: walstream opened %d connections in 2 s", when, n-last)
		}
	}

	a := start("a")
	testenv.Eventually(t, 30*time.Second, "a streaming", func() bool { return streaming(a) })
	b := start("b")
	testenv.Eventually(t, 30*time.Second, "b standing by", func() bool { return waiting(b) })
	steady("while b waits")

	if err := pg.Restart("fast"); err != nil {
		t.Fatal(err)
	}
	var active, standby *instance
	testenv.Eventually(t, 30*time.Second, "one instance streaming and the other standing by after the restart", func() bool {
		switch {
		case streaming(a) && waiting(b):
			active, standby = a, b
		case streaming(b) && waiting(a):
			active, standby = b, a
		}
		return active != nil
	})
	steady("while the standby waits after the restart")

	active.cancel()
	if <-active.done; active.err != nil {
		t.Fatalf("stopping the instance streaming: %v", active.err)
	}
	taken := time.Now()
	testenv.Eventually(t, 30*time.Second, "the standby taking over", func() bool { return streaming(standby) })
	t.Logf("the standby streamed %s after the other instance stopped", time.Since(taken).Round(time.Millisecond))
}
