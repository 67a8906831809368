//go:build walstream_faults

package pipeline

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// CrashHook returns a Config.Hook that kills the process with SIGKILL at a
// named point, for crash tests: after-produce, before-commit and
// after-commit (of a Kafka transaction, before Postgres hears of it) and
// mid-transaction (after a message decoded inside a Postgres transaction)
// and mid-stream (after a message of a transaction streamed in progress,
// kept until it commits), or any other point Config.Hook names (slot-held:
// a session that holds its slot and has not yet fenced or read).
// spec "after-commit:3" crashes the third time the point is reached; ""
// never. "after-produce:3:stop" stops the process there with SIGSTOP
// instead, to go on when the test sends SIGCONT: a process paused with a
// Kafka transaction open. Only builds tagged walstream_faults have it.
func CrashHook(spec string) func(string) {
	if spec == "" {
		return nil
	}
	parts := strings.Split(spec, ":")
	point, nth, stop := parts[0], 1, false
	if len(parts) > 1 {
		if _, err := fmt.Sscan(parts[1], &nth); err != nil {
			panic("crash point " + spec + ": " + err.Error())
		}
	}
	if len(parts) > 2 {
		if parts[2] != "stop" {
			panic("crash point " + spec + ": the action after the count can only be stop")
		}
		stop = true
	}
	var hits atomic.Int64
	return func(at string) {
		if at != point || hits.Add(1) != int64(nth) {
			return
		}
		if stop {
			fmt.Fprintf(os.Stderr, "walstream: stop point %s reached, stopping myself\n", at)
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			// The signal stops the process a moment later: go on only
			// once it has, so that nothing of the commit starts before.
			time.Sleep(100 * time.Millisecond)
			return
		}
		fmt.Fprintf(os.Stderr, "walstream: crash point %s reached, killing myself\n", at)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
