package pipeline

import (
	"log/slog"
	"sync"
	"time"
)

// waitPoll is how often a wait that can last is looked at again: what the
// creation of a slot waits for, whether the slot is still held.
const waitPoll = 2 * time.Second

// waits says what walstream waits for while it cannot stream (a slot
// being created behind running transactions, a slot another process
// holds): in the log, the first time and then every interval, and on
// /readyz, until it ends. Its methods may be called from any goroutine.
type waits struct {
	log   *slog.Logger
	state *state
	// every is how often a wait that goes on is logged again; zero logs
	// it once.
	every time.Duration

	mu     sync.Mutex
	kind   string // what is waited for: "slot" or "standby"; empty when nothing
	since  time.Time
	logged time.Time
}

// waiting notes that kind of wait goes on, as text says, and logs it when
// it is new or its interval has passed.
func (w *waits) waiting(kind, text string, attrs ...any) {
	w.state.waiting.Store(&text)
	w.mu.Lock()
	now := time.Now()
	if w.kind != kind {
		w.kind, w.since, w.logged = kind, now, time.Time{}
	}
	due := w.logged.IsZero() || w.every > 0 && now.Sub(w.logged) >= w.every
	if due {
		w.logged = now
	}
	since := w.since
	w.mu.Unlock()
	if due {
		w.log.Info(text, append(attrs, "waiting_seconds", int64(now.Sub(since).Seconds()))...)
	}
}

// done ends a wait of kind, logging how long it lasted when it was logged.
func (w *waits) done(kind, msg string) {
	w.mu.Lock()
	if w.kind != kind {
		w.mu.Unlock()
		return
	}
	logged, since := !w.logged.IsZero(), w.since
	w.kind = ""
	w.mu.Unlock()
	w.state.waiting.Store(nil)
	if logged {
		w.log.Info(msg, "waited_seconds", int64(time.Since(since).Seconds()))
	}
}

// clear ends any wait without a word: its Run ended.
func (w *waits) clear() {
	w.mu.Lock()
	w.kind = ""
	w.mu.Unlock()
	w.state.waiting.Store(nil)
}
