package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Figure is one summarized measurement: the median over runs, and the
// range.
type Figure struct {
	Scenario string  `json:"scenario"`
	Name     string  `json:"name"`
	Unit     string  `json:"unit"`
	Median   float64 `json:"median"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	Runs     int     `json:"runs"`
	// Target is the target, empty when there is none; Met says
	// whether the median meets it.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
}

// target is a bound a figure's median should stay within.
type target struct {
	atLeast bool
	bound   float64
}

func (t *target) String() string {
	if t == nil {
		return ""
	}
	if t.atLeast {
		return fmt.Sprintf("≥ %g", t.bound)
	}
	return fmt.Sprintf("≤ %g", t.bound)
}

func figure(scenario, name, unit string, values []float64, t *target) Figure {
	f := Figure{Scenario: scenario, Name: name, Unit: unit, Runs: len(values), Target: t.String()}
	if len(values) == 0 {
		return f
	}
	v := slices.Clone(values)
	slices.Sort(v)
	f.Min, f.Max = v[0], v[len(v)-1]
	if n := len(v); n%2 == 1 {
		f.Median = v[n/2]
	} else {
		f.Median = (v[n/2-1] + v[n/2]) / 2
	}
	if t != nil {
		met := f.Median <= t.bound
		if t.atLeast {
			met = f.Median >= t.bound
		}
		f.Met = &met
	}
	return f
}

// of collects one value from each run.
func of[T any](runs []T, fn func(T) float64) []float64 {
	out := make([]float64, 0, len(runs))
	for _, r := range runs {
		out = append(out, fn(r))
	}
	return out
}

// summarize computes the figures the issue asks for, with its targets.
func (r *Report) summarize() []Figure {
	var out []Figure
	// Targets of issue 15, at walstream's defaults.
	drains := func(scenario string, runs []*BacklogRun, ratio, ratioGoRecv, cpu *target, rssTarget float64) {
		if len(runs) == 0 {
			return
		}
		ws := func(fn func(Drain) float64) []float64 {
			return of(runs, func(r *BacklogRun) float64 { return fn(r.Walstream) })
		}
		pg := func(fn func(Drain) float64) []float64 {
			return of(runs, func(r *BacklogRun) float64 { return fn(r.Ceiling) })
		}
		gr := func(fn func(Drain) float64) []float64 {
			return of(runs, func(r *BacklogRun) float64 { return fn(r.GoRecv) })
		}
		rows := float64(runs[0].Rows)
		out = append(out,
			figure(scenario, "pg_recvlogical drain", "rows/s", pg(func(d Drain) float64 { return d.RowsPerSec }), nil),
			figure(scenario, "Go receive-only drain", "rows/s", gr(func(d Drain) float64 { return d.RowsPerSec }), nil),
			figure(scenario, "walstream drain", "rows/s", ws(func(d Drain) float64 { return d.RowsPerSec }), nil),
			figure(scenario, "walstream / pg_recvlogical, same run", "ratio", of(runs, func(r *BacklogRun) float64 { return r.Ratio }), ratio),
			figure(scenario, "walstream / Go receive-only, same run", "ratio", of(runs, func(r *BacklogRun) float64 { return r.RatioGoRecv }), ratioGoRecv),
		)
		if runs[0].WalstreamAvro != nil {
			av := func(fn func(Drain) float64) []float64 {
				return of(runs, func(r *BacklogRun) float64 { return fn(*r.WalstreamAvro) })
			}
			out = append(out,
				figure(scenario, "walstream with Avro drain", "rows/s", av(func(d Drain) float64 { return d.RowsPerSec }), nil),
				// Issue 27: backlog throughput with Avro within 20 % of JSON's.
				figure(scenario, "walstream with Avro / walstream, same run", "ratio", of(runs, func(r *BacklogRun) float64 { return r.RatioAvro }), &target{atLeast: true, bound: 0.8}),
				figure(scenario, "walstream with Avro CPU per row", "µs", av(func(d Drain) float64 { return d.CPUMicrosPerRow }), nil),
			)
		}
		out = append(out,
			figure(scenario, "walstream records", "MB/s", ws(func(d Drain) float64 { return d.RecordMBPerSec }), nil),
			figure(scenario, "walstream WAL", "MB/s", ws(func(d Drain) float64 { return d.WALMBPerSec }), nil),
			figure(scenario, "walstream CPU per row", "µs", ws(func(d Drain) float64 { return d.CPUMicrosPerRow }), cpu),
			figure(scenario, "walstream CPU per 1M rows", "s", ws(func(d Drain) float64 { return d.CPUSeconds / rows * 1e6 }), nil),
			figure(scenario, "walstream peak RSS", "MB", ws(func(d Drain) float64 { return float64(d.PeakRSSBytes) / 1e6 }), &target{bound: rssTarget}),
			figure(scenario, "walstream start-up (in the drain time)", "s", ws(func(d Drain) float64 { return d.StartupSeconds }), nil),
			figure(scenario, "broker CPU per row (walstream drain)", "µs", ws(func(d Drain) float64 { return d.BrokerCPUSeconds * 1e6 / rows }), nil),
			figure(scenario, "walsender CPU per row (walstream drain)", "µs", ws(func(d Drain) float64 { return d.WalsenderCPUSeconds * 1e6 / rows }), nil),
			figure(scenario, "walsender CPU per row (pg_recvlogical drain)", "µs", pg(func(d Drain) float64 { return d.WalsenderCPUSeconds * 1e6 / rows }), nil),
			figure(scenario, "walsender CPU per row (Go receive-only drain)", "µs", gr(func(d Drain) float64 { return d.WalsenderCPUSeconds * 1e6 / rows }), nil),
			figure(scenario, "pg_recvlogical CPU per row", "µs", pg(func(d Drain) float64 { return d.CPUMicrosPerRow }), nil),
			figure(scenario, "Go receive-only CPU per row", "µs", gr(func(d Drain) float64 { return d.CPUMicrosPerRow }), nil),
		)
	}
	drains(ScenarioBacklog, r.Backlog, &target{atLeast: true, bound: 1.3}, &target{atLeast: true, bound: 0.95}, &target{bound: 3.5}, 100)
	// The huge scenario runs two sizes; each gets its own figures.
	bySize, sizes := groupBy(r.Huge, func(h *BacklogRun) int64 { return h.Rows })
	for _, n := range sizes {
		drains(fmt.Sprintf("%s, %d rows", ScenarioHuge, n), bySize[n], &target{atLeast: true, bound: 0.9}, nil, nil, 200)
	}

	byLoad, order := groupBy(r.Latency, func(l Latency) Load { return l.Load })
	for _, load := range order {
		ls := byLoad[load]
		scenario := fmt.Sprintf("latency %d rows/s, %d/tx", load.Rate, load.RowsPerTx)
		// p99 targets: 10 ms at 1,000 rows/s, 25 ms at 10,000 rows/s in
		// 10-row transactions; none for loads the issue names no target for.
		var p99, cpu *target
		switch {
		case load.Rate <= 1000:
			p99, cpu = &target{bound: 10}, &target{bound: 50}
		case load.RowsPerTx >= 10:
			p99 = &target{bound: 25}
		}
		ms := func(fn func(Latency) float64) []float64 { return of(ls, fn) }
		out = append(out,
			figure(scenario, "achieved load", "rows/s", ms(func(l Latency) float64 { return l.AchievedRate }), nil),
			figure(scenario, "insert → visible p50", "ms", ms(func(l Latency) float64 { return l.P50Ms }), nil),
			figure(scenario, "insert → visible p99", "ms", ms(func(l Latency) float64 { return l.P99Ms }), p99),
		)
		out = append(out, floorFigures(scenario, ls, func(l Latency) []LatencyFloor { return l.Floors })...)
		out = append(out,
			figure(scenario, "insert → walstream's producer p99", "ms", ms(func(l Latency) float64 { return l.ToProducerP99Ms }), nil),
			figure(scenario, "walstream's producer → visible p99", "ms", ms(func(l Latency) float64 { return l.FromProducerP99Ms }), nil),
			figure(scenario, "insert → visible p99.9", "ms", ms(func(l Latency) float64 { return l.P999Ms }), nil),
			figure(scenario, "insert → visible max", "ms", ms(func(l Latency) float64 { return l.MaxMs }), nil),
			figure(scenario, "insert → commit ack p99 (bounds the timestamp's offset)", "µs", ms(func(l Latency) float64 { return l.InsertToAckP99Us }), nil),
			figure(scenario, "Kafka commit → slot confirmed p50", "ms", ms(func(l Latency) float64 { return l.ConfirmP50Ms }), nil),
			figure(scenario, "Kafka commit → slot confirmed p99", "ms", ms(func(l Latency) float64 { return l.ConfirmP99Ms }), &target{bound: 1000}),
			figure(scenario, "Kafka commit → slot confirmed max", "ms", ms(func(l Latency) float64 { return l.ConfirmMaxMs }), nil),
			figure(scenario, "walstream CPU per row", "µs", ms(func(l Latency) float64 { return l.WalstreamCPUMicrosPerRow }), cpu),
			figure(scenario, "walstream Kafka transactions a second", "1/s", ms(Latency.kafkaTxnRate), nil),
			figure(scenario, "walstream CPU per Kafka transaction", "µs", ms(func(l Latency) float64 { return l.WalstreamCPUMicrosPerTxn }), nil),
			figure(scenario, "Kafka client alone, same transactions: CPU per row", "µs", ms(func(l Latency) float64 { return l.KafkaClientCPUMicrosPerRow }), nil),
			figure(scenario, "minimal Kafka client, same transactions: CPU per row", "µs", ms(func(l Latency) float64 { return l.MinimalClientCPUMicrosPerRow }), nil),
			figure(scenario, "pg_recvlogical alone, same load: CPU per row", "µs", ms(func(l Latency) float64 { return l.RecvLogicalCPUMicrosPerRow }), nil),
			figure(scenario, "walstream peak RSS", "MB", ms(func(l Latency) float64 { return float64(l.WalstreamPeakRSSBytes) / 1e6 }), nil),
		)
	}
	out = append(out, r.peerFigures()...)
	// Targets of issue 29: with streaming of in-progress transactions, an
	// outbox row committed right after a large transaction on another
	// table is visible within 1 s (p99), and nothing is spilled for it.
	for _, f := range r.Foreign {
		scenario := fmt.Sprintf("foreign %d rows, streaming %s", f.Rows, map[bool]string{true: "on", false: "off"}[f.Streaming])
		var p99, spill *target
		if f.Streaming {
			p99, spill = &target{bound: 1000}, &target{bound: 0}
		}
		n := len(f.Reps)
		out = append(out,
			figure(scenario, fmt.Sprintf("commit → visible p99 over %d transactions", n), "ms", []float64{f.P99Ms}, p99),
			figure(scenario, "commit → visible", "ms", of(f.Reps, func(r ForeignRep) float64 { return r.LatencyMs }), nil),
			figure(scenario, "spilled by the server, all repetitions", "MB", []float64{float64(f.Spilled.SpillBytes) / 1e6}, spill),
			figure(scenario, "streamed by the server, all repetitions", "MB", []float64{float64(f.Spilled.StreamBytes) / 1e6}, nil),
			figure(scenario, "large transaction's insert", "s", of(f.Reps, func(r ForeignRep) float64 { return r.InsertSeconds }), nil),
		)
	}
	out = append(out, r.reemitFigures()...)
	out = append(out, r.fleetFigures()...)
	return out
}

// fleetFigures are the fleet scenario's, with their targets: each stream's
// p99 in the fleet within 1.5 × stream 1's alone (the worst stream's, as a
// ratio), the fleet's CPU per Kafka transaction within franz-go's alone
// and pg_recvlogical's together.
func (r *Report) fleetFigures() []Figure {
	if len(r.Fleet) == 0 {
		return nil
	}
	f := r.Fleet[0]
	scenario := fmt.Sprintf("fleet of %d streams, %s each", f.Streams, f.Load)
	if f.Servers > 1 {
		scenario += fmt.Sprintf(", on %d Postgres servers", f.Servers)
	}
	out := []Figure{
		figure(scenario, "stream 1 alone: insert → visible p99", "ms", of(r.Fleet, func(x *FleetRun) float64 { return x.Alone.Streams[0].P99Ms }), nil),
		figure(scenario, "the fleet's worst stream: insert → visible p99", "ms", of(r.Fleet, func(x *FleetRun) float64 { return x.Fleet.WorstP99Ms }), nil),
		figure(scenario, "the fleet's worst p99 / stream 1's alone", "ratio", of(r.Fleet, func(x *FleetRun) float64 { return x.Fleet.WorstP99Ms / x.Alone.Streams[0].P99Ms }), &target{bound: 1.5}),
	}
	if f.Fleet.Floors != nil && f.Alone.Floors != nil {
		out = append(out,
			figure(scenario, "Kafka's floor, franz-go committing stream 1's transactions alone again: send → visible p99", "ms", of(r.Fleet, func(x *FleetRun) float64 { return x.Alone.FloorWorstP99Ms }), nil),
			figure(scenario, "Kafka's floor, franz-go committing every stream's transactions again at once: the worst stream's send → visible p99", "ms", of(r.Fleet, func(x *FleetRun) float64 { return x.Fleet.FloorWorstP99Ms }), nil),
			figure(scenario, "Kafka's floor: the fleet's worst p99 / stream 1's alone", "ratio", of(r.Fleet, func(x *FleetRun) float64 { return x.Fleet.FloorWorstP99Ms / x.Alone.FloorWorstP99Ms }), nil),
		)
	}
	out = append(out,
		figure(scenario, "the fleet's CPU per Kafka transaction", "µs", of(r.Fleet, func(x *FleetRun) float64 { return x.Fleet.CPUMicrosPerTxn }), nil),
		figure(scenario, "the same / (franz-go alone + pg_recvlogical), per transaction", "ratio", of(r.Fleet, func(x *FleetRun) float64 {
			return x.Fleet.CPUMicrosPerTxn / (x.KafkaClientCPUMicrosPerTxn + x.RecvLogicalCPUMicrosPerTxn)
		}), &target{bound: 1}),
		figure(scenario, "the fleet under the load: CPU", "cores", of(r.Fleet, func(x *FleetRun) float64 { return x.Fleet.CPUCores }), nil),
		figure(scenario, "the fleet idle: CPU", "cores", of(r.Fleet, func(x *FleetRun) float64 { return x.Idle.CPUCores }), nil),
		figure(scenario, "the fleet idle: RSS", "MB", of(r.Fleet, func(x *FleetRun) float64 { return float64(x.Idle.RSSBytes) / 1e6 }), nil),
		figure(scenario, "the fleet: peak RSS under the load", "MB", of(r.Fleet, func(x *FleetRun) float64 { return float64(x.Fleet.PeakRSSBytes) / 1e6 }), nil),
	)
	if f.Debezium != nil {
		out = append(out,
			figure(scenario, "Debezium, one worker, a connector per stream: CPU", "cores", of(r.Fleet, func(x *FleetRun) float64 { return x.Debezium.CPUCores }), nil),
			figure(scenario, "walstream's fleet CPU / Debezium's", "ratio", of(r.Fleet, func(x *FleetRun) float64 { return x.Fleet.CPUCores / x.Debezium.CPUCores }), &target{bound: 0.25}),
			figure(scenario, "Debezium: worst p99", "ms", of(r.Fleet, func(x *FleetRun) float64 { return x.Debezium.WorstP99Ms }), nil),
			figure(scenario, "Debezium: peak RSS", "MB", of(r.Fleet, func(x *FleetRun) float64 { return float64(x.Debezium.PeakRSSBytes) / 1e6 }), nil),
		)
	}
	return out
}

// reemitFigures are the reemit scenario's, with issue 35's targets: the
// re-emit at 0.9 of walstream's backlog drain rate or more (the median of
// the backlog runs of the same invocation, when there are some), the live
// load's p99 within 50 ms while it runs and within 1.5 times its p99
// before the request.
func (r *Report) reemitFigures() []Figure {
	if len(r.Reemit) == 0 {
		return nil
	}
	l := r.Reemit[0].Load
	scenario := fmt.Sprintf("reemit %d rows, live %d rows/s", r.Reemit[0].Rows, l.Rate)
	out := []Figure{
		figure(scenario, "re-emit rate", "rows/s", of(r.Reemit, func(x *ReemitRun) float64 { return x.RowsPerSec }), nil),
		figure(scenario, "live insert → visible p50, during the re-emit", "ms", of(r.Reemit, func(x *ReemitRun) float64 { return x.LiveP50Ms }), nil),
		figure(scenario, "live insert → visible p99, during the re-emit", "ms", of(r.Reemit, func(x *ReemitRun) float64 { return x.LiveP99Ms }), &target{bound: 50}),
	}
	out = append(out, floorFigures(scenario, r.Reemit, func(x *ReemitRun) []LatencyFloor { return x.Floors })...)
	out = append(out,
		figure(scenario, "live insert → visible p99, before the request", "ms", of(r.Reemit, func(x *ReemitRun) float64 { return x.BeforeP99Ms }), nil),
		figure(scenario, "live p99 during the re-emit / before it, same run", "ratio", of(r.Reemit, func(x *ReemitRun) float64 { return x.LiveP99Ms / x.BeforeP99Ms }), &target{bound: 1.5}),
		figure(scenario, "live insert → producer p99, during the re-emit", "ms", of(r.Reemit, func(x *ReemitRun) float64 { return x.ToProducerP99Ms }), nil),
		figure(scenario, "live producer → visible p99, during the re-emit", "ms", of(r.Reemit, func(x *ReemitRun) float64 { return x.FromProducerP99Ms }), nil),
		figure(scenario, "live insert → producer p99, before the request", "ms", of(r.Reemit, func(x *ReemitRun) float64 { return x.BeforeToProducerP99Ms }), nil),
		figure(scenario, "live producer → visible p99, before the request", "ms", of(r.Reemit, func(x *ReemitRun) float64 { return x.BeforeFromProducerP99Ms }), nil),
		figure(scenario, "walstream CPU per re-emitted row", "µs", of(r.Reemit, func(x *ReemitRun) float64 { return x.WalstreamCPUSeconds * 1e6 / float64(x.Rows) }), nil),
		figure(scenario, "walstream peak RSS", "MB", of(r.Reemit, func(x *ReemitRun) float64 { return float64(x.WalstreamPeakRSSBytes) / 1e6 }), nil),
	)
	if len(r.Backlog) > 0 {
		drain := figure("", "", "", of(r.Backlog, func(b *BacklogRun) float64 { return b.Walstream.RowsPerSec }), nil).Median
		out = append(out, figure(scenario, "re-emit rate / backlog drain rate (median of this invocation's backlog runs)", "ratio",
			of(r.Reemit, func(x *ReemitRun) float64 { return x.RowsPerSec / drain }), &target{atLeast: true, bound: 0.9}))
	}
	return out
}

// markdown renders the summary and every run as markdown tables.
func (r *Report) markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "## walbench results\n\n")
	fmt.Fprintf(&b, "%s, %d CPUs, %.0f GiB; kernel %s; %s; Postgres %s; %s; walstream %s (%s); broker: %s\n\n",
		m.CPU, m.CPUs, float64(m.MemoryBytes)/(1<<30), m.Kernel, m.Go, m.Postgres, m.RecvLogical, m.Walstream, m.Commit, m.Broker)
	if m.Memory != "" {
		fmt.Fprintf(&b, "Page cache: %s.\n\n", m.Memory)
	}
	if args, _ := r.Config["walstream_args"].([]string); len(args) > 0 {
		fmt.Fprintf(&b, "walstream ran at its defaults except: `%s`\n\n", strings.Join(args, " "))
	} else {
		fmt.Fprintf(&b, "walstream ran at its defaults.\n\n")
	}
	if settings, _ := r.Config["pg_settings"].([]string); len(settings) > 0 {
		fmt.Fprintf(&b, "Postgres ran with, beyond walbench's own settings: `%s`\n\n", strings.Join(settings, ", "))
	}
	fmt.Fprintf(&b, "| scenario | figure | median | range | runs | target | met |\n|---|---|---:|---:|---:|---|---|\n")
	for _, f := range r.summarize() {
		met := ""
		if f.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*f.Met]
		}
		fmt.Fprintf(&b, "| %s | %s | %s %s | %s – %s | %d | %s | %s |\n", f.Scenario, f.Name,
			num(f.Median), f.Unit, num(f.Min), num(f.Max), f.Runs, f.Target, met)
	}
	runs := append(append([]*BacklogRun{}, r.Backlog...), r.Huge...)
	if r.Profiled != nil {
		runs = append(runs, r.Profiled)
	}
	if len(runs) > 0 {
		fmt.Fprintf(&b, "\n### Drain runs\n\n")
		fmt.Fprintf(&b, "| run | rows | rows/tx | payload B | WAL MB | load s | pg_recvlogical rows/s | Go receive-only rows/s | walstream rows/s | ratio to pg_recvlogical | walstream CPU µs/row | peak RSS MB | broker CPU µs/row | load avg before (pg_recvlogical, Go, walstream) |\n")
		fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, x := range runs {
			name := fmt.Sprintf("%s %d", x.Scenario, x.Run)
			if x.Profiled {
				name = x.Scenario + " (profiled)"
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.0f | %.1f | %s | %s | %s | %.3f | %.2f | %.0f | %.2f | %s, %s, %s |\n",
				name, x.Rows, x.RowsPerTx, x.PayloadBytes, float64(x.WALBytes)/1e6, x.LoadSeconds,
				num(x.Ceiling.RowsPerSec), num(x.GoRecv.RowsPerSec), num(x.Walstream.RowsPerSec), x.Ratio, x.Walstream.CPUMicrosPerRow,
				float64(x.Walstream.PeakRSSBytes)/1e6, x.Walstream.BrokerCPUSeconds*1e6/float64(x.Rows),
				quiet(x.Ceiling.Machine), quiet(x.GoRecv.Machine), quiet(x.Walstream.Machine))
		}
	}
	if len(r.Latency) > 0 {
		fmt.Fprintf(&b, "\n### Latency runs\n\n")
		fmt.Fprintf(&b, "| run | offered rows/s | rows/tx | achieved | samples | p50 ms | p99 ms | Kafka's floor p50 / p99 ms (%s) | p99.9 ms | max ms | missing | behind | insert→ack p99 µs | confirm p99 ms (of n) | walstream CPU µs/row | Kafka transactions/s | Kafka client alone CPU µs/row | minimal Kafka client CPU µs/row | pg_recvlogical CPU µs/row | load avg before |\n",
			strings.Join(floorClients(), "; "))
		fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, l := range append(append([]Latency{}, r.Latency...), r.ProfiledLatency...) {
			fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %d | %.2f | %.2f | %s | %.2f | %.2f | %d | %d | %.0f | %.0f (%d) | %.2f | %.0f | %.2f | %.2f | %.2f | %s |\n",
				runName(l.Run), l.Load.Rate, l.Load.RowsPerTx, l.AchievedRate, l.Samples, l.P50Ms, l.P99Ms, floorCell(l.Floors), l.P999Ms, l.MaxMs, l.Missing, l.Behind,
				l.InsertToAckP99Us, l.ConfirmP99Ms, l.ConfirmSamples, l.WalstreamCPUMicrosPerRow,
				l.kafkaTxnRate(), l.KafkaClientCPUMicrosPerRow, l.MinimalClientCPUMicrosPerRow, l.RecvLogicalCPUMicrosPerRow, quiet(l.Machine))
		}
	}
	if len(r.Peers) > 0 {
		fmt.Fprintf(&b, "\n### Debezium runs\n\n%s. Connector settings changed from Debezium's defaults, besides the connection and the slot: %s; in the distributed worker exactly.once.support=required. Worker settings: %s, %s. JVM: %s.\n\n",
			r.Machine.Debezium, settings(debeziumChanged), settings(debeziumWorker), debeziumHarness, strings.Join(debeziumJVMFlags(), " "))
		fmt.Fprintf(&b, "| round | tool | backlog rows/s | CPU µs/row | peak RSS MB | walsender CPU µs/row | worker start s | records counted | load avg before |")
		loads := r.peerLoads()
		for _, l := range loads {
			fmt.Fprintf(&b, " %s p50 / p99 / max ms | %s CPU µs/row | %s achieved |", l, l, l)
		}
		fmt.Fprintf(&b, "\n|---|---|---:|---:|---:|---:|---:|---:|---|%s\n", strings.Repeat("---:|---:|---:|", len(loads)))
		for _, p := range r.Peers {
			fmt.Fprintf(&b, "| %d | %s |", p.Round, p.Tool)
			if d := p.Backlog; d != nil {
				start := "" // walstream has no worker
				if d.WorkerStartSeconds > 0 {
					start = fmt.Sprintf("%.1f", d.WorkerStartSeconds)
				}
				fmt.Fprintf(&b, " %s | %.2f | %.0f | %.2f | %s | %d | %s |", num(d.RowsPerSec), d.CPUMicrosPerRow, float64(d.PeakRSSBytes)/1e6,
					d.WalsenderCPUSeconds*1e6/float64(d.Rows), start, d.RecordsCounted, quiet(d.Machine))
			} else {
				fmt.Fprintf(&b, " | | | | | | |")
			}
			for _, load := range loads {
				if l, ok := peerLatency(p, load); ok {
					fmt.Fprintf(&b, " %.1f / %.1f / %.1f | %.1f | %.0f |", l.P50Ms, l.P99Ms, l.MaxMs, l.CPUMicrosPerRow, l.AchievedRate)
				} else {
					fmt.Fprintf(&b, " | | |")
				}
			}
			fmt.Fprintln(&b)
		}
	}
	if len(r.Fleet) > 0 {
		fmt.Fprintf(&b, "\n### Fleet runs\n\n")
		fmt.Fprintf(&b, "| run | streams | load each | phase | p50 ms (median of streams) | p99 ms (worst stream) | p99 ms of each stream (up to its producer, from there) | Kafka's floor: p99 ms, worst stream | CPU cores | Kafka transactions | CPU µs per transaction | franz-go alone + pg_recvlogical µs per transaction | peak RSS MB | load avg before |\n|---|---:|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, x := range r.Fleet {
			for _, ph := range []struct {
				name string
				p    FleetPhase
			}{{"stream 1 alone", x.Alone}, {"fleet", x.Fleet}, {"Debezium, " + x.DebeziumMode, deref(x.Debezium)}} {
				if ph.p.Streams == nil {
					continue
				}
				var p50s []int64
				var p99s []string
				for _, s := range ph.p.Streams {
					p50s = append(p50s, int64(s.P50Ms*1e3))
					p99s = append(p99s, fmt.Sprintf("%.1f (%.1f, %.1f)", s.P99Ms, s.ToProducerP99Ms, s.FromProducerP99Ms))
				}
				floor := ""
				if ph.p.Floors != nil {
					floor = fmt.Sprintf("%.2f", ph.p.FloorWorstP99Ms)
				}
				fmt.Fprintf(&b, "| %d | %d | %s | %s | %.2f | %.2f | %s | %s | %.3f | %d | %.0f | %.0f + %.0f | %.0f | %s |\n", x.Run, len(ph.p.Streams), x.Load, ph.name,
					percentile(p50s, 0.5)/1e3, ph.p.WorstP99Ms, strings.Join(p99s, ", "), floor, ph.p.CPUCores, ph.p.KafkaTxns, ph.p.CPUMicrosPerTxn,
					x.KafkaClientCPUMicrosPerTxn, x.RecvLogicalCPUMicrosPerTxn, float64(ph.p.PeakRSSBytes)/1e6, quiet(ph.p.Machine))
			}
			fmt.Fprintf(&b, "| %d | %d | | idle | | | | | %.3f | | | | %.0f (RSS) | %s |\n", x.Run, x.Streams, x.Idle.CPUCores, float64(x.Idle.RSSBytes)/1e6, quiet(x.Idle.Machine))
		}
	}
	if len(r.Foreign) > 0 {
		fmt.Fprintf(&b, "\n### Foreign runs\n\n")
		fmt.Fprintf(&b, "| streaming | rows/tx | repetitions | p50 ms | p99 ms | max ms | spilled MB (txns) | streamed MB (txns) | load avg before |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, f := range r.Foreign {
			fmt.Fprintf(&b, "| %v | %d | %d | %.0f | %.0f | %.0f | %.0f (%d) | %.0f (%d) | %s |\n", f.Streaming, f.Rows, len(f.Reps), f.P50Ms, f.P99Ms, f.MaxMs,
				float64(f.Spilled.SpillBytes)/1e6, f.Spilled.SpillTxns, float64(f.Spilled.StreamBytes)/1e6, f.Spilled.StreamTxns, quiet(f.Machine))
		}
	}
	return b.String()
}

// deref is *p, the zero value for nil.
func deref[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// settings lists properties as k=v, sorted.
func settings(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ", ")
}

// peerValues are, for each round that has both, a figure of tool and of
// walstream.
func (r *Report) peerValues(tool string, fn func(*PeerRun) (float64, bool)) (own, walstream []float64) {
	byRound := map[int]map[string]*PeerRun{}
	for _, p := range r.Peers {
		if byRound[p.Round] == nil {
			byRound[p.Round] = map[string]*PeerRun{}
		}
		byRound[p.Round][p.Tool] = p
	}
	for _, round := range slices.Sorted(maps.Keys(byRound)) {
		t, w := byRound[round][tool], byRound[round][toolWalstream]
		if t == nil || w == nil {
			continue
		}
		a, ok1 := fn(t)
		b, ok2 := fn(w)
		if ok1 && ok2 {
			own, walstream = append(own, a), append(walstream, b)
		}
	}
	return own, walstream
}

// peerTools are the debezium scenario's tools in its report.
func (r *Report) peerTools() []string {
	var out []string
	for _, p := range r.Peers {
		if !slices.Contains(out, p.Tool) {
			out = append(out, p.Tool)
		}
	}
	return out
}

// peerLoads are the loads the debezium scenario held.
func (r *Report) peerLoads() []Load {
	var out []Load
	for _, p := range r.Peers {
		for _, l := range p.Latency {
			if !slices.Contains(out, l.Load) {
				out = append(out, l.Load)
			}
		}
	}
	return out
}

func peerLatency(p *PeerRun, load Load) (PeerLatency, bool) {
	for _, l := range p.Latency {
		if l.Load == load {
			return l, true
		}
	}
	return PeerLatency{}, false
}

// peerFigures are the debezium scenario's figures: each tool's, then the
// issue's targets as ratios of Debezium's to walstream's within a round.
func (r *Report) peerFigures() []Figure {
	if len(r.Peers) == 0 {
		return nil
	}
	var out []Figure
	drain := func(fn func(PeerDrain) float64) func(*PeerRun) (float64, bool) {
		return func(p *PeerRun) (float64, bool) {
			if p.Backlog == nil {
				return 0, false
			}
			return fn(*p.Backlog), true
		}
	}
	live := func(load Load, fn func(PeerLatency) float64) func(*PeerRun) (float64, bool) {
		return func(p *PeerRun) (float64, bool) {
			l, ok := peerLatency(p, load)
			return fn(l), ok
		}
	}
	type fig struct {
		scenario, name, unit string
		value                func(*PeerRun) (float64, bool)
		// ratio is Debezium's over walstream's (or walstream's over
		// Debezium's when inverted), with its target; nil for none.
		ratio    *target
		inverted bool
	}
	figs := []fig{
		{"debezium backlog", "drain", "rows/s", drain(func(d PeerDrain) float64 { return d.RowsPerSec }), &target{atLeast: true, bound: 5}, true},
		{"debezium backlog", "CPU per row", "µs", drain(func(d PeerDrain) float64 { return d.CPUMicrosPerRow }), &target{atLeast: true, bound: 5}, false},
		{"debezium backlog", "peak RSS", "MB", drain(func(d PeerDrain) float64 { return float64(d.PeakRSSBytes) / 1e6 }), &target{atLeast: true, bound: 5}, false},
		{"debezium backlog", "walsender CPU per row", "µs", drain(func(d PeerDrain) float64 { return d.WalsenderCPUSeconds * 1e6 / float64(d.Rows) }), nil, false},
		{"debezium backlog", "walsender busy", "fraction", drain(func(d PeerDrain) float64 { return d.WalsenderCPUSeconds / d.Seconds }), nil, false},
	}
	for _, load := range r.peerLoads() {
		sc := fmt.Sprintf("debezium latency %d rows/s, %d/tx", load.Rate, load.RowsPerTx)
		figs = append(figs,
			fig{sc, "achieved load", "rows/s", live(load, func(l PeerLatency) float64 { return l.AchievedRate }), nil, false},
			fig{sc, "insert → visible p50", "ms", live(load, func(l PeerLatency) float64 { return l.P50Ms }), nil, false},
			fig{sc, "insert → visible p99", "ms", live(load, func(l PeerLatency) float64 { return l.P99Ms }), &target{atLeast: true, bound: 10}, false},
			fig{sc, "insert → visible max", "ms", live(load, func(l PeerLatency) float64 { return l.MaxMs }), nil, false},
			fig{sc, "CPU per row", "µs", live(load, func(l PeerLatency) float64 { return l.CPUMicrosPerRow }), &target{atLeast: true, bound: 3}, false},
			fig{sc, "peak RSS", "MB", live(load, func(l PeerLatency) float64 { return float64(l.PeakRSSBytes) / 1e6 }), nil, false},
		)
	}
	tools := r.peerTools()
	for _, f := range figs {
		// A phase no round ran (the backlog at -debezium-rows 0) has no
		// figures, not figures of zero.
		if !slices.ContainsFunc(r.Peers, func(p *PeerRun) bool { _, ok := f.value(p); return ok }) {
			continue
		}
		for _, tool := range tools {
			var vals []float64
			for _, p := range r.Peers {
				if v, ok := f.value(p); ok && p.Tool == tool {
					vals = append(vals, v)
				}
			}
			out = append(out, figure(f.scenario, tool+" "+f.name, f.unit, vals, nil))
		}
		if f.ratio == nil {
			continue
		}
		for _, tool := range tools {
			if tool == toolWalstream {
				continue
			}
			own, ws := r.peerValues(tool, f.value)
			var ratios []float64
			for i := range own {
				if f.inverted && own[i] > 0 {
					ratios = append(ratios, ws[i]/own[i])
				} else if !f.inverted && ws[i] > 0 {
					ratios = append(ratios, own[i]/ws[i])
				}
			}
			name := fmt.Sprintf("%s: %s's / walstream's, same round", f.name, tool)
			if f.inverted {
				name = fmt.Sprintf("%s: walstream's / %s's, same round", f.name, tool)
			}
			out = append(out, figure(f.scenario, name, "×", ratios, f.ratio))
		}
	}
	// Kafka's floor under walstream's transactions, beside its latency.
	for _, load := range r.peerLoads() {
		var ls []PeerLatency
		for _, p := range r.Peers {
			if l, ok := peerLatency(p, load); ok && p.Tool == toolWalstream {
				ls = append(ls, l)
			}
		}
		out = append(out, floorFigures(fmt.Sprintf("debezium latency %d rows/s, %d/tx", load.Rate, load.RowsPerTx), ls,
			func(l PeerLatency) []LatencyFloor { return l.Floors })...)
	}
	return out
}

// floorFigures are the figures of Kafka's floor under walstream's
// transactions, for each bare producer, over runs; none when no run has a
// floor.
func floorFigures[T any](scenario string, runs []T, floors func(T) []LatencyFloor) []Figure {
	var out []Figure
	for _, client := range floorClients() {
		var p50, p99, commit []float64
		for _, r := range runs {
			for _, f := range floors(r) {
				if f.Client == client {
					p50, p99, commit = append(p50, f.P50Ms), append(p99, f.P99Ms), append(commit, f.CommitP99Ms)
				}
			}
		}
		if len(p50) == 0 {
			continue
		}
		name := fmt.Sprintf("Kafka's floor, %s committing walstream's transactions again:", client)
		out = append(out,
			figure(scenario, name+" send → visible p50", "ms", p50, nil),
			figure(scenario, name+" send → visible p99", "ms", p99, nil),
			figure(scenario, name+" commit → visible p99", "ms", commit, nil))
	}
	return out
}

// floorCell is a run's floors, p50 / p99 in floorClients' order.
func floorCell(floors []LatencyFloor) string {
	var cells []string
	for _, f := range floors {
		cells = append(cells, fmt.Sprintf("%.2f / %.2f", f.P50Ms, f.P99Ms))
	}
	return strings.Join(cells, "; ")
}

// runName is a run's number, or "profiled" for run 0.
func runName(n int) string {
	if n == 0 {
		return "profiled"
	}
	return fmt.Sprint(n)
}

// quiet says how loaded the machine was before a phase.
func quiet(q Quiet) string {
	s := fmt.Sprintf("%.2f", q.Load1)
	if !q.Quiet {
		s += " (not quiet)"
	}
	return s
}

// num prints a figure with about three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// groupBy groups vs by key, and lists the keys in the order they first
// come.
func groupBy[K comparable, V any](vs []V, key func(V) K) (map[K][]V, []K) {
	by := map[K][]V{}
	var order []K
	for _, v := range vs {
		k := key(v)
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], v)
	}
	return by, order
}
