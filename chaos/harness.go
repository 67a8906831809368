package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// buildBinaries builds walstream with the walstream_faults tag (so that
// WALSTREAM_CRASH_AT works) and devbroker into dir. A prebuilt walstream
// can be given instead.
func buildBinaries(t testing.TB, dir, prebuilt string) (walstream, devbroker string) {
	t.Helper()
	walstream, devbroker = prebuilt, filepath.Join(dir, "devbroker")
	builds := [][]string{{"build", "-o", devbroker, "../cmd/devbroker"}}
	if walstream == "" {
		walstream = filepath.Join(dir, "walstream")
		builds = append(builds, []string{"build", "-tags", "walstream_faults", "-o", walstream, "../cmd/walstream"})
	}
	for _, args := range builds {
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return walstream, devbroker
}

// proxies are the toxiproxies walstream reaches Postgres and the broker
// through. The harness's own clients bypass them.
type proxies struct {
	server   *toxiproxy.ApiServer
	pg, kafk *toxiproxy.Proxy
}

// errProxyReplaced means a toxic change hung and the proxy was replaced.
var errProxyReplaced = errors.New("replaced the proxy, dropping its connections")

func startProxies(pgAddr, brokerAddr string) (*proxies, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	px := &proxies{server: srv}
	for _, p := range []struct {
		dst      **toxiproxy.Proxy
		name, up string
	}{{&px.pg, "postgres", pgAddr}, {&px.kafk, "kafka", brokerAddr}} {
		*p.dst = toxiproxy.NewProxy(srv, p.name, "127.0.0.1:0", p.up)
		if err := srv.Collection.Add(*p.dst, true); err != nil {
			px.stop()
			return nil, fmt.Errorf("starting the %s proxy: %w", p.name, err)
		}
	}
	return px, nil
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

// broker is devbroker run as a child process with a data directory, so
// that it can be killed and restarted on the same port with its state.
type broker struct {
	bin, dataDir, addr, advertise string
	logw                          io.Writer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (b *broker) start() error {
	cmd := exec.Command(b.bin, "-addr", b.addr, "-data-dir", b.dataDir, "-advertise", b.advertise, "-partitions", "3")
	cmd.Stdout, cmd.Stderr = b.logw, b.logw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting devbroker: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.mu.Lock()
	b.cmd, b.done = cmd, done
	b.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", b.addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("devbroker on %s exited at start: %s", b.addr, cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devbroker on %s not listening after 30s", b.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the broker with sig and waits for it to exit.
func (b *broker) stop(sig syscall.Signal) {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// restart stops the broker with sig and starts it again from its data dir.
func (b *broker) restart(sig syscall.Signal) error {
	b.stop(sig)
	return b.start()
}

// wsProc is one walstream process.
type wsProc struct {
	id      int
	crashAt string // WALSTREAM_CRASH_AT, empty for none
	cmd     *exec.Cmd
	done    chan struct{}
	started time.Time

	mu  sync.Mutex
	log bytes.Buffer
	f   *os.File

	// expected is set before the harness itself stops the process, so that
	// the exit is not taken for a failure or a crash point.
	expected bool
	// skippedMetric is the last walstream_replayed_events_skipped_total
	// scraped from the process.
	skippedMetric float64
}

func (p *wsProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log.Write(b)
	return p.f.Write(b)
}

// Log returns everything the process wrote so far.
func (p *wsProc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *wsProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitLog waits until the log matches re, the process exits or d passes.
func (p *wsProc) waitLog(re *regexp.Regexp, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !re.MatchString(p.Log()) {
		if p.exited() || time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// exitDesc describes how the process ended.
func (p *wsProc) exitDesc() string {
	if p.cmd.ProcessState == nil {
		return "running"
	}
	return p.cmd.ProcessState.String()
}

func (p *wsProc) killedBySIGKILL() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (p *wsProc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// lastLines returns the last n lines of the log.
func (p *wsProc) lastLines(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var (
	reStreaming   = regexp.MustCompile(`(?m)msg=streaming`)
	reCrashPoint  = regexp.MustCompile(`crash point (\S+) reached`)
	reHTTPAddr    = regexp.MustCompile(`msg="http listening".* addr=(\S+)`)
	reSkipped     = regexp.MustCompile(`replayed_events_skipped=(\d+)`)
	reSkipMetric  = regexp.MustCompile(`(?m)^walstream_replayed_events_skipped_total (\S+)$`)
	reSessionEnds = regexp.MustCompile(`msg="session ended, restarting from the checkpoint".* peer=(\w+)`)
)

// supervisor runs walstream: it starts the process the faults kill, and
// restarts it when it dies by itself (a crash point, or an unexpected
// exit, which is recorded as a failure).
type supervisor struct {
	bin    string
	args   []string
	logDir string

	mu         sync.Mutex
	cur        *wsProc
	all        []*wsProc
	closed     bool
	unexpected []string
	crashes    map[string]int // crash points reached, by point
}

func newSupervisor(bin, logDir string, args []string) *supervisor {
	return &supervisor{bin: bin, args: args, logDir: logDir, crashes: make(map[string]int)}
}

// start starts a walstream and makes it the current one, unless detached.
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
	p := &wsProc{id: len(s.all) + 1, crashAt: crashAt, done: make(chan struct{}), started: time.Now()}
	f, err := os.Create(filepath.Join(s.logDir, fmt.Sprintf("walstream-%03d.log", p.id)))
	if err != nil {
		return nil, fmt.Errorf("creating walstream log: %w", err)
	}
	p.f = f
	p.cmd = exec.Command(s.bin, append([]string{"run"}, s.args...)...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WALSTREAM_") {
			env = append(env, kv)
		}
	}
	if crashAt != "" {
		env = append(env, "WALSTREAM_CRASH_AT="+crashAt)
		fmt.Fprintf(p, "chaos: started with WALSTREAM_CRASH_AT=%s\n", crashAt)
	}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting walstream: %w", err)
	}
	s.all = append(s.all, p)
	go s.watch(p)
	go s.scrape(p)
	return p, nil
}

// watch waits for p to exit, records why, and restarts walstream when p
// was the current process and died without the harness asking.
func (s *supervisor) watch(p *wsProc) {
	err := p.cmd.Wait()
	close(p.done)
	p.mu.Lock()
	fmt.Fprintf(p.f, "chaos: process exited: %v\n", p.cmd.ProcessState)
	p.f.Close()
	expected := p.expected
	p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := reCrashPoint.FindStringSubmatch(p.Log()); m != nil && p.killedBySIGKILL() {
		s.crashes[m[1]]++
	} else if expected {
		return
	} else if !s.closed {
		s.unexpected = append(s.unexpected, fmt.Sprintf("walstream #%d exited by itself (%v):\n%s", p.id, err, p.lastLines(15)))
	}
	if s.cur != p || s.closed {
		return
	}
	if len(s.unexpected) > 20 {
		s.cur = nil
		return
	}
	if _, err := s.spawn(""); err != nil {
		s.unexpected = append(s.unexpected, fmt.Sprintf("restarting walstream: %v", err))
		s.cur = nil
		return
	}
	s.cur = s.all[len(s.all)-1]
}

// scrape polls the process's /metrics for the replay counter, which the
// process loses when it is killed.
func (s *supervisor) scrape(p *wsProc) {
	var addr string
	hc := http.Client{Timeout: time.Second}
	for !p.exited() {
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
		if m := reSkipMetric.FindSubmatch(body); m != nil {
			if v, err := strconv.ParseFloat(string(m[1]), 64); err == nil {
				p.mu.Lock()
				p.skippedMetric = v
				p.mu.Unlock()
			}
		}
	}
}

// current returns the process the supervisor keeps running, nil when it
// has exited and is not restarted yet.
func (s *supervisor) current() *wsProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.cur.exited() {
		return nil
	}
	return s.cur
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

// stopProc ends p with sig, as the harness's own doing, and waits up to d.
func stopProc(p *wsProc, sig syscall.Signal, d time.Duration) bool {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
	p.signal(sig)
	if sig == syscall.SIGSTOP {
		return true
	}
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		p.signal(syscall.SIGKILL)
		<-p.done
		return false
	}
}

// close kills every process still running.
func (s *supervisor) close() {
	s.mu.Lock()
	s.closed = true
	all := append([]*wsProc(nil), s.all...)
	s.mu.Unlock()
	for _, p := range all {
		if !p.exited() {
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
		for _, session := range strings.Split(p.Log(), "msg=streaming") {
			var most int64
			for _, m := range reSkipped.FindAllStringSubmatch(session, -1) {
				if v, _ := strconv.ParseInt(m[1], 10, 64); v > most {
					most = v
				}
			}
			logged += most
		}
		p.mu.Lock()
		scraped += int64(p.skippedMetric)
		p.mu.Unlock()
	}
	return logged, scraped
}

// sessionRestarts counts walstream's own session restarts by peer.
func (s *supervisor) sessionRestarts() map[string]int {
	s.mu.Lock()
	all := append([]*wsProc(nil), s.all...)
	s.mu.Unlock()
	n := make(map[string]int)
	for _, p := range all {
		for _, m := range reSessionEnds.FindAllStringSubmatch(p.Log(), -1) {
			n[m[1]]++
		}
	}
	return n
}
