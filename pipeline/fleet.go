package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/walstream/walstream/group"
	"github.com/walstream/walstream/kafka"
)

// Fleet is several streams run by one process, each a Pipeline of its
// own: its session, slot, checkpoint key, producer, standby wait, failure
// policy and metric labels are its own, as if it ran alone. A stream that
// stops on a permanent error stops alone; the others go on.
//
// A shared fleet (NewSharedFleet) runs only the streams its fleet's group
// gives this process (RunShared): it starts a stream's Pipeline when an
// assignment gives it the stream, and when one takes it away, cancels
// the Pipeline and waits for its Run to return (its Kafka transaction
// ended, its position confirmed, its slot closed) before it tells the
// group it no longer owns it. The new owner's Pipeline meanwhile finds
// the slot held and waits for it as a standby does, so the slot, not the
// group, keeps two processes from streaming one stream.
type Fleet struct {
	pipelines []*Pipeline
	shared    bool

	mu sync.Mutex
	// assignment is the group's last, the zero one before the first and
	// while this process is no member; want are the streams it gives this
	// process, and held those whose Pipeline runs here or is released,
	// or stopped on a permanent error while given here.
	assignment group.Assignment
	want, held map[string]bool
	// changed is closed, and replaced, at each assignment.
	changed chan struct{}
}

// NewFleet runs ps together; their configs must have passed CheckFleet.
func NewFleet(ps ...*Pipeline) *Fleet { return &Fleet{pipelines: ps} }

// NewSharedFleet runs those of ps that the fleet's group gives this
// process (RunShared).
func NewSharedFleet(ps ...*Pipeline) *Fleet {
	for _, p := range ps {
		p.shown.on.Store(false) // until the assignment gives it here
	}
	return &Fleet{pipelines: ps, shared: true, want: map[string]bool{}, held: map[string]bool{}, changed: make(chan struct{})}
}

var _ group.Handler = (*Fleet)(nil)

// membership is the fleet's group (group.Membership): Run joins it and
// calls the fleet's Assign with each assignment.
type membership interface {
	Run(ctx context.Context, h group.Handler) error
}

var _ membership = (*group.Membership)(nil)

// RunShared runs the streams m's assignments give this process until ctx
// ends or the membership ends on an error. A stream's permanent error is
// passed to stopped as it happens; the stream stays stopped here while
// the assignment gives it here (another member would meet the same error),
// and runs again when an assignment gives it here anew. It returns once
// every Pipeline has returned: the streams stopped on an error at the
// end, each a *StreamError, and the membership's error, joined.
func (f *Fleet) RunShared(ctx context.Context, m membership, stopped func(p *Pipeline, err error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(f.pipelines))
	var wg sync.WaitGroup
	for i, p := range f.pipelines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.runAssigned(ctx, p.cfg.Stream, p, p.log, func(err error) {
				if stopped != nil {
					stopped(p, err)
				}
			})
		}()
	}
	merr := m.Run(ctx, f)
	cancel() // a membership that ended on an error stops every stream
	wg.Wait()
	var joined []error
	for i, err := range errs {
		if err != nil {
			joined = append(joined, &StreamError{Stream: f.pipelines[i].cfg.Stream, Err: err})
		}
	}
	return errors.Join(append(joined, merr)...)
}

// runAssigned runs stream name (r, its Pipeline) each time the assignment
// gives it this process, and releases it each time it takes it away; it
// returns when ctx ends, with the permanent error of the stream's last
// Run, if any, which stopped was told as it happened.
func (f *Fleet) runAssigned(ctx context.Context, name string, r runner, log *slog.Logger, stopped func(err error)) error {
	var last error
	for f.await(ctx, name, true) {
		f.hold(name, true)
		log.Info("the fleet's assignment gives this process the stream: starting it", "generation", f.generation())
		rctx, release := context.WithCancel(ctx)
		go func() {
			if f.await(rctx, name, false) {
				log.Info("the fleet's assignment takes the stream elsewhere: releasing it", "to", f.owner(name), "generation", f.generation())
			}
			release()
		}()
		if last = r.Run(rctx); last != nil {
			stopped(last)
			// Stopped, it stays here while it is given here.
			f.await(rctx, name, false)
		}
		release()
		f.hold(name, false)
		if ctx.Err() != nil {
			break
		}
		log.Info("released the stream", "to", f.owner(name))
	}
	return last
}

