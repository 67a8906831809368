package main

import (
	"io"
	"strings"
	"testing"
)

// The debezium scenario's targets are ratios within a round: Debezium's
// figure over walstream's (walstream's rows/s over Debezium's), their
// median against the bound.
func TestPeerFigures(t *testing.T) {
	load := Load{Rate: 1000, RowsPerTx: 1}
	run := func(tool string, round int, rows, cpu, rss, p99 float64) *PeerRun {
		return &PeerRun{Tool: tool, Round: round,
			Backlog: &PeerDrain{Rows: 1000, RowsPerSec: rows, CPUMicrosPerRow: cpu, PeakRSSBytes: int64(rss * 1e6), Seconds: 1},
			Latency: []PeerLatency{{Load: load, P99Ms: p99, CPUMicrosPerRow: cpu}}}
	}
	r := &Report{Peers: []*PeerRun{
		run(toolWalstream, 1, 50000, 5, 60, 10), run(toolStandalone, 1, 20000, 40, 400, 900),
		run(toolWalstream, 2, 40000, 6, 60, 12), run(toolStandalone, 2, 10000, 36, 420, 1000),
	}}
	want := map[string]struct {
		median float64
		met    bool
	}{
		"debezium backlog: drain: walstream's / debezium-standalone's, same round":                                  {(2.5 + 4) / 2, false},
		"debezium backlog: CPU per row: debezium-standalone's / walstream's, same round":                            {(8 + 6) / 2, true},
		"debezium backlog: peak RSS: debezium-standalone's / walstream's, same round":                               {(400.0/60 + 7) / 2, true},
		"debezium latency 1000 rows/s, 1/tx: insert → visible p99: debezium-standalone's / walstream's, same round": {(90 + 1000.0/12) / 2, true},
		"debezium latency 1000 rows/s, 1/tx: CPU per row: debezium-standalone's / walstream's, same round":          {(8 + 6) / 2, true},
	}
	seen := 0
	for _, f := range r.peerFigures() {
		w, ok := want[f.Scenario+": "+f.Name]
		if !ok {
			continue
		}
		seen++
		if f.Median-w.median > 1e-9 || w.median-f.Median > 1e-9 || f.Met == nil || *f.Met != w.met || f.Runs != 2 {
			t.Errorf("%s %s: median %v met %v runs %d; want %v, %v, 2", f.Scenario, f.Name, f.Median, f.Met, f.Runs, w.median, w.met)
		}
	}
	if seen != len(want) {
		t.Fatalf("found %d of the %d ratio figures", seen, len(want))
	}
	if md := r.markdown(); !strings.Contains(md, "### Debezium runs") || !strings.Contains(md, "| 2 | debezium-standalone | 10000 |") {
		t.Errorf("markdown lacks the runs:\n%s", md)
	}
}

// Rounds without a backlog (-debezium-rows 0) report no backlog figures.
func TestPeerFiguresWithoutBacklog(t *testing.T) {
	load := Load{Rate: 1000, RowsPerTx: 1}
	r := &Report{Peers: []*PeerRun{
		{Tool: toolWalstream, Round: 1, Latency: []PeerLatency{{Load: load, P99Ms: 10, CPUMicrosPerRow: 150}}},
		{Tool: toolStandalone, Round: 1, Latency: []PeerLatency{{Load: load, P99Ms: 900, CPUMicrosPerRow: 250}}},
	}}
	live := 0
	for _, f := range r.peerFigures() {
		if strings.HasPrefix(f.Scenario, "debezium backlog") {
			t.Errorf("a backlog figure without a backlog: %s %s (%d runs)", f.Scenario, f.Name, f.Runs)
		} else {
			live++
		}
	}
	if live == 0 {
		t.Fatal("no latency figures")
	}
}

func TestDebeziumConfig(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		modes []string
		err   string // part of the error; empty: none
	}{
		{"defaults", []string{"-scenarios", "debezium"}, []string{"standalone", "distributed"}, ""},
		{"one mode", []string{"-scenarios", "debezium", "-debezium-modes", " distributed "}, []string{"distributed"}, ""},
		{"kfake", []string{"-scenarios", "debezium", "-broker", "kfake"}, nil, "Apache Kafka only"},
		{"unknown mode", []string{"-scenarios", "debezium", "-debezium-modes", "embedded"}, nil, `"embedded" is not standalone or distributed`},
		{"mode twice", []string{"-scenarios", "debezium", "-debezium-modes", "standalone,standalone"}, nil, `"standalone" twice`},
		{"no mode", []string{"-scenarios", "debezium", "-debezium-modes", ","}, nil, "none given"},
		{"negative rows", []string{"-scenarios", "debezium", "-debezium-rows", "-1"}, nil, "must not be negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseConfig(c.args, io.Discard)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("parseConfig(%q) = %v, want an error with %q", c.args, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig(%q): %v", c.args, err)
			}
			if got := strings.Join(cfg.DebeziumModes, ","); got != strings.Join(c.modes, ",") {
				t.Fatalf("modes = %q, want %q", got, c.modes)
			}
		})
	}
}
