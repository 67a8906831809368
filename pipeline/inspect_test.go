package pipeline

import (
	"strings"
	"testing"
	"time"

	"github.com/walstream/walstream/replication"
)

// explainLag names the server's decoding as the cause of a lag only on its
// evidence: a spill going on, the walsender reading one back, a stream, or
// spills before; otherwise it says nothing.
func TestExplainLag(t *testing.T) {
	reset := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stats := func(spillTxns, spill, stream int64) *replication.DecodingStats {
		return &replication.DecodingStats{SpillTxns: spillTxns, SpillBytes: spill, StreamBytes: stream, WorkMem: "64MB", StatsReset: reset}
	}
	reading := &replication.Backend{PID: 7, Type: "walsender", WaitEvent: "IO/ReorderBufferRead"}
	idle := &replication.Backend{PID: 7, Type: "walsender", WaitEvent: "Activity/WalSenderMain"}
	for _, tc := range []struct {
		name          string
		before, after *replication.DecodingStats
		walsender     *replication.Backend
		want          []string
	}{
		{"spilling now", stats(1, 100<<20, 0), stats(2, 300<<20, 0), idle,
			[]string{"decoding a transaction larger than logical_decoding_work_mem (64MB)", "200.0 MiB in 1s", "everything committed after it waits",
				"spilled 300.0 MiB of 2 transactions for this slot since 2026-01-02T03:04:05Z"}},
		{"reading a spill back", stats(2, 300<<20, 0), stats(2, 300<<20, 0), reading,
			[]string{"reads a transaction it spilled to disk back at its commit (wait event IO/ReorderBufferRead)"}},
		{"streaming", stats(0, 0, 1<<20), stats(0, 0, 5<<20), idle, []string{"streams a large transaction in progress (4.0 MiB in 1s)", "nothing committed after it waits"}},
		{"spilled before", stats(3, 1<<30, 0), stats(3, 1<<30, 0), idle, []string{"spilled 1.0 GiB of 3 transactions", "each larger than logical_decoding_work_mem (64MB)"}},
		{"counters reset meanwhile", stats(9, 900<<20, 0), stats(1, 10<<20, 0), nil, []string{"spilling it to disk (10.0 MiB in 1s)"}},
		{"nothing to say", stats(0, 0, 0), stats(0, 0, 0), idle, nil},
		{"no statistics (Postgres 13)", nil, nil, reading, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := explainLag(tc.before, tc.after, tc.walsender, time.Second)
			if (got == "") != (len(tc.want) == 0) {
				t.Fatalf("explainLag = %q, want %q", got, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not say %q", got, w)
				}
			}
		})
	}
}
