package pipeline

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// shown holds a stream's metrics and exports them only while on. A
// process of a shared fleet shows a stream's only while the fleet's
// assignment has the stream here: what it last saw of a stream now
// streamed elsewhere (a lag, a stop, a slot's retained WAL) would stand
// beside the figures of the process that streams it, and keep alerts
// firing that aggregate over processes.
//
// It is a Registerer for the stream's collectors, which a registry of its
// own checks as the process's would, and a Collector of the process's
// registry, describing them all.
type shown struct {
	on    atomic.Bool
	check *prometheus.Registry
	mu    sync.Mutex
	cs    []prometheus.Collector
	ids   []string // each collector's descriptors (descs), for Unregister
}

var (
	_ prometheus.Registerer = (*shown)(nil)
	_ prometheus.Collector  = (*shown)(nil)
)

// newShown returns a shown, on; it is registered once its collectors
// are, so that the registry checks what they describe.
func newShown() *shown {
	s := &shown{check: prometheus.NewRegistry()}
	s.on.Store(true)
	return s
}

func (s *shown) Register(c prometheus.Collector) error {
	if err := s.check.Register(c); err != nil {
		return err
	}
	id := descs(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cs, s.ids = append(s.cs, c), append(s.ids, id)
	return nil
}

func (s *shown) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := s.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister removes the collector with c's descriptors, as a registry
// does: a wrapping Registerer passes a new wrapper of the collector each
// time.
func (s *shown) Unregister(c prometheus.Collector) bool {
	if !s.check.Unregister(c) {
		return false
	}
	id := descs(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.cs {
		if s.cs[i] == c || id != "" && s.ids[i] == id {
			s.cs, s.ids = slices.Delete(s.cs, i, i+1), slices.Delete(s.ids, i, i+1)
			break
		}
	}
	return true
}

// descs names a collector by its descriptors.
func descs(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var ds []string
	for d := range ch {
		ds = append(ds, d.String())
	}
	slices.Sort(ds)
	return strings.Join(ds, "\n")
}

func (s *shown) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s.collectors() {
		c.Describe(ch)
	}
}

func (s *shown) Collect(ch chan<- prometheus.Metric) {
	if !s.on.Load() {
		return
	}
	for _, c := range s.collectors() {
		c.Collect(ch)
	}
}

func (s *shown) collectors() []prometheus.Collector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cs)
}
