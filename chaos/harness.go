package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/walstream/walstream/internal/testenv"
)

// walstreamBinary builds walstream with the walstream_faults tag (so that
// WALSTREAM_CRASH_AT works), once per test binary. A prebuilt walstream
// can be given instead.
func walstreamBinary(t testing.TB, prebuilt string) string {
	t.Helper()
	if prebuilt != "" {
		return prebuilt
	}
	return testenv.Binary(t, testenv.WalstreamBuild(false, true))
}

// proxies are the toxiproxies walstream reaches Postgres and the brokers
// through, one per broker, each advertised by its broker. The harness's
// own clients bypass them.
type proxies struct {
	server *toxiproxy.ApiServer
	pg     *toxiproxy.Proxy
	kafka  []*toxiproxy.Proxy // by broker, node 1 first
}

// errProxyReplaced means a toxic change hung and the proxy was replaced.
var errProxyReplaced = errors.New("replaced the proxy, dropping its connections")

// startProxies starts the proxy in front of Postgres.
func startProxies(pgAddr string) (*proxies, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	px := &proxies{server: srv, pg: toxiproxy.NewProxy(srv, "postgres", "127.0.0.1:0", pgAddr)}
	if err := srv.Collection.Add(px.pg, true); err != nil {
		px.stop()
		return nil, fmt.Errorf("starting the postgres proxy: %w", err)
	}
	return px, nil
}

// addKafka starts the proxy of the next broker on listen ("127.0.0.1:0"
// for any port) and returns the address it listens on.
func (px *proxies) addKafka(listen, broker string) (string, error) {
	p := toxiproxy.NewProxy(px.server, fmt.Sprintf("kafka-%d", len(px.kafka)+1), listen, broker)
	if err := px.server.Collection.Add(p, true); err != nil {
		return "", fmt.Errorf("starting the proxy of broker %s on %s: %w", broker, listen, err)
	}
	px.kafka = append(px.kafka, p)
	return p.Listen, nil
}

// kafkaAddrs are the brokers' proxies, comma-separated: walstream's
// bootstrap list.
func (px *proxies) kafkaAddrs() string {
	var addrs []string
	for _, p := range px.kafka {
		addrs = append(addrs, p.Listen)
	}
	return strings.Join(addrs, ",")
}

func (px *proxies) stop() { _ = px.server.Collection.Clear() }

// change runs fn, a change of *p's toxics, for at most 10 s. Toxiproxy
// cannot interrupt a toxic change while a client behind the proxy does
// not read its socket (a stuck walstream, or one pausing WAL reading):
// the change then blocks for good, holding the lock that new connections
// need too. So a change that hangs replaces the proxy with a fresh one on
// the same address, which drops every connection through it.
func (px *proxies) change(p **toxiproxy.Proxy, fn func(*toxiproxy.Proxy) error) error {
	old := *p
	done := make(chan error, 1)
	go func() { done <- fn(old) }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
	}
	_ = px.server.Collection.Remove(old.Name) // stops it: listener and connections
	fresh := toxiproxy.NewProxy(px.server, old.Name, old.Listen, old.Upstream)
	if err := px.server.Collection.Add(fresh, true); err != nil {
		return fmt.Errorf("replacing the %s proxy on %s: %w", old.Name, old.Listen, err)
	}
	*p = fresh
	return fmt.Errorf("a toxic change of the %s proxy hung (a client behind it does not read): %w", old.Name, errProxyReplaced)
}

// addToxic adds a toxic to p; attrs is the JSON of its attributes.
func addToxic(p *toxiproxy.Proxy, name, typ, stream, attrs string) error {
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		return fmt.Errorf("adding toxic %s to proxy %s: %w", name, p.Name, err)
	}
	return nil
}

// removeToxics removes every toxic from p.
func removeToxics(p *toxiproxy.Proxy) error {
	p.Toxics.ResetToxics(context.Background())
	return nil
}

// wsProc is one walstream process.
type wsProc struct {
	*testenv.Process
	id      int
	sup     *supervisor
	crashAt string   // WALSTREAM_CRASH_AT, empty for none
	f       *os.File // the process's log file; closed once it exited

	mu sync.Mutex
	// expected is set before the harness itself stops the process, so that
	// the exit is not taken for a failure or a crash point.
	expected bool
	// skippedMetric is the last walstream_replayed_events_skipped_total
	// scraped from the process; live the streams its last scrape found
	// streaming (walstream_streaming).
	skippedMetric float64
	live          map[string]bool
}

