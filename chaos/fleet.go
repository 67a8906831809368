package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A fleet (-chaos.fleet): every process runs one config of every stream,
// and the processes share the streams through their fleet's Kafka group
// (docs/operations.md, A fleet across processes). Its faults act on the
// process of a stream picked at random, or on every process in turn; the
// checks stay per stream, and a fleet must settle after each.

// move is how long the streams a process ran took to stream in the
// others (or in its restarted self) after a fault on it.
type move struct {
	Kind    string  `json:"kind"`
	Streams int     `json:"streams"`
	Seconds float64 `json:"seconds"`
}

// moved waits up to a minute until every stream of streams streams in a
// live process other than p, records how long after since that was, and
// says so.
func (f *faults) moved(ctx context.Context, kind string, p *wsProc, streams []string, since time.Time) string {
	if len(streams) == 0 {
		return "it streamed nothing"
	}
	for deadline := since.Add(time.Minute); ctx.Err() == nil; sleep(ctx, 100*time.Millisecond) {
		var elsewhere []string
		for _, s := range f.rig.processes() {
			if q := s.current(); q != nil && q != p {
				elsewhere = append(elsewhere, q.streamingNow()...)
			}
		}
		if !slices.ContainsFunc(streams, func(s string) bool { return !slices.Contains(elsewhere, s) }) {
			took := time.Since(since)
			f.mu.Lock()
			f.rep.Moves = append(f.rep.Moves, move{Kind: kind, Streams: len(streams), Seconds: took.Seconds()})
			f.mu.Unlock()
			return fmt.Sprintf("its %d streams streaming elsewhere after %s", len(streams), took.Round(10*time.Millisecond))
		}
		if time.Now().After(deadline) {
			f.failf("%s of walstream #%d: its streams %s not all streaming in another process a minute later", kind, p.id, strings.Join(streams, ", "))
			return "its streams did not move"
		}
	}
	return "interrupted"
}

// settled waits up to within for the fleet to stream every stream once,
// each process about as many as the others; false when it did not.
func (f *faults) settled(ctx context.Context, within time.Duration) bool {
	want := make([]string, len(f.rig.streams))
	for i, st := range f.rig.streams {
		want[i] = st.name
	}
	slices.Sort(want)
	for deadline := time.Now().Add(within); ctx.Err() == nil && time.Now().Before(deadline); sleep(ctx, 200*time.Millisecond) {
		var all []string
		lo, hi := len(want), 0
		for _, s := range f.rig.processes() {
			q := s.current()
			if q == nil {
				lo = -1
				continue
			}
			mine := q.streamingNow()
			all = append(all, mine...)
			lo, hi = min(lo, len(mine)), max(hi, len(mine))
		}
		slices.Sort(all)
		if lo >= 0 && hi-lo <= 1 && slices.Equal(all, want) {
			return true
		}
	}
	return false
}

// leave stops p with SIGTERM, as a rollout or a scale-down does: it
// leaves the group and releases its streams, which must stream in the
// others within seconds; p must exit 0. A while later its supervisor
// starts a process again, which joins and takes its share.
func (f *faults) leave(ctx context.Context, p *wsProc) string {
	moved := f.terminate(ctx, faultTerm, p)
	sleep(ctx, time.Duration(f.rng.Int64N(int64(10*time.Second))))
	np := f.restart(p.sup, "")
	joined := time.Now()
	if np == nil || !f.settled(ctx, time.Minute) {
		f.failf("the fleet did not settle within a minute of walstream #%d joining after #%d left", idOf(np), p.id)
		return fmt.Sprintf("#%d left (%s); #%d joined, and the fleet did not settle", p.id, moved, idOf(np))
	}
	return fmt.Sprintf("#%d left (%s); #%d joined, the fleet settled %s later", p.id, moved, np.id, time.Since(joined).Round(10*time.Millisecond))
}

// terminate stops p with SIGTERM, which must end it with exit 0 within
// 30 s, and says how long its streams took to stream in the others.
func (f *faults) terminate(ctx context.Context, kind string, p *wsProc) (moved string) {
	streams := p.streamingNow()
	at := time.Now()
	exited := make(chan struct{})
	go func() { defer close(exited); stopProc(p, syscall.SIGTERM, 30*time.Second) }()
	moved = f.moved(ctx, kind, p, streams, at)
	<-exited
	if p.Err() != nil {
		f.failf("%s: walstream #%d did not exit 0 within 30s of SIGTERM: %s\n%s", kind, p.id, p.ExitDesc(), p.LastLines(10))
	}
	return moved
}

func idOf(p *wsProc) int {
	if p == nil {
		return 0
	}
	return p.id
}

