package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/internal/testenv"
)

// The fleet's walstream reads its streams as walstream run does: each its
// own slot, publication and table, the connections for all of them.
func TestFleetArgsParse(t *testing.T) {
	b := &bench{cfg: &Config{WalstreamArgs: []string{"--linger", "2ms"}}, pg: &postgres{url: "postgres://postgres@127.0.0.1:5432/postgres"}}
	args, err := b.fleetArgs(t.TempDir(), "127.0.0.1:9092", "127.0.0.1:0", 3)
	if err != nil {
		t.Fatal(err)
	}
	if args[0] != "run" {
		t.Fatalf("args = %q, want walstream run", args)
	}
	cfgs, err := config.ParseStreams(config.Run, args[1:], io.Discard)
	if err != nil {
		t.Fatalf("walstream does not take the fleet's arguments %q: %v", args, err)
	}
	if len(cfgs) != 3 {
		t.Fatalf("%d streams, want 3", len(cfgs))
	}
	for i, c := range cfgs {
		s := fleetStream(i + 1)
		if c.Slot != s.slot() || c.Postgres.Database != s.database() || c.Publication != benchPublication || c.Table != benchTable || c.Linger.String() != "2ms" {
			t.Errorf("stream %d: slot %s, database %s, publication %s, table %s, linger %s; want %s, %s, %s, %s, 2ms",
				i+1, c.Slot, c.Postgres.Database, c.Publication, c.Table, c.Linger, s.slot(), s.database(), benchPublication, benchTable)
		}
	}
}

// With -fleet-servers, stream i is on server (i-1) mod n, and the fleet's
// config says so.
func TestFleetArgsServers(t *testing.T) {
	pg := func(port int) *postgres {
		return &postgres{url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)}
	}
	b := &bench{cfg: &Config{}, pg: pg(5432)}
	b.fleetPG = []*postgres{b.pg, pg(5433)}
	args, err := b.fleetArgs(t.TempDir(), "127.0.0.1:9092", "127.0.0.1:0", 3)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := config.ParseStreams(config.Run, args[1:], io.Discard)
	if err != nil {
		t.Fatalf("walstream does not take the fleet's arguments %q: %v", args, err)
	}
	for i, want := range []uint16{5432, 5433, 5432} {
		if c := cfgs[i]; c.Postgres.Port != want || c.Postgres.Database != fleetStream(i+1).database() {
			t.Errorf("stream %d: port %d, database %s; want %d, %s", i+1, c.Postgres.Port, c.Postgres.Database, want, fleetStream(i+1).database())
		}
	}
	u, err := b.fleetURL(fleetStream(2))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := debeziumConnector(u, peer{slot: fleetStream(2).slot()})
	if err != nil {
		t.Fatal(err)
	}
	if cfg["database.port"] != "5433" || cfg["database.dbname"] != fleetStream(2).database() {
		t.Errorf("stream 2's connector: port %s, database %s; want 5433, %s", cfg["database.port"], cfg["database.dbname"], fleetStream(2).database())
	}
}

