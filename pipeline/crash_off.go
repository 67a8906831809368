//go:build !walstream_faults

package pipeline

// CrashHook is nil in release builds: no fault can be injected.
func CrashHook(string) func(string) { return nil }