// streams reports whether p's last scrape found stream name streaming.
func (p *wsProc) streams(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live[name]
}

// streamingNow lists the streams p's last scrape found streaming.
func (p *wsProc) streamingNow() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.live))
}

// streaming waits up to d for the process to stream; false when it exits
// first or d passes.
func (p *wsProc) streaming(d time.Duration) bool {
	return p.WaitLog(context.Background(), testenv.StreamingLine, d) == nil
}

var (
	reStreaming   = regexp.MustCompile(regexp.QuoteMeta(testenv.StreamingLine))
	reCrashPoint  = regexp.MustCompile(`crash point (\S+) reached`)
	reHTTPAddr    = regexp.MustCompile(`msg="http listening".* addr=(\S+)`)
	reSkipped     = regexp.MustCompile(`replayed_events_skipped=(\d+)`)
	reSkipMetric  = regexp.MustCompile(`(?m)^walstream_replayed_events_skipped_total(?:\{[^}]*\})? (\S+)$`)
	reStreamingOn = regexp.MustCompile(`(?m)^walstream_streaming\{[^}]*stream="([^"]+)"[^}]*\} 1$`)
	reSessionEnds = regexp.MustCompile(`msg="session ended, restarting from the checkpoint".* peer=(\w+)`)
	reTxnFailed   = regexp.MustCompile(`msg="Kafka transaction failed: .*" .*cause=(\w+)`)
	reStream      = regexp.MustCompile(` stream=(\S+)`)
	reStopLine    = regexp.MustCompile(`(?m)^walstream: stream (\S+): (.*)$`)
	reHoldLogged  = regexp.MustCompile(`msg="a transaction holds back the checkpoint topic.* holder=(\S+)`)
)

// streamStopped is what a process of several streams logs when one of them
// stops on a permanent error and the others go on.
const streamStopped = `msg="stream stopped on a permanent error; the other streams go on"`

// supervisor runs the walstream process of its streams: it starts the
// process the faults kill, and restarts it when it dies by itself (a crash
// point, or an unexpected exit, which is recorded as a failure). Each
// supervisor has its own streams; a fault on a stream acts on its
// supervisor's process.
type supervisor struct {
	bin     string
	common  []string // the settings every process has
	streams []*stream
	logDir  string
	ids     *atomic.Int64 // numbers the processes of every supervisor
	// fleet: the processes of every supervisor run the same config and
	// share its streams through their fleet's group.
	fleet bool

	mu         sync.Mutex
	cur        *wsProc
	all        []*wsProc
	closed     bool
	unexpected []string
	crashes    map[string]int    // crash points reached, by point
	accepted   map[string]string // --accept-recreated-table, by stream name
}

func newSupervisor(bin, logDir string, ids *atomic.Int64, common []string, streams ...*stream) *supervisor {
	s := &supervisor{bin: bin, common: common, streams: streams, logDir: logDir, ids: ids,
		crashes: make(map[string]int), accepted: make(map[string]string)}
	for _, st := range streams {
		if st.sup == nil {
			st.sup = s
		}
		st.sups = append(st.sups, s)
	}
	return s
}

// String names the supervisor's streams.
func (s *supervisor) String() string {
	var names []string
	for _, st := range s.streams {
		names = append(names, st.name)
	}
	return strings.Join(names, ",")
}

// argv is the command line of the next process, id; s.mu is held. A
// process of one stream has its settings as flags; a process of several
// reads them from a config file's streams: list, written for it, one entry
// a stream.
func (s *supervisor) argv(id int) ([]string, error) {
	args := append([]string{"run"}, s.common...)
	if len(s.streams) == 1 {
		st := s.streams[0]
		args = append(args, st.args()...)
		if a := s.accepted[st.name]; a != "" {
			args = append(args, "--accept-recreated-table", a)
		}
		return args, nil
	}
	var b strings.Builder
	if s.fleet {
		b.WriteString("fleet: on\nstreams:\n")
	} else {
		// Each stream's process is its own: no fleet's group to share them.
		b.WriteString("fleet: off\nstreams:\n")
	}
	for _, st := range s.streams {
		fmt.Fprintf(&b, "  - pg-url: %q\n    slot: %q\n    outbox:\n      route.topic.replacement: %q\n", st.wsURL, st.slot, st.prefix+"${routedByValue}")
		if a := s.accepted[st.name]; a != "" {
			fmt.Fprintf(&b, "    accept-recreated-table: %q\n", a)
		}
	}
	path := filepath.Join(s.logDir, fmt.Sprintf("walstream-%03d.yaml", id))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("writing the config file of %s: %w", s, err)
	}
	return append(args, "--config", path), nil
}

