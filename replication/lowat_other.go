//go:build !linux

package replication

import "errors"

// Elsewhere the replication connection reads as it always did.
const lowatSupported = false

func setRcvLowat(uintptr, int) error { return errors.ErrUnsupported }
