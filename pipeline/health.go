package pipeline

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/replication"
)

// metrics are the pipeline's metrics; each stage package declares its own.
type metrics struct {
	repl       *replication.Metrics
	slot       *replication.SlotMetrics
	pub        *publish.Metrics
	reconnects *prometheus.CounterVec
	errors     *prometheus.CounterVec
	standby    prometheus.Gauge
	skipped    prometheus.Counter
	phantoms   prometheus.Gauge // set when a start finds phantom events
}

func newMetrics(reg prometheus.Registerer, st *state) metrics {
	m := metrics{
		repl: replication.NewMetrics(reg),
		slot: replication.NewSlotMetrics(reg),
		pub:  publish.NewMetrics(reg),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_reconnects_total", Help: "Sessions restarted after a transient error, by the peer that failed."}, []string{"peer"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walstream_errors_total", Help: "Errors that ended a session, by kind."}, []string{"kind"}),
		standby: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_standby", Help: "1 while another instance streams the slot and this one waits for it."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walstream_replayed_events_skipped_total", Help: "Replayed events dropped because the checkpoint in Kafka already covers them."}),
		phantoms: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_phantom_events",
			Help: "Events published from WAL the server's history does not have, found at the last start (-1: some, number unknown)."}),
	}
	reg.MustRegister(m.reconnects, m.errors, m.standby, m.skipped, m.phantoms,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walstream_replication_lag_seconds",
			Help: "Now minus the Postgres commit time of the newest published transaction while transactions wait; 0 when idle and caught up."},
			func() float64 { return st.status().Lag.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walstream_last_event_age_seconds", Help: "Time since events were last committed to Kafka (since start, before the first)."},
			st.since(func(s checkpoint.Status) time.Time { return s.LastEvent })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walstream_last_confirm_age_seconds", Help: "Time since a position was last confirmed to Postgres (since start, before the first)."},
			st.since(func(s checkpoint.Status) time.Time { return s.LastConfirm })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walstream_streaming", Help: "1 while this instance holds the slot and streams."},
			func() float64 {
				if st.tracker.Load() != nil {
					return 1
				}
				return 0
			}),
	)
	return m
}

// state is what the HTTP endpoints and lag gauges read: the tracker of the
// session that is streaming, nil between sessions.
type state struct {
	started time.Time
	tracker atomic.Pointer[checkpoint.Tracker]
	last    atomic.Pointer[checkpoint.Status] // of the last session, so that lag does not drop to 0 between sessions
}

// since returns a gauge of the seconds since the time pick takes from the
// status, or since start when that was never set.
func (st *state) since(pick func(checkpoint.Status) time.Time) func() float64 {
	return func() float64 {
		t := pick(st.status())
		if t.IsZero() {
			t = st.started
		}
		return time.Since(t).Seconds()
	}
}

func (st *state) status() checkpoint.Status {
	if t := st.tracker.Load(); t != nil {
		s := t.Status(time.Now())
		st.last.Store(&s)
		return s
	}
	if s := st.last.Load(); s != nil {
		return *s
	}
	return checkpoint.Status{}
}

// streaming returns the status of the streaming session, and false between
// sessions.
func (st *state) streaming(now time.Time) (checkpoint.Status, bool) {
	t := st.tracker.Load()
	if t == nil {
		return checkpoint.Status{}, false
	}
	return t.Status(now), true
}

// Healthz fails when the streaming loop has not confirmed for longer than
// it can without being wedged: it confirms every StatusInterval, and a
// Kafka commit may hold it up for CommitTimeout. Between sessions it is
// healthy: the supervisor is retrying.
func (p *Pipeline) Healthz(w http.ResponseWriter, _ *http.Request) {
	wedged := 2*p.cfg.StatusInterval + p.cfg.CommitTimeout
	if s, ok := p.state.streaming(time.Now()); ok {
		if age := time.Since(s.LastConfirm); age > wedged {
			http.Error(w, fmt.Sprintf("streaming loop silent for %s", age.Round(time.Second)), http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = io.WriteString(w, "ok\n")
}

// Readyz succeeds while this instance streams and confirmed a position
// within ReadyConfirmAge.
func (p *Pipeline) Readyz(w http.ResponseWriter, _ *http.Request) {
	s, ok := p.state.streaming(time.Now())
	if !ok {
		http.Error(w, "not streaming", http.StatusServiceUnavailable)
		return
	}
	if age := time.Since(s.LastConfirm); age > p.cfg.ReadyConfirmAge {
		http.Error(w, fmt.Sprintf("last confirm %s ago", age.Round(time.Second)), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}
