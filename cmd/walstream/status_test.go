package main

import (
	"strings"
	"testing"
)

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

// --abort-hanging and --commit-hanging take PARTITION:OFFSET, one of them,
// for one stream; anything else is refused before Kafka is asked.
func TestEndHangingArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--abort-hanging", "684"}, `--abort-hanging "684": want PARTITION:OFFSET`},
		{[]string{"--commit-hanging", "0:x"}, `--commit-hanging "0:x": want PARTITION:OFFSET`},
		{[]string{"--abort-hanging", "-1:5"}, "want PARTITION:OFFSET"},
		{[]string{"--abort-hanging", "0:1", "--commit-hanging", "0:1"}, "give one"},
	} {
		args := append([]string{"status", "--pg-url", "postgres://walstream@127.0.0.1:1/app", "--kafka-brokers", "127.0.0.1:1"}, tc.args...)
		if _, _, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
