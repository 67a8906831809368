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

// -fleet-servers spreads the fleet's streams over servers walbench starts:
// no more than the streams, none beside a server given with -pg-url.
func TestFleetServers(t *testing.T) {
	cfg, err := parseConfig([]string{"-out", t.TempDir(), "-fleet-streams", "20", "-fleet-servers", "4"}, io.Discard)
	if err != nil || cfg.FleetServers != 4 {
		t.Fatalf("parseConfig = %+v, %v; want 4 servers", cfg, err)
	}
	for _, args := range [][]string{
		{"-fleet-servers", "0"},
		{"-fleet-streams", "3", "-fleet-servers", "4"},
		{"-fleet-servers", "2", "-pg-url", "postgres://db/x"},
	} {
		if _, err := parseConfig(append([]string{"-out", t.TempDir()}, args...), io.Discard); err == nil || !strings.Contains(err.Error(), "-fleet-servers must be") {
			t.Errorf("%q: %v, want -fleet-servers refused", args, err)
		}
	}
}
