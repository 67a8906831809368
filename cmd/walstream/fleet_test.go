package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestForeignTransactionOnCheckpointTopic: another producer opens a
// transaction on the checkpoint topic, which every stream of a cluster
// shares, and hangs (a paused pod, a stream frozen mid-commit) until its
// coordinator aborts it at its timeout. Its open transaction holds back
// the partition's last stable offset, and with it every checkpoint a
// read_committed reader sees. walstream streams on through it: no session
// restarts (before, each commit waited the commit timeout for visibility,
// failed, and the next session resumed from the checkpoint before the
// foreign transaction and published again what it had committed since),
// the slot is confirmed as the load goes, /readyz, the metric and
// `walstream status` name the holder, and every row reaches Kafka once.
func TestForeignTransactionOnCheckpointTopic(t *testing.T) {
	e := newEnv(t)
	// A commit timeout of 4 s: a commit that waited for read_committed
	// visibility would fail within the hold.
	p := e.start([]string{"--http-addr", "127.0.0.1:0", "--commit-timeout", "4s"}).streaming(t)
	addr := p.httpAddr(t)
	ctx := context.Background()

	var seq int
	var mu sync.Mutex
	stop := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			mu.Lock()
			e.insertTx("Order", 1+i%3, 5, &seq, false)
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()
	time.Sleep(time.Second)

	// The foreign transaction: its coordinator aborts it 8 s after it
	// began (plus the broker's check interval).
	foreign, err := kgo.NewClient(kgo.SeedBrokers(e.broker), kgo.TransactionalID("tenant-frozen-mid-commit"), kgo.TransactionTimeout(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	if err := foreign.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := foreign.ProduceSync(ctx, &kgo.Record{Topic: "walstream.checkpoints", Key: []byte("another-stream"), Value: []byte(`{}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	adm := kadm.NewClient(foreign)
	held := func() bool {
		lso, err1 := adm.ListCommittedOffsets(ctx, "walstream.checkpoints")
		end, err2 := adm.ListEndOffsets(ctx, "walstream.checkpoints")
		if err1 != nil || err2 != nil {
			t.Fatalf("listing offsets: %v %v", err1, err2)
		}
		l, _ := lso.Lookup("walstream.checkpoints", 0)
		h, _ := end.Lookup("walstream.checkpoints", 0)
		return l.Offset < h.Offset
	}

	// While it is open: confirmation keeps up with the load, and the holder
	// is named.
	eventually(t, 20*time.Second, "/readyz names the transaction holding the checkpoint topic", func() bool {
		code, body := httpGet(addr, "/readyz")
		return code == 200 && strings.Contains(body, "held at offset") && strings.Contains(body, "tenant-frozen-mid-commit")
	})
	if _, metrics := httpGet(addr, "/metrics"); !strings.Contains(metrics, `walstream_checkpoint_topic_held_seconds{`) ||
		!strings.Contains(metrics, `holder="tenant-frozen-mid-commit"`) {
		t.Errorf("no walstream_checkpoint_topic_held_seconds naming the holder in /metrics")
	}
	out, _, _ := runCLI(t, "status", "--json", "--pg-url", e.pg.URL("postgres", "postgres"), "--kafka-brokers", e.broker)
	var st struct {
		Checkpoint struct {
			HeldBy []struct {
				TransactionalID string  `json:"transactional_id"`
				OpenSeconds     float64 `json:"open_seconds"`
			} `json:"held_by"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Checkpoint.HeldBy) != 1 || st.Checkpoint.HeldBy[0].TransactionalID != "tenant-frozen-mid-commit" {
		t.Errorf("walstream status --json: held_by %+v (%v), want the foreign transaction\n%s", st.Checkpoint.HeldBy, err, out)
	}
	for i := 0; i < 3 && held(); i++ {
		mu.Lock()
		target := e.currentLSN()
		mu.Unlock()
		e.waitConfirmed("walstream", target, 2*time.Second, p)
		time.Sleep(time.Second)
	}
	if !held() {
		t.Fatalf("the foreign transaction ended within %s, before the test could watch through it", time.Since(began))
	}

	// The coordinator aborts it; the load goes on a little.
	eventually(t, 40*time.Second, "the coordinator aborts the foreign transaction", func() bool { return !held() })
	t.Logf("the foreign transaction held the checkpoint topic for %s", time.Since(began).Round(100*time.Millisecond))
	time.Sleep(time.Second)
	close(stop)
	<-loaded
	e.waitConfirmed("walstream", e.currentLSN(), 5*time.Second, p)
	eventually(t, 10*time.Second, "/readyz no longer names a hold", func() bool {
		code, body := httpGet(addr, "/readyz")
		return code == 200 && !strings.Contains(body, "held")
	})
	if log := p.Log(); strings.Contains(log, "session ended") || strings.Contains(log, "Kafka transaction failed") {
		t.Errorf("the stream was disturbed by the foreign transaction:\n%s", grepLines(log, "session ended|Kafka transaction failed"))
	}
	p.waitLog(t, "the transaction holding back the checkpoint topic ended", 5*time.Second)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	t.Logf("%d rows in %d-row transactions, each once", seq, 3)
}
