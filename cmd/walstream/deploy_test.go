package main

import (
	"regexp"
	"sort"
	"strings"
	"testing"
)

var walstreamMetric = regexp.MustCompile(`\bwalstream_[a-z0-9_]+\b`)

// usedMetrics returns the walstream_ metric names in PromQL expressions;
// a histogram's series (_bucket, _sum, _count) count as the histogram when
// that is a registered name.
func usedMetrics(exprs []string, registered map[string]bool) []string {
	seen := make(map[string]bool)
	for _, e := range exprs {
		for _, m := range walstreamMetric.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m, suffix); ok && registered[base] {
					m = base
				}
			}
			seen[m] = true
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestDeployUsesExportedMetrics parses the Grafana dashboard and the
// Prometheus rules and checks that every walstream metric they use is one
// walstream registers.
func TestDeployUsesExportedMetrics(t *testing.T) {
	names := metricNames(t)

	var exprs []string
	for _, p := range readDashboard(t).Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, r := range alertRules(t) {
		exprs = append(exprs, r.Expr)
	}
	used := usedMetrics(exprs, names)
	for _, m := range used {
		if !names[m] {
			t.Errorf("deploy/ uses metric %s, which walstream does not export", m)
		}
	}
	t.Logf("%d metrics used by deploy/, all exported", len(used))
}
