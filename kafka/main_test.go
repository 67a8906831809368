package kafka

import (
	"testing"

	"go.uber.org/goleak"
)

// Clients start goroutines; every test must leave none behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
