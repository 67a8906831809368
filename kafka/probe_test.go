package kafka

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// One Prober serves many streams: what they ask within probeFresh of an
// answer is answered from it, each stream's transactional id judged on the
// one metadata response, and an answer cut short by its asker's end is not
// given to the others.
func TestProberShared(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "cps"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Requests by kind: a probe's metadata (no topic), a writability
	// check's (the transaction state topic among its topics), the holds'
	// offsets.
	var probes, checks, offsets atomic.Int64
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.MetadataRequest)
		switch {
		case r.Topics != nil && len(r.Topics) == 0:
			probes.Add(1)
		case len(r.Topics) > 0 && r.Topics[len(r.Topics)-1].Topic != nil && *r.Topics[len(r.Topics)-1].Topic == transactionLog:
			checks.Add(1)
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		offsets.Add(1)
		return nil, nil, false
	})
	pr, err := NewProber(Settings{Brokers: c.ListenAddrs()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ctx := context.Background()

	// A hundred streams at once: one question of each kind.
	if err := pr.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Holds(ctx, "cps"); err != nil {
		t.Fatal(err)
	}
	p0, o0 := probes.Load(), offsets.Load()
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			if err := pr.Probe(ctx); err != nil {
				t.Error(err)
			}
			if got, err := pr.Unwritable(ctx, "walstream-"+string(rune('a'+i%26)), "cps"); err != nil || len(got) != 0 {
				t.Errorf("Unwritable = %q, %v; want every partition writable", got, err)
			}
			if held, err := pr.Holds(ctx, "cps"); err != nil || len(held) != 0 {
				t.Errorf("Holds = %v, %v; want none", held, err)
			}
		})
	}
	wg.Wait()
	if p, ch, o := probes.Load()-p0, checks.Load(), offsets.Load()-o0; p != 0 || ch != 1 || o != 0 {
		t.Errorf("a hundred streams within %s of the first answers sent %d more probes, %d writability checks, %d more offset requests; want 0, 1, 0",
			probeFresh, p, ch, o)
	}

	// Later, the answer is asked for again; one cut short by its asker's
	// ctx is no answer for the next.
	time.Sleep(probeFresh)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := pr.Probe(canceled); err == nil {
		t.Error("a probe with its ctx ended succeeded")
	}
	if err := pr.Probe(ctx); err != nil {
		t.Errorf("the probe after one cut short: %v, want the broker's answer", err)
	}
	if _, err := pr.Unwritable(ctx, "walstream-a", "cps"); err != nil {
		t.Fatal(err)
	}
	if p, ch := probes.Load()-p0, checks.Load(); p < 1 || ch != 2 {
		t.Errorf("after %s: %d more probes, %d writability checks in all; want at least 1, 2", probeFresh, p, ch)
	}
}

// The streams sharing a Prober hear of a hold once: the first to see it
// begun or ended is told, the others are not; a hold of another topic, or
// at another offset, is another hold.
func TestProberChanged(t *testing.T) {
	pr, err := NewProber(Settings{Brokers: []string{"127.0.0.1:1"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	h := Hold{Topic: "cps", Partition: 0, Stable: 14, End: 20, ProducerID: 7, TransactionalID: "tenant"}
	moved := h
	moved.Stable = 21
	for _, step := range []struct {
		what          string
		topic         string
		held          []Hold
		began, ended  int
		wantStableNew int64
	}{
		{"stream a sees the hold", "cps", []Hold{h}, 1, 0, 14},
		{"stream b sees the same hold", "cps", []Hold{h}, 0, 0, 0},
		{"another topic's streams see it there", "other", []Hold{h}, 1, 0, 14},
		{"stream a sees it held further on", "cps", []Hold{moved}, 1, 1, 21},
		{"stream b sees the same", "cps", []Hold{moved}, 0, 0, 0},
		{"stream b sees it end", "cps", nil, 0, 1, 0},
		{"stream a sees it ended too", "cps", nil, 0, 0, 0},
	} {
		began, ended := pr.Changed(step.topic, step.held)
		if len(began) != step.began || len(ended) != step.ended {
			t.Errorf("%s: told of %d begun, %d ended; want %d, %d", step.what, len(began), len(ended), step.began, step.ended)
			continue
		}
		if step.began > 0 && began[0].Stable != step.wantStableNew {
			t.Errorf("%s: told of the hold at %d, want %d", step.what, began[0].Stable, step.wantStableNew)
		}
	}
}