// fleetPause stops st's process with SIGSTOP for d, then lets it go on.
// Past the session timeout the group gives its streams to the others
// meanwhile: once it runs again it must stop them (its slots are another
// process's by then, its transactional ids fenced), say it is no longer a
// member, and join again; within the session timeout nothing moves. The
// checker judges the rows either way.
func (f *faults) fleetPause(ctx context.Context, st *stream, d time.Duration) string {
	p := f.current(st)
	if p == nil {
		return "no walstream running"
	}
	streams := p.streamingNow()
	lostBefore := strings.Count(p.Log(), msgLost)
	p.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	past := d > sessionTimeout
	var movedText string
	if past {
		movedText = f.moved(ctx, faultFleetPause, p, streams, stopped)
	}
	sleep(ctx, time.Until(stopped.Add(d)))
	p.Signal(syscall.SIGCONT)
	resumed := time.Now()
	outcome := "went on"
	for deadline := resumed.Add(30 * time.Second); ctx.Err() == nil && time.Now().Before(deadline); sleep(ctx, 200*time.Millisecond) {
		if p.Exited() {
			outcome = "exited"
			break
		}
		if strings.Count(p.Log(), msgLost) > lostBefore {
			outcome = "lost the group"
			if !past {
				break
			}
			outcome = "stopped its streams and joined again"
			break
		}
		if !past && time.Since(resumed) > 3*time.Second {
			break
		}
	}
	switch {
	case past && outcome != "stopped its streams and joined again":
		f.failf("walstream #%d, paused %s past the session timeout, %s instead of stopping its streams:\n%s", p.id, d.Round(100*time.Millisecond), outcome, p.LastLines(15))
	case !past && outcome != "went on":
		f.note("walstream #%d, paused %s, %s", p.id, d.Round(100*time.Millisecond), outcome)
	}
	if p.Exited() {
		f.restart(p.sup, "")
	}
	f.mu.Lock()
	f.rep.FleetPauses[map[bool]string{true: "past", false: "brief"}[past]+": "+outcome]++
	f.mu.Unlock()
	if !f.settled(ctx, time.Minute) {
		f.failf("the fleet did not settle within a minute of walstream #%d's pause", p.id)
	}
	if past {
		return fmt.Sprintf("#%d for %s (%s): %s", p.id, d.Round(100*time.Millisecond), movedText, outcome)
	}
	return fmt.Sprintf("#%d for %s: %s", p.id, d.Round(100*time.Millisecond), outcome)
}

// msgLost is what a process of a fleet logs when it stops its streams,
// no longer a member of its group; msgNotMember what its /readyz says of
// each stream then.
const (
	msgLost      = "no longer a member of the fleet's group"
	msgNotMember = "not assigned: this process is not a member of the fleet's group now"
)

// readyz asks /readyz about st of the process that streams it; in a
// fleet, of the process the assignment gives it to, or of one that knows
// no assignment (code 0 when none answers).
func (f *faults) readyz(st *stream) (code int, body string) {
	if !f.fleet {
		if p := st.proc(); p != nil {
			return getReadyz(p, st)
		}
		return 0, ""
	}
	for _, s := range st.sups {
		if p := s.current(); p != nil {
			if code, body = getReadyz(p, st); code != 0 && !strings.HasPrefix(body, "assigned to member ") {
				return code, body
			}
		}
	}
	return code, body
}

// rolling restarts every process in turn as a Deployment's rollout does
// (maxSurge 1, maxUnavailable 0): a new process first, which joins and
// takes its share, then the old one stopped with SIGTERM, which must exit
// 0; the fleet must settle after each.
func (f *faults) rolling(ctx context.Context) string {
	var steps []string
	for _, sup := range f.rig.processes() {
		old := sup.current()
		if old == nil {
			continue
		}
		sup.detach(old)
		np := f.restart(sup, "")
		if np == nil {
			stopProc(old, syscall.SIGKILL, 10*time.Second)
			continue
		}
		// It joins and takes its share from the others, the old one too.
		for deadline := time.Now().Add(time.Minute); len(np.streamingNow()) == 0; sleep(ctx, 200*time.Millisecond) {
			if time.Now().After(deadline) || ctx.Err() != nil {
				f.failf("rollout: walstream #%d streamed nothing within a minute of its start:\n%s", np.id, np.LastLines(15))
				break
			}
		}
		moved := f.terminate(ctx, faultRolling, old)
		if !f.settled(ctx, time.Minute) {
			f.failf("rollout: the fleet did not settle within a minute of #%d replacing #%d", np.id, old.id)
		}
		steps = append(steps, fmt.Sprintf("#%d for #%d (%s)", np.id, old.id, moved))
	}
	return strings.Join(steps, "; ")
}
