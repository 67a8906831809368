package publish

import (
	"testing"

	"go.uber.org/goleak"
)

// Producers start client goroutines; every test must leave none behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
