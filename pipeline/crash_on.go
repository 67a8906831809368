//go:build walstream_faults

package pipeline

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
)

// CrashHook returns a Config.Hook that kills the process with SIGKILL at a
// named point, for crash tests: after-produce, before-commit and
// after-commit (of a Kafka transaction, before Postgres hears of it) and
// mid-transaction (after a message decoded inside a Postgres transaction)
// and mid-stream (after a message of a transaction streamed in progress,
// kept until it commits).
// spec "after-commit:3" crashes the third time the point is reached; ""
// never. Only builds tagged walstream_faults have it.
func CrashHook(spec string) func(string) {
	if spec == "" {
		return nil
	}
	point, nth := spec, 1
	if p, n, ok := strings.Cut(spec, ":"); ok {
		point = p
		if _, err := fmt.Sscan(n, &nth); err != nil {
			panic("crash point " + spec + ": " + err.Error())
		}
	}
	var hits atomic.Int64
	return func(at string) {
		if at == point && hits.Add(1) == int64(nth) {
			fmt.Fprintf(os.Stderr, "walstream: crash point %s reached, killing myself\n", at)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
