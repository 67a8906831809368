package store

import (
	"testing"

	"go.uber.org/goleak"
)

// Readers start client goroutines; every test must leave none behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
