package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
)

// TestStreamsInOneProcess: one walstream process streams three outboxes on Apache
// Kafka, two databases of one Postgres and a database of another. Bad
// input stops one stream; the other Postgres restarts under the third.
// The stopped stream says so on /readyz and walstream_stopped, the process
// goes on, and the other two streams publish every row exactly once
// (read back read_committed); the stream on the Postgres that kept running
// never restarts its session. `walstream status` lists all three. A second
// process of the same streams, with the fix of the stopped one's bad event
// in its entry, takes that stream over and stands by for the other two.
// SIGTERM then exits the first non-zero, naming the stopped stream. The
// processes share no fleet's group (fleet: off): TestFleetAcrossProcesses
// runs one.
func TestStreamsInOneProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // orders and billing, in two databases of one server
	other := &env{t: t, pg: testenv.StartPostgres(t), kafka: e.kafka, broker: e.broker}
	other.pg.Exec("postgres", outboxDDL) // inventory
	for _, db := range []string{"orders", "billing"} {
		e.pg.Exec("postgres", "CREATE DATABASE "+db)
		e.pg.Exec(db, outboxDDL)
	}
	e.pg.Exec("orders", "ALTER TABLE outbox ALTER COLUMN aggregatetype DROP NOT NULL")
	fleet := func(ordersExtra string) string {
		path := filepath.Join(t.TempDir(), "walstream.yaml")
		err := os.WriteFile(path, fmt.Appendf(nil, `
kafka-brokers: %s
fleet: off                         # each process every stream, as a standby where another streams
http-addr: 127.0.0.1:0
status-interval: 1s
idle-interval: 500ms
commit-timeout: 10s
streams:
  - stream: orders
    pg-url: %s
    slot: orders%s
    outbox:
      route.topic.replacement: orders.${routedByValue}
  - stream: billing
    pg-url: %s
    slot: billing
    outbox:
      route.topic.replacement: billing.${routedByValue}
  - stream: inventory
    pg-url: %s
    outbox:
      route.topic.replacement: inventory.${routedByValue}
`, e.broker, e.pg.URL("postgres", "orders"), ordersExtra, e.pg.URL("postgres", "billing"), other.pg.URL("postgres", "postgres")), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	config := fleet("")
	p := &proc{testenv.StartWalstream(t, binary, []string{"run", "--config", config})}
	addr := p.httpAddr(t)
	testenv.Eventually(t, 90*time.Second, "three streams streaming", func() bool {
		if p.Exited() {
			t.Fatalf("walstream exited: %v", p.Err())
		}
		return strings.Count(p.Log(), testenv.StreamingLine) == 3
	})
	seqs := map[string]*int{"orders": new(int), "billing": new(int), "inventory": new(int)}
	insert := func(stream string, n int) {
		if stream == "inventory" {
			other.insertTxIn("postgres", "Item", n, 7, seqs[stream], false)
		} else {
			e.insertTxIn(stream, "Order", n, 7, seqs[stream], false)
		}
	}
	for stream := range seqs {
		insert(stream, 100)
	}
	// Published before the bad row, which would otherwise stop the Kafka
	// transaction they share.
	e.waitConfirmed("orders", e.currentLSN(), 60*time.Second, p)

	// Bad input stops orders, and orders alone.
	e.pg.Exec("orders", `INSERT INTO outbox VALUES ('00000000-0000-0000-0000-0000000000b1', NULL, 'a', 'T', '{}')`)
	p.waitLog(t, `msg="stream stopped on a permanent error; the other streams go on" stream=orders`, 60*time.Second)
	ready := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "orders: stopped: ") ||
		!strings.Contains(body, "event id 00000000-0000-0000-0000-0000000000b1") || !strings.Contains(body, "billing: ready") {
		t.Errorf("/readyz = %d %q, want 503 naming orders' stop, billing ready", code, body)
	}
	if body := httpBody(addr, "/healthz"); !strings.Contains(body, "orders: stopped: ") || !strings.Contains(body, "billing: ok") {
		t.Errorf("/healthz = %q, want a line per stream", body)
	}
	if metrics := httpBody(addr, "/metrics"); !strings.Contains(metrics, `walstream_stopped{database="orders",slot="orders",stream="orders"} 1`) ||
		!strings.Contains(metrics, `walstream_stopped{database="billing",slot="billing",stream="billing"} 0`) {
		t.Errorf("/metrics: walstream_stopped is not 1 for orders alone:\n%s", grepLines(metrics, "walstream_stopped"))
	}

	// inventory's Postgres restarts while rows go on in both.
	insert("billing", 50)
	insert("inventory", 50)
	if err := other.pg.Restart("fast"); err != nil {
		t.Fatal(err)
	}
	insert("billing", 50)
	insert("inventory", 50)
	e.waitConfirmed("billing", e.currentLSN(), 60*time.Second, p)
	other.waitConfirmed("walstream", other.currentLSN(), 60*time.Second, p)
	if p.Exited() {
		t.Fatalf("walstream exited: %v", p.Err())
	}
	if !strings.Contains(p.Log(), `msg="session ended, restarting from the checkpoint" stream=inventory`) {
		t.Error("inventory's session did not end when its Postgres restarted")
	}
	if strings.Contains(p.Log(), `msg="session ended, restarting from the checkpoint" stream=billing`) {
		t.Error("billing's session ended although its Postgres ran on")
	}

	// Every row of billing and inventory once, in order per aggregate.
	e.checkExactlyOnceIn("billing", e.kcat("billing.Order"), "billing.")
	other.checkExactlyOnceIn("postgres", other.kcat("inventory.Item"), "inventory.")
	if *seqs["billing"] != 200 || *seqs["inventory"] != 200 {
		t.Fatalf("rows inserted: %v", seqs)
	}

	// status lists the three streams.
	stdout, _, err := runCLI(t, "status", "--config", config, "--json")
	var reports []statusReport
	if jerr := json.Unmarshal([]byte(stdout), &reports); jerr != nil {
		t.Fatalf("status --json: %v (exit %v)\n%s", jerr, err, stdout)
	}
	if len(reports) != 3 || reports[0].Stream != "orders" || reports[1].Stream != "billing" || reports[2].Stream != "inventory" ||
		!reports[1].Slot.Active || reports[0].Slot.Active {
		t.Errorf("status --json: %d reports, want orders (its slot idle), billing and inventory streaming", len(reports))
	}

	// A second process with the fix in orders' entry (its bad event to the
	// dead-letter topic) takes orders' free slot, and stands by for the
	// two streams the first process streams: ready as a standby.
	skip := regexp.MustCompile(`--skip-event (\S+);`).FindStringSubmatch(p.Log())
	if skip == nil {
		t.Fatal("the stop names no --skip-event")
	}
	fixed := &proc{testenv.StartWalstream(t, binary, []string{"run", "--config", fleet("\n    skip-event: " + skip[1])})}
	fixed.waitLog(t, `msg=streaming stream=orders`, 60*time.Second)
	fixedAddr := fixed.httpAddr(t)
	testenv.Eventually(t, 30*time.Second, "the second process ready, as the standby of billing and inventory", func() bool {
		body := httpBody(fixedAddr, "/readyz?standby=1")
		return strings.Contains(body, "orders: streaming\nbilling: standby\ninventory: standby\n")
	})
	insert("orders", 50)
	e.waitConfirmed("orders", e.currentLSN(), 60*time.Second, fixed)
	if dlq := e.kcat("walstream.dlq"); len(dlq) != 1 || !strings.Contains(dlq[0].Headers, "id=00000000-0000-0000-0000-0000000000b1") {
		t.Errorf("dead letters %+v, want the bad row alone", dlq)
	}
	// Every row of orders once but the bad one, dead-lettered, which is
	// taken out of the table the topic is checked against.
	e.pg.Exec("orders", "DELETE FROM outbox WHERE aggregatetype IS NULL")
	e.checkExactlyOnceIn("orders", e.kcat("orders.Order"), "orders.")
	if *seqs["orders"] != 150 {
		t.Fatalf("rows inserted: %v", seqs)
	}

	// Stopped by a signal, the process says which stream had stopped.
	err = p.stop()
	if err == nil {
		t.Fatal("walstream exited 0 after a stream stopped on bad input")
	}
	lines := strings.Split(strings.TrimSpace(p.Log()), "\n")
	wantAll(t, lines[len(lines)-1], "walstream: stream orders: ", "00000000-0000-0000-0000-0000000000b1", "--skip-event")
}

// The streams that reach one cluster as one principal, however they list
// its brokers, share one reader of markers and one readiness prober; a
// stream of another cluster has its own.
func TestShareKafka(t *testing.T) {
	cfg := func(brokers ...string) *config.Config {
		c := &config.Config{}
		c.Kafka = kafka.Settings{Brokers: brokers}
		return c
	}
	cfgs := []*config.Config{cfg("a:9092", "b:9092"), cfg("b:9092", "a:9092"), cfg("c:9092")}
	closeAll := shareKafka(cfgs, slog.New(slog.DiscardHandler))
	defer closeAll()
	for i, c := range cfgs {
		if c.Markers == nil || c.Prober == nil {
			t.Fatalf("stream %d: markers %v, prober %v; want both", i, c.Markers, c.Prober)
		}
	}
	if cfgs[0].Markers != cfgs[1].Markers || cfgs[0].Prober != cfgs[1].Prober {
		t.Error("two streams of one cluster do not share its reader of markers and prober")
	}
	if cfgs[2].Markers == cfgs[0].Markers || cfgs[2].Prober == cfgs[0].Prober {
		t.Error("a stream of another cluster shares the first cluster's reader of markers or prober")
	}
}
