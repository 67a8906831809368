package replication

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestCreateSlotSQL(t *testing.T) {
	n := Names{Slot: "walstream"}
	if got, want := n.CreateSlotSQL(true), "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput', false, false, true)"; got != want {
		t.Fatalf("CreateSlotSQL(true) = %q, want %q", got, want)
	}
	if got, want := n.CreateSlotSQL(false), "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')"; got != want {
		t.Fatalf("CreateSlotSQL(false) = %q, want %q", got, want)
	}
	for v, want := range map[int]bool{140012: false, 160004: false, 170000: true, 180001: true} {
		if got := SupportsFailoverSlots(v); got != want {
			t.Errorf("SupportsFailoverSlots(%d) = %v, want %v", v, got, want)
		}
	}
}

func TestFailoverSetup(t *testing.T) {
	s := Names{Slot: "walstream"}.FailoverSetup("app")
	for _, want := range []string{"synchronized_standby_slots", "sync_replication_slots = on", "hot_standby_feedback = on",
		"primary_slot_name", "dbname=app", "ALTER_REPLICATION_SLOT walstream (FAILOVER true)", "target_session_attrs=primary"} {
		if !strings.Contains(s, want) {
			t.Errorf("FailoverSetup lacks %q:\n%s", want, s)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "--") {
			t.Errorf("line %q is not an SQL comment: init's output must stay runnable SQL", line)
		}
	}
}

func TestMultiHostWarning(t *testing.T) {
	for _, tc := range []struct {
		url  string
		warn bool
	}{
		{"postgres://u@a:5432/db", false},
		{"postgres://u@a:5432,b:5433/db", true},
		{"postgres://u@a:5432,b:5433/db?target_session_attrs=primary", false},
		{"postgres://u@a:5432,b:5433/db?target_session_attrs=read-write", false},
		{"postgres://u@a:5432/db?sslmode=prefer", false}, // a TLS fallback to the same host
	} {
		t.Run(tc.url, func(t *testing.T) {
			cfg, err := pgconn.ParseConfig(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if got := MultiHostWarning(cfg); (got != "") != tc.warn {
				t.Fatalf("MultiHostWarning(%s) = %q, want a warning: %v", tc.url, got, tc.warn)
			}
		})
	}
}
