package pipeline

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/kafka"
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
	spooled    prometheus.Gauge // bytes of streamed transactions kept until they end
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
		spooled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_stream_spool_bytes",
			Help: "Messages of transactions Postgres streams while in progress, kept in temporary files until each commits (then published) or aborts (then dropped)."}),
	}
	// Every known label starts at zero, so that a healthy stream draws a
	// flat line rather than no data, and rate() sees the first error.
	for _, kind := range failureKinds {
		m.errors.WithLabelValues(kind)
	}
	for _, peer := range failurePeers {
		m.reconnects.WithLabelValues(peer)
	}
	reg.MustRegister(m.reconnects, m.errors, m.standby, m.skipped, m.phantoms, m.spooled,
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
			Name: "walstream_stopped",
			Help: "1 once the stream stopped on a permanent error; in a process of several streams the others go on (see docs/operations.md, Many streams in one process)."},
			func() float64 {
				if st.stopped.Load() != nil {
					return 1
				}
				return 0
			}),
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
	// standbyAt is when (Unix nanoseconds) an attempt to take the slot, or
	// a standby's read of its holder, last found it held by another
	// walsender.
	standbyAt atomic.Int64
	// kafka is the last Kafka probe's result.
	kafka atomic.Pointer[probeResult]
	// lastErr is the error that ended the last attempt, on one line;
	// stopped, the permanent error that ended Run.
	lastErr, stopped atomic.Pointer[string]
	// waiting, when set, says what walstream waits for before it can
	// stream: a slot being created, a slot another process holds.
	waiting atomic.Pointer[string]
	// kafkaFailed is the last attempt that ended on a Kafka error;
	// committed is when a Kafka transaction last committed (Unix
	// nanoseconds).
	kafkaFailed atomic.Pointer[failedAt]
	committed   atomic.Int64
	// held are the transactions the last Kafka probe found holding back
	// the checkpoint topic's last stable offset.
	held atomic.Pointer[[]kafka.Hold]
}

// probeResult is one Kafka probe: when it ended, and its error.
type probeResult struct {
	at  time.Time
	err error
	ok  time.Time // the last successful probe, zero before the first
	// unwritable are the partitions every transaction writes (the
	// checkpoint topic's, the transaction coordinator's) that cannot take
	// writes, in words.
	unwritable []string
}

// failedAt is an error and when it happened.
type failedAt struct {
	at  time.Time
	msg string
}

// reset clears what an earlier Run recorded: its stop, its errors, its
// Kafka probes and holds.
func (st *state) reset() {
	st.stopped.Store(nil)
	st.lastErr.Store(nil)
	st.kafkaFailed.Store(nil)
	st.kafka.Store(nil)
	st.held.Store(nil)
}

func (st *state) setLastErr(err error, kafka bool) {
	msg := oneLine(err)
	st.lastErr.Store(&msg)
	if kafka {
		st.kafkaFailed.Store(&failedAt{time.Now(), msg})
	}
}

// oneLine is an error's text on one line, for the health endpoints.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// kafkaFailing says, when the last attempt ended on a Kafka error within
// window of now and no Kafka transaction committed since, what it was.
func (st *state) kafkaFailing(now time.Time, window time.Duration) string {
	f := st.kafkaFailed.Load()
	if f == nil || now.Sub(f.at) > window || time.Unix(0, st.committed.Load()).After(f.at) {
		return ""
	}
	return fmt.Sprintf("the last Kafka transaction failed %s ago and none committed since: %s", now.Sub(f.at).Round(time.Second), f.msg)
}

// kafkaProblem says why Kafka is not known to answer at now: the last probe
// failed, or none succeeded within readyWindow. Empty when it answers.
func (st *state) kafkaProblem(now time.Time) string {
	r := st.kafka.Load()
	switch {
	case r == nil:
		return "no answer from Kafka yet"
	case r.err != nil:
		return fmt.Sprintf("Kafka does not answer: %s", strings.ReplaceAll(r.err.Error(), "\n", " "))
	case now.Sub(r.ok) > readyWindow:
		return fmt.Sprintf("Kafka last answered %s ago", now.Sub(r.ok).Round(time.Second))
	case len(r.unwritable) > 0:
		return "Kafka cannot take walstream's writes: " + strings.Join(r.unwritable, "; ")
	}
	return ""
}

// Kafka probing: a metadata request every kafkaProbeInterval, each given
// kafkaProbeTimeout, so that a lost broker shows in readiness within
// seconds. readyWindow is how recent a standby's evidence must be.
const (
	kafkaProbeInterval = 2 * time.Second
	kafkaProbeTimeout  = 2 * time.Second
	readyWindow        = 10 * time.Second
)

