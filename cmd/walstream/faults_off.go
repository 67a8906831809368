//go:build !walstream_faults

package main

// crashHook is nil in release builds: no fault can be injected.
func crashHook() func(string) { return nil }
