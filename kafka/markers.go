package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/secret"
)

// Markers tells when transactional records are decided by their
// producers' markers (decided.go), for any number of waiters: one fetch
// loop per partition, read_uncommitted with control records, serves every
// record waited for there. The streams of a process commit their
// checkpoints to one partition of one topic, so one loop with one client
// decides every stream's commits, where a reader per stream fetched the
// same records once for each. A loop runs only while someone waits.
//
// A wait has a due time: the loop reads for it no sooner, unless a read
// for another wait decides it first. Waits that can be answered late (a
// commit to confirm to Postgres) are so answered together, several
// streams' commits by one fetch; one that cannot wait (Wait) is read for
// at once.
type Markers struct {
	opts []kgo.Opt
	// wait is how long a fetch waits at the broker for what follows.
	wait time.Duration

	mu      sync.Mutex
	watches map[topicPartition]*watch
	closed  bool
	ctx     context.Context // ends at Close; the loops' fetches use it
	cancel  context.CancelFunc
	loops   sync.WaitGroup
}

type topicPartition struct {
	topic string
	p     int32
}

// NewMarkers returns a Markers whose loops connect with connOpts, each
// with a client of its own, created when it first runs.
func NewMarkers(connOpts []kgo.Opt) *Markers {
	ctx, cancel := context.WithCancel(context.Background())
	return &Markers{opts: connOpts, wait: 500 * time.Millisecond, watches: make(map[topicPartition]*watch), ctx: ctx, cancel: cancel}
}

// Close stops the loops and closes their clients; a wait still running
// ends with ErrMarkersClosed.
func (m *Markers) Close() {
	m.mu.Lock()
	m.closed = true
	m.cancel()
	for _, w := range m.watches {
		w.failAll(ErrMarkersClosed)
	}
	m.mu.Unlock()
	m.loops.Wait()
	for _, w := range m.watches {
		if w.reader != nil {
			w.reader.Close()
		}
	}
}

// ErrMarkersClosed: the Markers was closed while a wait ran.
var ErrMarkersClosed = errors.New("the reader of markers was closed")

// ErrNoRecord: the partition holds no record a producer wrote at the
// offset waited for (none, or a marker).
var ErrNoRecord = errors.New("the partition holds no record at the offset")

// Decision is what became of a record waited for, and the partition's last
// stable offset at the last fetch (-1 before any).
type Decision struct {
	Fate   Fate
	Stable int64
	// At is when the wait ended: when the fetch that decided the record
	// was read, or the wait began, for a record read before it.
	At time.Time
}

// Watch is one wait for a record to be decided.
type Watch struct {
	m  *Markers
	w  *watch
	wt *waiter
}

// Watch starts waiting until the transactional record at offset of
// partition p of topic is decided: the first marker of its producer id
// after it commits or aborts it. The loop reads for it at due, or sooner
// when another wait's read or Hurry asks.
func (m *Markers) Watch(topic string, p int32, offset int64, due time.Time) *Watch {
	wt := &waiter{offset: offset, pid: -1, due: due, done: make(chan struct{})}
	m.mu.Lock()
	defer m.mu.Unlock()
	tp := topicPartition{topic, p}
	w := m.watches[tp]
	if w == nil {
		w = &watch{tp: tp, next: -1, stable: -1, kick: make(chan struct{}, 1)}
		m.watches[tp] = w
	}
	x := &Watch{m: m, w: w, wt: wt}
	if m.closed {
		w.finish(wt, FateOpen, ErrMarkersClosed)
		return x
	}
	w.add(wt)
	m.start(w)
	return x
}