// probeKafka probes Kafka until ctx ends or stop is called, which waits for
// the probing goroutine to end.
func (p *Pipeline) probeKafka(ctx context.Context) (stop func()) {
	pr, own := p.cfg.Prober, false
	if pr == nil {
		var err error
		if pr, err = kafka.NewProber(p.cfg.Kafka, p.log); err != nil {
			p.state.kafka.Store(&probeResult{at: time.Now(), err: err})
			return func() {}
		}
		own = true
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if own {
			defer pr.Close()
		}
		t := time.NewTicker(kafkaProbeInterval)
		defer t.Stop()
		for {
			pctx, pcancel := context.WithTimeout(ctx, kafkaProbeTimeout)
			err := pr.Probe(pctx)
			var unwritable []string
			var held []kafka.Hold
			var herr error
			if err == nil {
				// An error here is no answer about the partitions, which
				// the probe's own answer already covers.
				unwritable, _ = pr.Unwritable(pctx, p.cfg.TransactionalID, p.cfg.CheckpointTopic)
				held, herr = pr.Holds(pctx, p.cfg.CheckpointTopic)
			}
			pcancel()
			if err == nil && herr == nil {
				began, ended := pr.Changed(p.cfg.CheckpointTopic, held)
				p.tellHolds(held, began, ended)
			}
			if ctx.Err() != nil {
				return
			}
			r := &probeResult{at: time.Now(), err: err, unwritable: unwritable}
			if prev := p.state.kafka.Load(); prev != nil {
				r.ok = prev.ok
			}
			if err == nil {
				r.ok = r.at
			}
			p.state.kafka.Store(r)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// tellHolds records the transactions that hold back the checkpoint
// topic's last stable offset, for readiness, status and the metric, and
// logs those that began and ended: of the streams sharing a prober, the
// one that first sees a change logs it (kafka.Prober.Changed).
func (p *Pipeline) tellHolds(held, began, ended []kafka.Hold) {
	p.state.held.Store(&held)
	now := time.Now()
	p.metrics.pub.Held(held, now)
	for _, h := range began {
		p.log.Warn("a transaction holds back the checkpoint topic: read_committed readers of it see no checkpoint of any stream written after it began, "+
			"until Kafka ends it, at its timeout at the latest; walstream reads past it and goes on (see docs/kafka.md, A transaction holding the checkpoint topic)",
			"hold", h.String(), "holder", h.Holder(), "producer_id", h.ProducerID, "partition", h.Partition, "stable_offset", h.Stable,
			"open_seconds", now.Sub(h.Since).Seconds())
	}
	for _, h := range ended {
		p.log.Info("the transaction holding back the checkpoint topic ended", "holder", h.Holder(), "partition", h.Partition,
			"stable_offset", h.Stable, "held_seconds", now.Sub(h.Since).Seconds())
	}
}

// holdsText says what holds back the checkpoint topic, empty when nothing.
func (st *state) holdsText(now time.Time) string {
	held := st.held.Load()
	if held == nil || len(*held) == 0 {
		return ""
	}
	var parts []string
	for _, h := range *held {
		parts = append(parts, h.Describe(now))
	}
	return "the checkpoint topic " + strings.Join(parts, "; ") + ": read_committed readers of it see no later checkpoint until it ends; walstream reads past it"
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
	if code, body := p.health(time.Now()); code != http.StatusOK {
		http.Error(w, body, code)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

func (p *Pipeline) health(now time.Time) (code int, body string) {
	wedged := 2*p.cfg.StatusInterval + p.cfg.CommitTimeout
	if s, ok := p.state.streaming(now); ok {
		if age := now.Sub(s.LastConfirm); age > wedged {
			return http.StatusServiceUnavailable, fmt.Sprintf("streaming loop silent for %s", age.Round(time.Second))
		}
	}
	if e := p.state.stopped.Load(); e != nil {
		return http.StatusOK, "stopped: " + *e
	}
	return http.StatusOK, "ok"
}

// Readyz succeeds while this instance streams, confirmed a position within
// ReadyConfirmAge, Kafka answers its probes and can take its writes (the
// partitions of the checkpoint topic and of the transaction coordinator
// have a leader and enough in-sync replicas), and no Kafka transaction
// failed lately without one committing since. With ?standby=1 it also
// succeeds on a standby that could take over: within readyWindow, it read
// on Postgres that another walsender holds the slot (its attempt at the
// slot, or its wait, see awaitSlot), and Kafka answered. A stream stopped
// on a permanent error is never ready. Otherwise it answers 503 and why,
// on one line.
func (p *Pipeline) Readyz(w http.ResponseWriter, r *http.Request) {
	standby := r.URL.Query().Get("standby")
	code, body := p.readiness(time.Now(), standby == "1" || standby == "true")
	if code != http.StatusOK {
		http.Error(w, body, code)
		return
	}
	_, _ = io.WriteString(w, body+"\n")
}

func (p *Pipeline) readiness(now time.Time, standbyOK bool) (code int, body string) {
	if e := p.state.stopped.Load(); e != nil {
		return http.StatusServiceUnavailable, "stopped: " + *e
	}
	kafka := p.state.kafkaProblem(now)
	if s, ok := p.state.streaming(now); ok {
		switch age := now.Sub(s.LastConfirm); {
		case age > p.cfg.ReadyConfirmAge:
			return http.StatusServiceUnavailable, fmt.Sprintf("streaming, but the last confirm was %s ago", age.Round(time.Second))
		case kafka != "":
			return http.StatusServiceUnavailable, "streaming, but " + kafka
		case p.state.kafkaFailing(now, 2*p.cfg.CommitTimeout) != "":
			return http.StatusServiceUnavailable, "streaming, but " + p.state.kafkaFailing(now, 2*p.cfg.CommitTimeout)
		}
		body := "ready"
		if standbyOK {
			body = "streaming"
		}
		if held := p.state.holdsText(now); held != "" {
			body += "; " + held
		}
		if r := describeReemits(reemitsOf(s.Committed)); r != "" {
			body += "; " + r
		}
		return http.StatusOK, body
	}
	why := "not streaming"
	if w := p.state.waiting.Load(); w != nil {
		why += ": " + *w
	} else if e := p.state.lastErr.Load(); e != nil {
		why += ": " + *e
	}
	if kafka != "" && !standbyOK {
		why += "; " + kafka
	}
	if !standbyOK {
		return http.StatusServiceUnavailable, why
	}
	if at := p.state.standbyAt.Load(); at == 0 || now.Sub(time.Unix(0, at)) > readyWindow {
		return http.StatusServiceUnavailable, why + " (and no standby: no attempt in the last " + readyWindow.String() + " found the slot held by another instance)"
	}
	if kafka != "" {
		return http.StatusServiceUnavailable, "standby, but " + kafka
	}
	return http.StatusOK, "standby"
}
