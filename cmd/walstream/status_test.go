package main

import "testing"

func TestCaughtUpText(t *testing.T) {
	sec := 1.5
	for _, tc := range []struct {
		name     string
		caughtUp bool
		lag      int64
		seconds  *float64
		want     string
	}{
		{"caught up", true, 0, nil, "yes"},
		{"behind, no flush_lag", false, 56, nil, "no, 56 B behind"},
		{"behind", false, 33 << 20, &sec, "no, 33.0 MiB and 1.500 s behind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := caughtUpText(tc.caughtUp, tc.lag, tc.seconds); got != tc.want {
				t.Fatalf("caughtUpText = %q, want %q", got, tc.want)
			}
		})
	}
}