// start runs w's loop unless it runs, and wakes it if it sleeps; m.mu is
// held.
func (m *Markers) start(w *watch) {
	if len(w.waiters) == 0 {
		return
	}
	if !w.running {
		w.running = true
		m.loops.Add(1)
		go m.loop(w)
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Done is closed once the record is decided, or the wait failed.
func (x *Watch) Done() <-chan struct{} { return x.wt.done }

// Hurry moves the wait's due time to by, when that is sooner.
func (x *Watch) Hurry(by time.Time) {
	x.m.mu.Lock()
	defer x.m.mu.Unlock()
	if x.wt.finished || !by.Before(x.wt.due) {
		return
	}
	x.wt.due = by
	x.m.start(x.w)
}

// Wait reads for the record at once (Hurry) and returns its decision: its
// fate, ErrNoRecord when the partition holds no record there, or, when
// ctx ends first, FateOpen with ctx's error (and the last fetch's, if one
// failed), and the wait goes on.
func (x *Watch) Wait(ctx context.Context) (Decision, error) {
	x.Hurry(time.Now())
	select {
	case <-x.wt.done:
		return x.wt.d, x.wt.err
	case <-ctx.Done():
	}
	x.m.mu.Lock()
	defer x.m.mu.Unlock()
	if x.wt.finished { // decided meanwhile
		return x.wt.d, x.wt.err
	}
	return Decision{Stable: x.w.stable}, errors.Join(ctx.Err(), x.w.err)
}

// Stop ends the wait: nobody needs the record decided any longer.
func (x *Watch) Stop() {
	x.m.mu.Lock()
	defer x.m.mu.Unlock()
	if !x.wt.finished {
		x.w.remove(x.wt)
	}
}

// loop fetches w's partition while anyone waits there: at once for a wait
// that is due, else at the first one's due time.
func (m *Markers) loop(w *watch) {
	defer m.loops.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		m.mu.Lock()
		if len(w.waiters) == 0 || m.closed {
			w.running = false
			m.mu.Unlock()
			return
		}
		if due := w.due(); due.After(time.Now()) {
			m.mu.Unlock()
			if timer == nil {
				timer = time.NewTimer(time.Until(due))
			} else {
				timer.Reset(time.Until(due))
			}
			select {
			case <-m.ctx.Done():
			case <-w.kick:
			case <-timer.C:
			}
			continue
		}
		from := w.from()
		if w.reader == nil {
			r, err := NewPartitionReader(m.opts)
			if err != nil {
				w.failAll(err)
				w.running = false
				m.mu.Unlock()
				return
			}
			w.reader = r
		}
		m.mu.Unlock()
		// The first fetch returns the records at once; later ones wait at
		// the broker for what follows them, the markers above all.
		f, err := w.reader.Fetch(m.ctx, w.tp.topic, w.tp.p, from, false, m.wait)
		m.mu.Lock()
		if err != nil {
			w.err = err
			m.mu.Unlock()
			select {
			case <-m.ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		w.err, w.stable = nil, f.LSO
		w.read(from, f)
		m.mu.Unlock()
	}
}

// watch is one partition's waiters and what its loop read. The Markers'
// mutex guards it; reader is the loop's alone.
type watch struct {
	tp      topicPartition
	reader  *PartitionReader
	running bool
	kick    chan struct{} // wakes the loop from its wait for a due time
	waiters []*waiter
	// next is the offset the loop reads from next, -1 before it read.
	next int64
	// seen are the last records read, in offset order, from seen[0] to
	// next: a waiter whose record was read before it came is decided
	// from them, without reading them again.
	seen   []seenRecord
	stable int64
	err    error // of the last fetch, nil once one succeeds
}

// seenLimit bounds seen: far more records than the checkpoint partition
// takes while a commit is acknowledged and waited for.
const seenLimit = 4096

type seenRecord struct {
	offset int64
	pid    int64
	marker bool
	fate   Fate
}

type waiter struct {
	offset int64
	pid    int64     // the record's producer id, -1 until it is read
	due    time.Time // when the loop reads for it at the latest
	// done is closed once d and err are set (finished).
	done     chan struct{}
	finished bool
	d        Decision
	err      error
}

// due is the first due time of w's waits.
func (w *watch) due() time.Time {
	var first time.Time
	for i, wt := range w.waiters {
		if i == 0 || wt.due.Before(first) {
			first = wt.due
		}
	}
	return first
}

// add takes wt, deciding it from what was read when that covers its
// record.
func (w *watch) add(wt *waiter) {
	if w.next >= 0 && wt.offset < w.next && len(w.seen) > 0 && wt.offset >= w.seen[0].offset {
		i := sort.Search(len(w.seen), func(i int) bool { return w.seen[i].offset >= wt.offset })
		if i == len(w.seen) || w.seen[i].offset != wt.offset || w.seen[i].marker {
			w.finish(wt, FateOpen, ErrNoRecord)
			return
		}
		wt.pid = w.seen[i].pid
		for _, s := range w.seen[i+1:] {
			if s.marker && s.pid == wt.pid {
				w.finish(wt, s.fate, nil)
				return
			}
		}
	}
	w.waiters = append(w.waiters, wt)
}

func (w *watch) remove(wt *waiter) {
	for i, o := range w.waiters {
		if o == wt {
			w.waiters = append(w.waiters[:i], w.waiters[i+1:]...)
			return
		}
	}
}

// from is where the loop reads next: where it stopped; or further on when
// every waiter's record is further on and none waits for a marker (the
// partition in between holds other producers' records, which decide
// nothing waited for); or back at a waiter's record that was read before
// it came and is no longer in seen.
func (w *watch) from() int64 {
	low, markers := int64(-1), false
	for _, wt := range w.waiters {
		switch {
		case wt.pid >= 0:
			markers = true
		case low < 0 || wt.offset < low:
			low = wt.offset
		}
	}
	if low >= 0 && (w.next < 0 || low < w.next || low > w.next && !markers) {
		w.next, w.seen = low, w.seen[:0]
	}
	return w.next
}

// read takes one fetch from from: each record waited for gives its
// producer id, each marker decides the records of its producer id before
// it, and a record waited for that the fetch passed without holding is
// missing.
func (w *watch) read(from int64, f Fetched) {
	for _, r := range f.Records {
		fa, marker := MarkerFate(r)
		w.seen = append(w.seen, seenRecord{offset: r.Offset, pid: r.ProducerID, marker: marker, fate: fa})
		kept := w.waiters[:0]
		for _, wt := range w.waiters {
			switch {
			case wt.offset == r.Offset && marker: // no record a producer wrote
				w.finish(wt, FateOpen, ErrNoRecord)
				continue
			case wt.offset == r.Offset:
				wt.pid = r.ProducerID
			case marker && wt.pid >= 0 && wt.pid == r.ProducerID && r.Offset > wt.offset:
				w.finish(wt, fa, nil)
				continue
			}
			kept = append(kept, wt)
		}
		w.waiters = kept
	}
	if n := len(w.seen) - seenLimit; n > 0 {
		w.seen = append(w.seen[:0], w.seen[n:]...)
	}
	next := max(w.next, f.Next)
	kept := w.waiters[:0]
	for _, wt := range w.waiters {
		if wt.pid < 0 && wt.offset < next && wt.offset >= from {
			w.finish(wt, FateOpen, ErrNoRecord)
			continue
		}
		kept = append(kept, wt)
	}
	w.waiters = kept
	w.next = next
}

func (w *watch) finish(wt *waiter, fa Fate, err error) {
	wt.d, wt.err, wt.finished = Decision{Fate: fa, Stable: w.stable, At: time.Now()}, err, true
	close(wt.done)
}

func (w *watch) failAll(err error) {
	for _, wt := range w.waiters {
		w.finish(wt, FateOpen, fmt.Errorf("reading topic %s partition %d: %w", w.tp.topic, w.tp.p, err))
	}
	w.waiters = nil
}

// SameAccess reports whether clients made from c and o reach the same
// brokers as the same principal, so that one client may read for both.
// Secrets held in files are the same when their paths are.
func (c Settings) SameAccess(o Settings) bool {
	return c.Cluster() == o.Cluster() && sameTLS(c.TLS, o.TLS) &&
		strings.EqualFold(c.SASLMechanism, o.SASLMechanism) && c.SASLUser == o.SASLUser && c.SASLPassword == o.SASLPassword &&
		samePath(c.SASLPasswordFile, o.SASLPasswordFile) &&
		c.OAuth.TokenFile == o.OAuth.TokenFile && c.OAuth.TokenURL == o.OAuth.TokenURL &&
		c.OAuth.ClientID == o.OAuth.ClientID && c.OAuth.ClientSecret == o.OAuth.ClientSecret &&
		samePath(c.OAuth.ClientSecretFile, o.OAuth.ClientSecretFile) && slices.Equal(c.OAuth.Scopes, o.OAuth.Scopes)
}

// sameTLS: both plain, or both TLS with the same server name and the same
// files for roots and client certificate (a principal under mutual TLS).
func sameTLS(a, b *secret.TLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ServerName == b.ServerName && samePath(a.CA, b.CA) && samePath(a.Cert, b.Cert) && samePath(a.Key, b.Key)
}

func samePath(a, b *secret.File) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Path == b.Path
}
