package store

import "testing"

// The count of an identity's records: the most any one run of Debezium
// wrote, and every record walstream wrote; each claims one.
func TestTally(t *testing.T) {
	const own = 7
	for _, c := range []struct {
		name string
		pids []int64
		want int
	}{
		{"one record", []int64{1}, 1},
		{"two events of one run", []int64{1, 1}, 2},
		{"one event written by two runs", []int64{1, 2}, 1},
		{"two events of one run, one written again by the next", []int64{1, 1, 2}, 2},
		{"walstream's own", []int64{own, own}, 2},
		{"Debezium's and walstream's", []int64{1, 2, own}, 2},
		{"non-idempotent producers (no producer id)", []int64{-1, -1}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tl tally
			for _, pid := range c.pids {
				tl.add(pid, own)
			}
			if got := tl.copies(); got != c.want {
				t.Fatalf("copies = %d, want %d", got, c.want)
			}
			for i := range c.want {
				if !tl.claim() {
					t.Fatalf("claim %d refused", i+1)
				}
			}
			if tl.claim() {
				t.Fatalf("claim %d granted, want at most %d", c.want+1, c.want)
			}
		})
	}
	var none *tally
	if none.claim() {
		t.Fatal("an identity without records claimed one")
	}
}
