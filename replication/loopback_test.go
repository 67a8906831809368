package replication

import "testing"

// TestLoopback: an unencrypted Postgres connection to a host other than
// loopback is warned about; the test cluster listens on loopback only, so
// this checks the rule itself.
func TestLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "/var/run/postgresql": true,
		"db.internal": false, "10.1.2.3": false} {
		if got := Loopback(host); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", host, got, want)
		}
	}
}
