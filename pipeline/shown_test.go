package pipeline

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// series counts what reg gathers.
func series(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// A stream's collectors, through the wrapping of its labels, are exported
// while shown is on; one unregistered through a new wrapper is gone (as
// kprom does when a session's client closes) and may be registered again.
func TestShown(t *testing.T) {
	reg := prometheus.NewRegistry()
	sh := newShown()
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"stream": "s"}, sh)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "walstream_x_total", Help: "x"})
	wrapped.MustRegister(c)
	reg.MustRegister(sh)
	if n := series(t, reg); n != 1 {
		t.Fatalf("%d series on, want 1", n)
	}
	if err := wrapped.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "walstream_x_total", Help: "x"})); err == nil {
		t.Error("the same metric registered twice")
	}
	sh.on.Store(false)
	if n := series(t, reg); n != 0 {
		t.Fatalf("%d series off, want none", n)
	}
	sh.on.Store(true)
	if !wrapped.Unregister(c) {
		t.Fatal("unregistering through a new wrapper failed")
	}
	if n := series(t, reg); n != 0 {
		t.Fatalf("%d series after unregistering, want none", n)
	}
	wrapped.MustRegister(c)
	if n := series(t, reg); n != 1 {
		t.Fatalf("%d series registered again, want 1", n)
	}
}
