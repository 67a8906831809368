package main

import (
	"testing"
	"time"
)

func TestDiffSince(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Time{}, false},
		{"1h", now.Add(-time.Hour), false},
		{"2026-11-26T08:30:00Z", time.Date(2026, 11, 26, 8, 30, 0, 0, time.UTC), false},
		{"yesterday", time.Time{}, true},
	} {
		got, err := parseSince(c.in, now)
		if (err != nil) != c.err || !got.Equal(c.want) {
			t.Errorf("parseSince(%q) = %s, %v; want %s, error %v", c.in, got, err, c.want, c.err)
		}
	}
}
