package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// -pg-settings adds lines to the throwaway cluster's settings, each
// name=value, and is refused where walbench starts no cluster.
func TestPGSettings(t *testing.T) {
	cfg, err := parseConfig([]string{"-out", t.TempDir(), "-pg-settings", "synchronous_commit=off, wal_writer_delay=10ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"synchronous_commit=off", "wal_writer_delay=10ms"}; !slices.Equal(cfg.PGSettings, want) {
		t.Errorf("PGSettings = %q, want %q", cfg.PGSettings, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-pg-settings", "synchronous_commit"}, `-pg-settings: "synchronous_commit" is not name=value`},
		{[]string{"-pg-settings", "=off"}, `-pg-settings: "=off" is not name=value`},
		{[]string{"-pg-settings", "fsync=off", "-pg-url", "postgres://db/x"}, "-pg-settings applies to the Postgres walbench starts"},
	} {
		if _, err := parseConfig(append([]string{"-out", t.TempDir()}, tc.args...), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}