// start starts a walstream and makes it the current one.
func (s *supervisor) start(crashAt string) (*wsProc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("supervisor closed")
	}
	p, err := s.spawn(crashAt)
	if err != nil {
		return nil, err
	}
	s.cur = p
	return p, nil
}

// spawn starts a process; s.mu is held.
func (s *supervisor) spawn(crashAt string) (*wsProc, error) {
	id := int(s.ids.Add(1))
	args, err := s.argv(id)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(s.logDir, fmt.Sprintf("walstream-%03d.log", id)))
	if err != nil {
		return nil, fmt.Errorf("creating walstream log: %w", err)
	}
	fmt.Fprintf(f, "chaos: walstream #%d of %s\n", id, s)
	var env []string
	if crashAt != "" {
		env = append(env, "WALSTREAM_CRASH_AT="+crashAt)
		fmt.Fprintf(f, "chaos: started with WALSTREAM_CRASH_AT=%s\n", crashAt)
	}
	proc, err := testenv.StartProcess(testenv.ProcessConfig{Name: "walstream", Path: s.bin, Output: f,
		Args: args, Env: testenv.WalstreamEnv(env...)})
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &wsProc{Process: proc, id: id, sup: s, crashAt: crashAt, f: f}
	s.all = append(s.all, p)
	go s.watch(p)
	go s.scrape(p)
	return p, nil
}

// watch waits for p to exit, records why, and restarts walstream when p
// was the current process and died without the harness asking.
func (s *supervisor) watch(p *wsProc) {
	<-p.Done()
	err := p.Err()
	fmt.Fprintf(p.f, "chaos: process exited: %v\n", p.ExitDesc())
	p.f.Close()
	p.mu.Lock()
	expected := p.expected
	p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := reCrashPoint.FindStringSubmatch(p.Log()); m != nil && p.KilledBy(syscall.SIGKILL) {
		s.crashes[m[1]]++
	} else if expected {
		return
	} else if !s.closed {
		s.unexpected = append(s.unexpected, fmt.Sprintf("walstream #%d of %s exited by itself (%v):\n%s", p.id, s, err, p.LastLines(15)))
	}
	if s.cur != p || s.closed {
		return
	}
	if len(s.unexpected) > 20 {
		s.cur = nil
		return
	}
	np, err := s.spawn("")
	if err != nil {
		s.unexpected = append(s.unexpected, fmt.Sprintf("restarting walstream of %s: %v", s, err))
		s.cur = nil
		return
	}
	s.cur = np
}

// scrape polls the process's /metrics for the replay counter, which the
// process loses when it is killed.
func (s *supervisor) scrape(p *wsProc) {
	var addr string
	hc := http.Client{Timeout: time.Second}
	for !p.Exited() {
		time.Sleep(500 * time.Millisecond)
		if addr == "" {
			if m := reHTTPAddr.FindStringSubmatch(p.Log()); m != nil {
				addr = m[1]
			}
			continue
		}
		resp, err := hc.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// One series per stream of the process.
		if ms := reSkipMetric.FindAllSubmatch(body, -1); ms != nil {
			var sum float64
			for _, m := range ms {
				v, _ := strconv.ParseFloat(string(m[1]), 64)
				sum += v
			}
			p.mu.Lock()
			p.skippedMetric = sum
			p.mu.Unlock()
		}
		live := make(map[string]bool)
		for _, m := range reStreamingOn.FindAllSubmatch(body, -1) {
			live[string(m[1])] = true
		}
		p.mu.Lock()
		p.live = live
		p.mu.Unlock()
	}
}

// current returns the process the supervisor keeps running, nil when it
// has exited and is not restarted yet.
func (s *supervisor) current() *wsProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.cur.Exited() {
		return nil
	}
	return s.cur
}

// accept makes every walstream started from now on accept st's outbox
// table as recreated with OID oid (--accept-recreated-table), as the
// operator does after a stop that named the gap.
func (s *supervisor) accept(st *stream, oid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepted[st.name] = fmt.Sprintf("public.outbox=%d", oid)
}

// detach makes p no longer the current process: its exit is the caller's
// business.
func (s *supervisor) detach(p *wsProc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
	if s.cur == p {
		s.cur = nil
	}
}

