package pipeline

import (
	"testing"

	"go.uber.org/goleak"
)

// A session starts the producer, the replication loop, the slot monitor
// and client goroutines; a stopped pipeline must leave none behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
