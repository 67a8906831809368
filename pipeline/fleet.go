package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Fleet is several streams run by one process, each a Pipeline of its
// own: its session, slot, checkpoint key, producer, standby wait, failure
// policy and metric labels are its own, as if it ran alone. A stream that
// stops on a permanent error stops alone; the others go on.
type Fleet struct {
	pipelines []*Pipeline
}

// NewFleet runs ps together; their configs must have passed CheckFleet.
func NewFleet(ps ...*Pipeline) *Fleet { return &Fleet{pipelines: ps} }

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
// one name (their metrics would be one series), one checkpoint key in one
// checkpoint topic, one transactional id (each would fence the other), or
// one slot of one database.
func CheckFleet(cfgs []Config) error {
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
	for _, c := range cfgs {
		unique(c.Stream, "name", c.Stream)
		cluster := strings.Join(c.Kafka.Brokers, ",")
		unique(c.Stream, "checkpoint key", fmt.Sprintf("%q in topic %s of Kafka %s", c.CheckpointKey, c.CheckpointTopic, cluster))
		unique(c.Stream, "transactional id", fmt.Sprintf("%q in Kafka %s", c.TransactionalID, cluster))
		if c.Postgres != nil {
			unique(c.Stream, "slot", fmt.Sprintf("%q on %s:%d", c.Names.Slot, c.Postgres.Host, c.Postgres.Port))
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
func (f *Fleet) Healthz(w http.ResponseWriter, r *http.Request) {
	if len(f.pipelines) == 1 {
		f.pipelines[0].Healthz(w, r)
		return
	}
	f.answer(w, r, func(p *Pipeline) (int, string) { return p.health(time.Now()) })
}

// Readyz answers as the stream's own Readyz for a fleet of one. For
// several, it answers 200 when every stream is ready (with ?standby=1:
// streaming or standing by), 503 otherwise, with one line per stream,
// "<stream>: <its answer>"; ?stream=<name> answers for that stream alone,
// as its own Readyz would.
func (f *Fleet) Readyz(w http.ResponseWriter, r *http.Request) {
	if len(f.pipelines) == 1 {
		f.pipelines[0].Readyz(w, r)
		return
	}
	standby := r.URL.Query().Get("standby")
	standbyOK := standby == "1" || standby == "true"
	f.answer(w, r, func(p *Pipeline) (int, string) { return p.readiness(time.Now(), standbyOK) })
}

// answer writes each stream's answer on a line, or the one stream's that
// ?stream= names; the status is the worst of them.
func (f *Fleet) answer(w http.ResponseWriter, r *http.Request, of func(*Pipeline) (int, string)) {
	name, one := r.URL.Query().Get("stream"), r.URL.Query().Has("stream")
	code := http.StatusOK
	var b strings.Builder
	for _, p := range f.pipelines {
		if one && p.cfg.Stream != name {
			continue
		}
		c, body := of(p)
		code = max(code, c)
		if one {
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