// await waits until the assignment gives stream this process (want), or
// no longer does; false when ctx ended first.
func (f *Fleet) await(ctx context.Context, stream string, want bool) bool {
	for {
		f.mu.Lock()
		now, changed := f.want[stream], f.changed
		f.mu.Unlock()
		if now == want {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// hold says whether the process holds stream, and shows its metrics
// only while it does.
func (f *Fleet) hold(stream string, held bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held[stream] = held
	for _, p := range f.pipelines {
		if p.cfg.Stream == stream {
			p.shown.on.Store(held)
		}
	}
}

func (f *Fleet) generation() int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.assignment.Generation
}

// owner names the member the assignment gives stream to, for the log.
func (f *Fleet) owner(stream string) string {
	f.mu.Lock()
	a := f.assignment
	f.mu.Unlock()
	if o, ok := a.Owner(stream); ok {
		return fmt.Sprintf("member %s on %s", o.ID, o.Name)
	}
	return "no member (this process is not in the fleet's group now)"
}

// Owned are the streams this process holds: running, being released, or
// stopped on an error while given here; releasing are those being
// released, which the last assignment gives another member, whose claim
// of them the leader prefers: the stream does not come back here.
func (f *Fleet) Owned() (owned, releasing []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pipelines {
		if s := p.cfg.Stream; f.held[s] {
			owned = append(owned, s)
			if !f.want[s] {
				releasing = append(releasing, s)
			}
		}
	}
	return owned, releasing
}

// Assign takes the group's assignment: the streams it gives this process
// start, the others are released. The zero Assignment releases every
// stream.
func (f *Fleet) Assign(a group.Assignment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.assignment = a
	f.want = make(map[string]bool)
	for _, s := range a.Mine() {
		f.want[s] = true
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// assigned says, for a stream of a shared fleet this process neither runs
// nor releases, where it runs: 200 when the assignment gives it to
// another member, 503 when it gives it to none or is not known.
// here is true when this process runs or releases the stream, and its
// Pipeline answers.
func (f *Fleet) assigned(p *Pipeline) (here bool, code int, body string) {
	if !f.shared {
		return true, 0, ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name := p.cfg.Stream
	if f.want[name] || f.held[name] {
		return true, 0, ""
	}
	if a := f.assignment; !a.Known() && a.Lost != "" {
		return false, http.StatusServiceUnavailable, "not assigned: this process is not a member of the fleet's group now: " + a.Lost
	} else if !a.Known() {
		return false, http.StatusServiceUnavailable, "not assigned: this process has not joined the fleet's group yet"
	}
	if o, ok := f.assignment.Owner(name); ok {
		return false, http.StatusOK, fmt.Sprintf("assigned to member %s on %s (generation %d)", o.ID, o.Name, f.assignment.Generation)
	}
	return false, http.StatusServiceUnavailable, fmt.Sprintf("assigned to no member of the fleet (generation %d)", f.assignment.Generation)
}

// StreamError is the permanent error that stopped one stream of a fleet.
type StreamError struct {
	Stream string
	Err    error
}

func (e *StreamError) Error() string { return fmt.Sprintf("stream %s: %v", e.Stream, e.Err) }

func (e *StreamError) Unwrap() error { return e.Err }

// Run runs every stream until ctx ends or each has stopped. A stream's
// permanent error is passed to stopped as it happens (when stopped is not
// nil), and Run returns once every stream has returned: nil when none
// stopped on an error, else their errors joined, each a *StreamError. A
// fleet of one returns its stream's error as it is.
func (f *Fleet) Run(ctx context.Context, stopped func(p *Pipeline, err error)) error {
	runners := make([]runner, len(f.pipelines))
	for i, p := range f.pipelines {
		runners[i] = p
	}
	errs := superviseAll(ctx, runners, func(i int, err error) {
		if stopped != nil {
			stopped(f.pipelines[i], err)
		}
	})
	if len(f.pipelines) == 1 {
		return errs[0]
	}
	var joined []error
	for i, err := range errs {
		if err != nil {
			joined = append(joined, &StreamError{Stream: f.pipelines[i].cfg.Stream, Err: err})
		}
	}
	return errors.Join(joined...)
}

// runner is what superviseAll runs: a Pipeline.
type runner interface {
	Run(ctx context.Context) error
}

var _ runner = (*Pipeline)(nil)

// superviseAll runs each runner in a goroutine of its own until all have
// returned, and returns their errors by index. Unlike an errgroup it
// cancels nothing when one fails: a runner returns only on a permanent
// error or ctx's end, and one stream's permanent error is no reason to
// stop another. stopped is called with each error as it comes.
func superviseAll(ctx context.Context, rs []runner, stopped func(i int, err error)) []error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = r.Run(ctx); errs[i] != nil {
				stopped(i, errs[i])
			}
		}()
	}
	wg.Wait()
	return errs
}

// CheckFleet refuses streams that would take each other's place: two with
// one name (their metrics would be one series, and a fleet's group tells
// streams apart by name), one checkpoint key in one checkpoint topic, one
// transactional id (each would fence the other), or one slot of one
// database; and, when their process joins a fleet's group, streams on
// several Kafka clusters: the group is on one. Streams whose brokers have
// one in common are on one cluster, and a host is one whatever the case of
// its name.
func CheckFleet(cfgs []Config) error {
	ks := make([]kafka.Settings, len(cfgs))
	for i, c := range cfgs {
		ks[i] = c.Kafka
	}
	clusterOf := kafka.Clusters(ks)
	var errs []error
	seen := make(map[string]string) // what must be unique → the stream that has it
	unique := func(stream, what, value string) {
		key := what + "\x00" + value
		if first, ok := seen[key]; ok {
			errs = append(errs, fmt.Errorf("streams %s and %s have the same %s %s: give each stream its own", first, stream, what, value))
			return
		}
		seen[key] = stream
	}
	for i, c := range cfgs {
		unique(c.Stream, "name", c.Stream)
		cluster := clusterOf[i]
		unique(c.Stream, "checkpoint key", fmt.Sprintf("%q in topic %s of Kafka %s", c.CheckpointKey, c.CheckpointTopic, cluster))
		unique(c.Stream, "transactional id", fmt.Sprintf("%q in Kafka %s", c.TransactionalID, cluster))
		if c.Postgres != nil {
			unique(c.Stream, "slot", fmt.Sprintf("%q on %s:%d", c.Names.Slot, strings.ToLower(c.Postgres.Host), c.Postgres.Port))
		}
		if first := cfgs[0]; c.Fleet.Group != "" && cluster != clusterOf[0] {
			errs = append(errs, fmt.Errorf("streams %s and %s write to different Kafka clusters (%s and %s), and the fleet's group %s is on one: "+
				"run them as two fleets, or without a fleet's group", first.Stream, c.Stream, clusterOf[0], cluster, c.Fleet.Group))
		}
	}
	return errors.Join(errs...)
}

// Healthz answers as the stream's own Healthz for a fleet of one. For
// several, it fails when any stream's streaming loop is wedged, and lists
// every stream on a line of its own: a stream stopped on a permanent error
// is no reason to restart the process (a restart stops it again and
// interrupts the others), so it is listed as stopped and /readyz, the
// walstream_stopped gauge and the log say so.
//
// In a shared fleet, a stream assigned to another member answers 200,
// naming the member.
func (f *Fleet) Healthz(w http.ResponseWriter, r *http.Request) {
	if len(f.pipelines) == 1 && !f.shared {
		f.pipelines[0].Healthz(w, r)
		return
	}
	f.answer(w, r, func(p *Pipeline) (int, string) {
		if here, _, body := f.assigned(p); !here {
			return http.StatusOK, body
		}
		return p.health(time.Now())
	})
}

// Readyz answers as the stream's own Readyz for a fleet of one. For
// several, it answers 200 when every stream is ready (with ?standby=1:
// streaming or standing by), 503 otherwise, with one line per stream,
// "<stream>: <its answer>"; ?stream=<name> answers for that stream alone,
// as its own Readyz would.
//
// In a shared fleet, a stream the assignment gives another member answers
// 200, naming the member; one it gives to none, or while this process
// knows no assignment, 503.
func (f *Fleet) Readyz(w http.ResponseWriter, r *http.Request) {
	if len(f.pipelines) == 1 && !f.shared {
		f.pipelines[0].Readyz(w, r)
		return
	}
	standby := r.URL.Query().Get("standby")
	standbyOK := standby == "1" || standby == "true"
	f.answer(w, r, func(p *Pipeline) (int, string) {
		if here, code, body := f.assigned(p); !here {
			return code, body
		}
		return p.readiness(time.Now(), standbyOK)
	})
}

// answer writes each stream's answer on a line, or the one stream's that
// ?stream= names; the status is the worst of them.
func (f *Fleet) answer(w http.ResponseWriter, r *http.Request, of func(*Pipeline) (int, string)) {
	name, one := r.URL.Query().Get("stream"), r.URL.Query().Has("stream")
	alone := one || len(f.pipelines) == 1
	code := http.StatusOK
	var b strings.Builder
	for _, p := range f.pipelines {
		if one && p.cfg.Stream != name {
			continue
		}
		c, body := of(p)
		code = max(code, c)
		if alone {
			b.WriteString(body + "\n")
		} else {
			fmt.Fprintf(&b, "%s: %s\n", p.cfg.Stream, body)
		}
	}
	if b.Len() == 0 {
		http.Error(w, fmt.Sprintf("no stream %q in this process", name), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, b.String())
}