// committedTxns sums every stream's committed transactions and nothing
// else.
func TestCommittedTxns(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP walstream_kafka_transactions_total Kafka transactions ended, by result.
walstream_kafka_transactions_total{database="d",result="aborted",slot="a",stream="d/a"} 5
walstream_kafka_transactions_total{database="d",result="committed",slot="a",stream="d/a"} 120
walstream_kafka_transactions_total{database="d",result="committed",slot="b",stream="d/b"} 3.5e+02
walstream_kafka_transaction_failures_total{cause="other",database="d",slot="a",stream="d/a"} 7
`)
	}))
	defer srv.Close()
	n, err := committedTxns(srv.Listener.Addr().String())
	if err != nil || n != 470 {
		t.Fatalf("committedTxns = %d, %v; want 470", n, err)
	}
}

// What walbench does to a new Apache Kafka broker before a phase, on one.
func TestNewBroker(t *testing.T) {
	k := testenv.StartKafka(t, testenv.KafkaConfig{})
	t.Run("season", func(t *testing.T) { testSeasonTopics(t, k) })
	t.Run("warm-up", func(t *testing.T) { testWarmBroker(t, k) })
}

// The warm-up's transactions are committed, each once (a checkpoint record
// each), on topics of their own, and the broker's CPU for them is measured.
func testWarmBroker(t *testing.T, k *testenv.Kafka) {
	ctx := t.Context()
	w, err := warmBroker(ctx, &brokerProc{addr: k.Addr(), kafka: k}, 3*time.Second, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d transactions; broker CPU per transaction %d µs, then %d", w.txns, w.firstMicros, w.lastMicros)
	if w.txns == 0 || w.firstMicros <= 0 || w.lastMicros <= 0 {
		t.Fatalf("warm-up = %+v, want transactions and the broker's CPU for them", w)
	}
	n, err := countRecords(ctx, k.Addr(), "walbench.warm-up.checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	if n != w.txns {
		t.Errorf("%d warm-up checkpoints visible read_committed, want one a counted transaction, %d", n, w.txns)
	}
}

// Seasoned topics are past their first index entries on Apache Kafka, which
// a fleet's fresh partitions would otherwise reach together under its
// load, and the consumers of the latency phases skip what seasoned them.
func testSeasonTopics(t *testing.T, k *testenv.Kafka) {
	ctx := t.Context()
	const topic, partitions = "walbench.season", 2
	if err := createTopics(ctx, k.Addr(), partitions, topic); err != nil {
		t.Fatal(err)
	}
	// firstEntries reads the first entry of partition p's offset index
	// (relative offset, position) and of its time index (timestamp);
	// zeros while the preallocated files hold none.
	firstEntries := func(p int) (rel, pos uint32, ts uint64) {
		dir := filepath.Join(k.Nodes()[0].DataDir(), fmt.Sprintf("%s-%d", topic, p))
		read := func(name string, n int) []byte {
			b, err := os.ReadFile(filepath.Join(dir, "00000000000000000000."+name))
			if errors.Is(err, os.ErrNotExist) {
				return make([]byte, n) // Kafka creates indexes as first used
			}
			if err != nil || len(b) < n {
				t.Fatalf("reading partition %d's %s: %d bytes, %v", p, name, len(b), err)
			}
			return b[:n]
		}
		idx, tidx := read("index", 8), read("timeindex", 12)
		return binary.BigEndian.Uint32(idx), binary.BigEndian.Uint32(idx[4:]), binary.BigEndian.Uint64(tidx)
	}
	for p := range partitions {
		if rel, pos, ts := firstEntries(p); rel != 0 || pos != 0 || ts != 0 {
			t.Fatalf("partition %d of a new topic has index entries (offset %d at %d, time %d)", p, rel, pos, ts)
		}
	}

	if err := seasonTopics(ctx, k.Addr(), partitions, topic); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		if rel, pos, ts := firstEntries(p); rel != 1 || pos <= 4096 || ts == 0 {
			t.Errorf("partition %d after seasoning: offset index's first entry offset %d at byte %d, time index's first timestamp %d; "+
				"want offset 1 past byte 4096, a timestamp", p, rel, pos, ts)
		}
	}
	var n int
	if err := testenv.ReadCommitted(ctx, k.Addr(), topic, func(r *kgo.Record) {
		n++
		if ts, err := recordTimestamp(r.Value); err != nil || ts != 0 {
			t.Errorf("seasoning record at partition %d offset %d: ts_us %d, %v; want 0, which consumers skip", r.Partition, r.Offset, ts, err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2*partitions {
		t.Errorf("%d seasoning records, want two a partition, %d", n, 2*partitions)
	}
}

// A stream's latencies split at walstream's producer, for its own topic's
// rows from a moment on.
func TestFleetLatencies(t *testing.T) {
	c := &timedConsumer{by: map[string]*timings{
		"a": {ts: []int64{100, 200, 300}, lat: []int64{10, 20, 30}, produced: []int64{4, 5, 26}},
		"b": {ts: []int64{250}, lat: []int64{99}, produced: []int64{1}},
	}}
	lat, to, from := c.latencies("a", 200)
	if !slices.Equal(lat, []int64{20, 30}) || !slices.Equal(to, []int64{5, 26}) || !slices.Equal(from, []int64{15, 4}) {
		t.Errorf("latencies(a, 200) = %v, %v, %v; want [20 30], [5 26], [15 4]", lat, to, from)
	}
}

// The fleet's floors stand in the summary beside its p99s, and in the runs'
// table, only when measured.
func TestFleetFloorInReport(t *testing.T) {
	phase := func(p99, floor float64) FleetPhase {
		ph := FleetPhase{Streams: []StreamLatency{{Stream: 1, P99Ms: p99}}, WorstP99Ms: p99}
		if floor > 0 {
			ph.Floors, ph.FloorWorstP99Ms = []LatencyFloor{{Client: "franz-go", P99Ms: floor}}, floor
		}
		return ph
	}
	r := &Report{Fleet: []*FleetRun{
		{Run: 1, Streams: 10, Alone: phase(10, 4), Fleet: phase(30, 10)},
		{Run: 2, Streams: 10, Alone: phase(12, 5), Fleet: phase(24, 20)},
		{Run: 3, Streams: 10, Alone: phase(11, 6), Fleet: phase(27, 9)},
	}}
	medians := map[string]float64{}
	for _, f := range r.summarize() {
		medians[f.Name] = f.Median
	}
	for name, want := range map[string]float64{
		"Kafka's floor, franz-go committing stream 1's transactions alone again: send → visible p99":                          5,
		"Kafka's floor, franz-go committing every stream's transactions again at once: the worst stream's send → visible p99": 10,
		"Kafka's floor: the fleet's worst p99 / stream 1's alone":                                                             2.5,
	} {
		if got, ok := medians[name]; !ok || got != want {
			t.Errorf("%s: median %v (in the summary: %v), want %v", name, got, ok, want)
		}
	}
	if md := r.markdown(); !strings.Contains(md, "| 30.00 | 30.0 (0.0, 0.0) | 10.00 |") {
		t.Errorf("the fleet runs' table lacks the floor beside the p99:\n%s", md)
	}
	for i := range r.Fleet {
		r.Fleet[i].Alone, r.Fleet[i].Fleet = phase(10, 0), phase(30, 0)
	}
	for _, f := range r.summarize() {
		if strings.Contains(f.Name, "floor") {
			t.Errorf("figure %q without a floor measured", f.Name)
		}
	}
}