// stopProc ends p with sig, as the harness's own doing, and waits up to d;
// false when it had to be killed. SIGSTOP returns at once.
func stopProc(p *wsProc, sig syscall.Signal, d time.Duration) bool {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
	if sig == syscall.SIGSTOP {
		p.Signal(sig)
		return true
	}
	return !errors.Is(p.Stop(sig, d), testenv.ErrKilled)
}

// close kills every process still running.
func (s *supervisor) close() {
	s.mu.Lock()
	s.closed = true
	all := append([]*wsProc(nil), s.all...)
	s.mu.Unlock()
	for _, p := range all {
		if !p.Exited() {
			stopProc(p, syscall.SIGKILL, 10*time.Second)
		}
	}
}

// stats returns the crash points reached and the number of processes.
func (s *supervisor) stats() (crashes map[string]int, procs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.crashes), len(s.all)
}

// unexpectedExits returns what the watchers recorded.
func (s *supervisor) unexpectedExits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unexpected...)
}

// replaysSkipped sums the replayed events the checkpoint filter dropped,
// as the processes logged them and as their metrics showed them. Each
// session logs its running total, so a session counts with its largest
// value; a process killed before it logged or was scraped is not counted.
func (s *supervisor) replaysSkipped() (logged, scraped int64) {
	s.mu.Lock()
	all := append([]*wsProc(nil), s.all...)
	s.mu.Unlock()
	for _, p := range all {
		lines := strings.Split(p.Log(), "\n")
		for _, st := range s.streams {
			// The stream's own lines, in which each session begins with
			// msg=streaming.
			var own []string
			for _, l := range lines {
				if m := reStream.FindStringSubmatch(l); m != nil && m[1] == st.name {
					own = append(own, l)
				}
			}
			for _, session := range strings.Split(strings.Join(own, "\n"), "msg=streaming") {
				var most int64
				for _, m := range reSkipped.FindAllStringSubmatch(session, -1) {
					if v, _ := strconv.ParseInt(m[1], 10, 64); v > most {
						most = v
					}
				}
				logged += most
			}
		}
		p.mu.Lock()
		scraped += int64(p.skippedMetric)
		p.mu.Unlock()
	}
	return logged, scraped
}

// streamStops returns the lines in which p says that st (any stream when
// nil) stopped on a permanent error and its other streams go on.
func (p *wsProc) streamStops(st *stream) []string {
	var out []string
	for _, l := range strings.Split(p.Log(), "\n") {
		if strings.Contains(l, streamStopped) && (st == nil || strings.Contains(l, " stream="+st.name+" ")) {
			out = append(out, l)
		}
	}
	return out
}

// stoppedStreams returns the streams that stopped on a permanent error in
// a process of several, which goes on with the others: unexpected unless
// the harness brought it about (the process is then detached).
func (s *supervisor) stoppedStreams() []string {
	s.mu.Lock()
	all := append([]*wsProc(nil), s.all...)
	s.mu.Unlock()
	var out []string
	for _, p := range all {
		p.mu.Lock()
		expected := p.expected
		p.mu.Unlock()
		if expected {
			continue
		}
		for _, l := range p.streamStops(nil) {
			out = append(out, fmt.Sprintf("walstream #%d of %s: %s", p.id, s, l))
		}
	}
	return out
}

// sessionRestarts counts the session restarts of st, or of every stream
// when st is nil, by peer.
func (s *supervisor) sessionRestarts(st *stream) map[string]int { return s.count(reSessionEnds, st) }

// txnFailures counts the Kafka transaction failures walstream logged, by
// cause.
func (s *supervisor) txnFailures() map[string]int { return s.count(reTxnFailed, nil) }

// count counts the first submatch of re over the lines of every process's
// log that name st (every line when st is nil).
func (s *supervisor) count(re *regexp.Regexp, st *stream) map[string]int {
	n := make(map[string]int)
	for _, m := range s.lines(re, st) {
		n[m[1]]++
	}
	return n
}

// lines returns re's submatches in the lines of every process's log that
// name stream st (stream=, which walstream puts in each line), or in every
// line when st is nil.
func (s *supervisor) lines(re *regexp.Regexp, st *stream) [][]string {
	s.mu.Lock()
	all := append([]*wsProc(nil), s.all...)
	s.mu.Unlock()
	var out [][]string
	for _, p := range all {
		for _, line := range strings.Split(p.Log(), "\n") {
			m := re.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if st != nil {
				if sm := reStream.FindStringSubmatch(line); sm == nil || sm[1] != st.name {
					continue
				}
			}
			out = append(out, m)
		}
	}
	return out
}
