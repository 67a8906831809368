package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walstream/walstream/internal/testenv"
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
// `walstream status` name the holder, `walstream status --abort-hanging`
// ends it (before, the test waited for the coordinator to abort it at its
// timeout), and every row reaches Kafka once.
func TestForeignTransactionOnCheckpointTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A commit that waited for read_committed visibility would stall the
	// confirmations the hold's loop below wants within 3 s each. The commit
	// timeout is 10 s: with 4, a broker that held one produce 4 s on a
	// machine busy with the whole suite (seen once, not again in 7 runs)
	// ended a session, though nothing waited for the hold.
	p := e.start([]string{"--http-addr", "127.0.0.1:0", "--commit-timeout", "10s"}).streaming(t)
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
	// The load stops before the test ends, however it ends: the cleanup
	// closes the connection it inserts on.
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-loaded
	}()
	time.Sleep(time.Second)

	// The foreign transaction, of a process that is gone: its coordinator
	// would abort it a minute after it began, but an operator aborts it
	// first.
	foreign, err := kgo.NewClient(kgo.SeedBrokers(e.broker), kgo.TransactionalID("tenant-frozen-mid-commit"), kgo.TransactionTimeout(time.Minute))
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
	testenv.Eventually(t, 20*time.Second, "/readyz names the transaction holding the checkpoint topic", func() bool {
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
		e.waitConfirmed("walstream", target, 3*time.Second, p)
		time.Sleep(time.Second)
	}
	if !held() {
		t.Fatalf("the foreign transaction ended within %s, before the test could watch through it", time.Since(began))
	}

	// `walstream status` says how to abort it, and an operator does, as
	// for a transaction of a process that is gone; the load goes on a
	// little.
	text, _, _ := runCLI(t, "status", "--pg-url", e.pg.URL("postgres", "postgres"), "--kafka-brokers", e.broker)
	hint := regexp.MustCompile(`walstream status --abort-hanging (0:(\d+))`).FindStringSubmatch(text)
	if hint == nil {
		t.Fatalf("walstream status does not say how to abort the hold:\n%s", text)
	}
	if _, said, err := runCLI(t, "status", "--abort-hanging", hint[1], "--pg-url", e.pg.URL("postgres", "postgres"), "--kafka-brokers", e.broker); err != nil ||
		!strings.Contains(said, "aborted the transaction of tenant-frozen-mid-commit starting at offset") {
		t.Fatalf("walstream status --abort-hanging %s: %v\n%s", hint[1], err, said)
	}
	// The stream's own commits keep the partition's last stable offset
	// held for moments: it moves past the foreign transaction's start.
	heldAt, _ := strconv.ParseInt(hint[2], 10, 64)
	testenv.Eventually(t, 5*time.Second, "the last stable offset moves past the aborted transaction", func() bool {
		lso, err := adm.ListCommittedOffsets(ctx, "walstream.checkpoints")
		if err != nil {
			t.Fatal(err)
		}
		l, _ := lso.Lookup("walstream.checkpoints", 0)
		return l.Offset > heldAt
	})
	t.Logf("the foreign transaction was aborted %s after it began", time.Since(began).Round(100*time.Millisecond))
	time.Sleep(time.Second)
	close(stop)
	<-loaded
	e.waitConfirmed("walstream", e.currentLSN(), 5*time.Second, p)
	testenv.Eventually(t, 10*time.Second, "/readyz no longer names a hold", func() bool {
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

// TestStreamNameClaimedAtEveryStart: two streams deployed with the same
// --stream, on two databases of one cluster. The first waits in slot
// creation, behind a transaction left open, while the second streams and
// commits checkpoints under their shared key. Once the first has its slot,
// it must stop naming both streams before it fences anything (the key was
// empty when it first looked), never resume from the other's position; the
// other streams on untouched.
func TestStreamNameClaimedAtEveryStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.pg.Exec("postgres", "CREATE DATABASE billing")
	prepared(e, "billing", "billing")
	long, err := pgx.Connect(ctx, e.pg.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close(ctx)
	if _, err := long.Exec(ctx, "BEGIN; SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	shared := []string{"--stream", "orders"}
	waiting := e.start(shared)
	waiting.waitLog(t, "waiting for 1 transaction to end", 30*time.Second)

	seq := 0
	other := e.start(append(shared, "--pg-url", e.pg.URL("postgres", "billing"), "--slot", "billing")).streaming(t)
	e.insertTxIn("billing", "Invoice", 10, 2, &seq, false)
	e.waitConfirmed("billing", e.currentLSN(), 30*time.Second, other)

	if _, err := long.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	msg := exitMessage(t, waiting)
	wantAll(t, msg, `two streams claim checkpoint key "orders"`, "this stream (stream orders: database postgres, slot walstream",
		"stream orders, slot billing", "database billing", "--stream")
	if strings.Contains(waiting.Log(), "resuming from checkpoint") || strings.Contains(waiting.Log(), "initializing producer id") {
		t.Errorf("the stream resumed, or fenced, before it stopped:\n%s", waiting.Log())
	}
	e.insertTxIn("billing", "Invoice", 10, 2, &seq, false)
	e.waitConfirmed("billing", e.currentLSN(), 30*time.Second, other)
	if strings.Contains(other.Log(), "session ended") {
		t.Errorf("the streaming stream was disturbed:\n%s", grepLines(other.Log(), "session ended"))
	}
	e.checkExactlyOnceIn("billing", e.readAll("Invoice"), "outbox.event.")
}

// TestUpgradeKeepsCheckpoint upgrades from the names earlier versions
// defaulted to (checkpoint key: the slot's name; transactional id:
// walstream-<slot>) for each way of setting --stream, --checkpoint-key and
// --transactional-id, with a transaction split over Kafka transactions in
// flight: the earlier instance is paused with its second part's Kafka
// transaction open, its walsender cut, and resumed once the new instance
// streams. The new one finds the checkpoint, fences the earlier
// transactional id where it no longer uses it (so the paused instance
// cannot commit its part), and every row reaches Kafka once.
func TestUpgradeKeepsCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, tc := range []struct {
		name string
		// args are the new instance's; key and id the earlier one's.
		args                  []string
		key, id               string
		legacy, fence, warned bool
	}{
		{name: "all defaulted", legacy: true},
		{name: "stream set", args: []string{"--stream", "renamed"}, legacy: true},
		{name: "key set", args: []string{"--checkpoint-key", "k3"}, key: "k3", fence: true, warned: true},
		{name: "transactional id set", args: []string{"--transactional-id", "t4"}, id: "t4", legacy: true, warned: true},
		{name: "stream and key set", args: []string{"--stream", "renamed5", "--checkpoint-key", "k5"}, key: "k5", fence: true, warned: true},
		{name: "stream and transactional id set", args: []string{"--stream", "renamed6", "--transactional-id", "t6"}, id: "t6", legacy: true, warned: true},
		{name: "key and transactional id set", args: []string{"--checkpoint-key", "k7", "--transactional-id", "t7"}, key: "k7", id: "t7"},
	} {
		db, slot, typ := fmt.Sprintf("db%d", i), fmt.Sprintf("s%d", i), fmt.Sprintf("Upgrade%d", i)
		e.pg.Exec("postgres", "CREATE DATABASE "+db)
		prepared(e, db, slot)
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := &env{t: t, pg: e.pg, kafka: e.kafka, broker: e.broker}
			key, id := cmp.Or(tc.key, slot), cmp.Or(tc.id, "walstream-"+slot)
			common := []string{"--pg-url", e.pg.URL("postgres", db), "--slot", slot, "--max-batch-events", "10", "--idle-interval", "1h"}
			earlier := append(slices.Clip(common), "--checkpoint-key", key, "--transactional-id", id)
			seq := 0
			old := e.start(earlier).streaming(t)
			// The subtests write to other databases of the cluster
			// meanwhile, and --idle-interval 1h writes no checkpoint for
			// their WAL: the wait is for this transaction.
			e.waitConfirmed(slot, e.insertTxIn(db, typ, 5, 2, &seq, false), 30*time.Second, old)
			if err := old.stop(); err != nil {
				t.Fatal(err)
			}
			// Paused with the second part of a 25-row transaction open.
			old = e.start(earlier, "WALSTREAM_CRASH_AT=before-commit:2:stop").streaming(t)
			e.insertTxIn(db, typ, 25, 3, &seq, false)
			old.waitLog(t, "stop point before-commit reached", 30*time.Second)
			e.pg.Exec("postgres", fmt.Sprintf("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '%s'", slot))

			p := e.start(append(slices.Clip(common), tc.args...)).streaming(t)
			e.waitConfirmed(slot, e.insertTxIn(db, typ, 5, 2, &seq, false), 30*time.Second, p)
			old.Signal(syscall.SIGCONT)
			old.waitLog(t, "session ended", 30*time.Second)
			_ = old.stop()
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
			log := p.Log()
			for what, want := range map[string]bool{
				"this stream's checkpoint is under the key earlier versions used":                   tc.legacy,
				"fencing transactional ids that wrote this stream's checkpoints under another name": tc.fence,
				"is derived from the stream's name":                                                 tc.warned,
			} {
				if strings.Contains(log, what) != want {
					t.Errorf("log says %q: %v, want %v\n%s", what, !want, want, log)
				}
			}
			if strings.Contains(log, "no checkpoint in Kafka") {
				t.Errorf("the new instance did not find the checkpoint:\n%s", log)
			}
			e.checkExactlyOnceIn(db, e.readAll(typ), "outbox.event.")
		})
	}
}
