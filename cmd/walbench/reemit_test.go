package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/checkpoint"
)

// seenWith is a checkpoint read at visible recording one request.
func seenWith(visible time.Time, q checkpoint.Reemit) seenCheckpoint {
	return seenCheckpoint{visible: visible, cp: checkpoint.Checkpoint{Notes: &checkpoint.Notes{Reemits: checkpoint.Reemits{q}}}}
}

// A re-emit request ends when a checkpoint read back records it done with
// every row: the time that checkpoint was read. One that ended otherwise
// is an error naming how.
func TestReemitDone(t *testing.T) {
	t0 := time.Now()
	noExit := func() error { return nil }
	l := &checkpointLog{seen: []seenCheckpoint{
		seenWith(t0, checkpoint.Reemit{ID: "r", State: checkpoint.ReemitRunning, Rows: 1024}),
		seenWith(t0.Add(time.Second), checkpoint.Reemit{ID: "other", State: checkpoint.ReemitDone, Rows: 2048}),
	}}
	go func() {
		time.Sleep(50 * time.Millisecond)
		l.mu.Lock()
		l.seen = append(l.seen, seenWith(t0.Add(2*time.Second), checkpoint.Reemit{ID: "r", State: checkpoint.ReemitDone, Rows: 2048}))
		l.mu.Unlock()
	}()
	at, err := l.reemitDone(context.Background(), "r", 2048, 10*time.Second, noExit)
	if err != nil || !at.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("reemitDone = %s, %v; want the third checkpoint's time", at, err)
	}
	l = &checkpointLog{seen: []seenCheckpoint{seenWith(t0, checkpoint.Reemit{ID: "r", State: checkpoint.ReemitFailed, Rows: 10, Error: "a column was dropped"})}}
	if _, err := l.reemitDone(context.Background(), "r", 2048, 10*time.Second, noExit); err == nil || !strings.Contains(err.Error(), "failed after 10 rows of 2048: a column was dropped") {
		t.Fatalf("reemitDone of a failed request = %v", err)
	}
	if _, err := (&checkpointLog{}).reemitDone(context.Background(), "r", 1, 100*time.Millisecond, noExit); err == nil {
		t.Fatal("reemitDone with no checkpoint = nil error, want its deadline passed")
	}
}
