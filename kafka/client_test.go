package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

type countLogger struct{ n int }

func (c *countLogger) Level() kgo.LogLevel              { return kgo.LogLevelDebug }
func (c *countLogger) Log(kgo.LogLevel, string, ...any) { c.n++ }

// During an outage franz-go repeats itself; each message passes once per
// logEvery, and info lines not at all.
func TestQuietLogger(t *testing.T) {
	inner := &countLogger{}
	l := newQuietLogger(inner)
	if l.Level() != kgo.LogLevelWarn {
		t.Fatalf("level %v, want warn", l.Level())
	}
	for i := 0; i < 100; i++ {
		l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "x")
	}
	l.Log(kgo.LogLevelWarn, "another message")
	if inner.n != 2 {
		t.Fatalf("%d lines passed, want 2", inner.n)
	}
}

type levelLogger struct{ levels map[string]kgo.LogLevel }

func (l *levelLogger) Level() kgo.LogLevel { return kgo.LogLevelDebug }
func (l *levelLogger) Log(level kgo.LogLevel, msg string, _ ...any) {
	l.levels[msg] = level
}

// franz-go's own retries go out at info; what an operator acts on stays
// at warn.
func TestQuietLoggerDemotesRetries(t *testing.T) {
	inner := &levelLogger{levels: make(map[string]kgo.LogLevel)}
	l := newQuietLogger(inner)
	for msg, want := range map[string]kgo.LogLevel{
		"produce partition load error, bumping error count on first stored batch": kgo.LogLevelInfo,
		"unable to open connection to broker":                                     kgo.LogLevelInfo,
		"random error while producing, requeueing unattempted request":            kgo.LogLevelInfo,
		"unable to open connection to broker due to an immediate EOF, which often means the client is using TLS when the broker is not expecting it (is TLS misconfigured?)": kgo.LogLevelWarn,
		"read from broker errored, killing connection after 0 successful responses (is SASL missing?)":                                                                       kgo.LogLevelWarn,
	} {
		l.Log(kgo.LogLevelWarn, msg)
		if got := inner.levels[msg]; got != want {
			t.Errorf("%q logged at %v, want %v", msg, got, want)
		}
	}
}
