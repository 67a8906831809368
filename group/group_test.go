package group

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/kafka"
	"go.uber.org/goleak"
)

// Memberships start goroutines; every test must leave none behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSettings are short timeouts kfake takes, so that a member's loss
// and a rebalance take a few seconds.
var testSettings = Settings{Group: "walstream-fleet-test", SessionTimeout: 3 * time.Second,
	HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: 5 * time.Second}

// handler runs what it is assigned at once, and records each assignment
// with when it came. A stream taken away it releases at once, or after
// release, when that is set.
type handler struct {
	release time.Duration

	mu        sync.Mutex
	owned     []string
	releasing map[string]*time.Timer
	claimed   [][]string // what each Owned call said was being released
	known     bool
	at        []time.Time
	got       []Assignment
}

func (h *handler) Owned() (owned, releasing []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	releasing = slices.Sorted(maps.Keys(h.releasing))
	h.claimed = append(h.claimed, releasing)
	return slices.Concat(h.owned, releasing), releasing
}

func (h *handler) Assign(a Assignment) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.releasing == nil {
		h.releasing = make(map[string]*time.Timer)
	}
	for _, s := range a.Mine() {
		if t, ok := h.releasing[s]; ok {
			t.Stop() // given back: runs again
			delete(h.releasing, s)
		}
	}
	for _, s := range h.owned {
		if h.release > 0 && !slices.Contains(a.Mine(), s) {
			h.releasing[s] = time.AfterFunc(h.release, func() {
				h.mu.Lock()
				defer h.mu.Unlock()
				delete(h.releasing, s)
			})
		}
	}
	h.owned, h.known = slices.Clone(a.Mine()), a.Known()
	h.got = append(h.got, a)
	h.at = append(h.at, time.Now())
}

// memberID is the member id of the last assignment.
func (h *handler) memberID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got) == 0 {
		return ""
	}
	return h.got[len(h.got)-1].Self
}

func (h *handler) state() (owned []string, known bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.owned), h.known
}

// lostAt is when the handler was last told it is no member, zero if never.
func (h *handler) lostAt() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.got) - 1; i >= 0; i-- {
		if !h.got[i].Known() {
			return h.at[i]
		}
	}
	return time.Time{}
}

// cut is a dialer whose connections can be cut, as a network cut between
// one process and Kafka.
type cut struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (c *cut) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, errors.New("the network is cut")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cut) set(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
	if down {
		for _, conn := range c.conns {
			conn.Close()
		}
		c.conns = nil
	}
}

// member is one running membership of a test.
type member struct {
	h      *handler
	net    *cut
	cancel context.CancelFunc
	done   chan error
	log    *testenv.LogBuffer
}

func start(t *testing.T, brokers []string, name string, streams []string, s Settings) *member {
	t.Helper()
	return startReleasing(t, brokers, name, streams, s, 0)
}

// startReleasing starts a member whose streams taken away are released
// after release.
func startReleasing(t *testing.T, brokers []string, name string, streams []string, s Settings, release time.Duration) *member {
	t.Helper()
	m := &member{h: &handler{release: release}, net: &cut{}, done: make(chan error, 1), log: &testenv.LogBuffer{}}
	ms, err := newMembership(kafka.Settings{Brokers: brokers}, Config{Settings: s, Name: name, Streams: streams},
		slog.New(slog.NewTextHandler(m.log, &slog.HandlerOptions{Level: slog.LevelDebug})), NewMetrics(prometheus.NewRegistry()), kgo.Dialer(m.net.dial))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- ms.Run(ctx, m.h) }()
	t.Cleanup(func() {
		m.stop(t)
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, m.log)
		}
	})
	return m
}

// stop ends the membership, which leaves the group, and returns Run's error.
func (m *member) stop(t *testing.T) error {
	t.Helper()
	m.cancel()
	select {
	case err := <-m.done:
		m.done <- err
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of its context's end")
		return nil
	}
}

// balanced waits until the members hold every stream once, each as many
// as the others, give or take one, and returns when that was.
func balanced(t *testing.T, within time.Duration, all []string, ms ...*member) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var union []string
		lo, hi := len(all), 0
		for _, m := range ms {
			owned, known := m.h.state()
			if !known {
				lo = -1
			}
			union = append(union, owned...)
			lo, hi = min(lo, len(owned)), max(hi, len(owned))
		}
		slices.Sort(union)
		if lo >= 0 && hi-lo <= 1 && slices.Equal(union, all) {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	var held [][]string
	for _, m := range ms {
		owned, _ := m.h.state()
		held = append(held, owned)
	}
	t.Fatalf("not balanced within %s: %v", within, held)
	return time.Time{}
}

// The members of a group share its streams evenly; one that leaves gives
// its streams to the others at once, one that is cut off from Kafka stops
// its streams before the coordinator gives them to the others, and one
// that comes back takes its share again.
func TestMembership(t *testing.T) {
	brokers, _ := testenv.KfakeCluster(t, 1, kfake.GroupMinSessionTimeout(time.Second))
	all := streams(1, 12)
	a := start(t, brokers, "a", all, testSettings)
	b := start(t, brokers, "b", all, testSettings)
	c := start(t, brokers, "c", all, testSettings)
	balanced(t, 20*time.Second, all, a, b, c)
	for _, m := range []*member{a, b, c} {
		if owned, _ := m.h.state(); len(owned) != 4 {
			t.Fatalf("12 streams on 3 members: one has %d", len(owned))
		}
	}

	// c leaves: a and b take its four streams, and keep their own.
	aHad, _ := a.h.state()
	cHad, _ := c.h.state()
	left := time.Now()
	if err := c.stop(t); err != nil {
		t.Fatalf("Run returned %v when its context ended", err)
	}
	at := balanced(t, 10*time.Second, all, a, b)
	t.Logf("a member that left: its streams were given to the others %s later", at.Sub(left).Round(time.Millisecond))
	if at.Sub(left) > testSettings.SessionTimeout {
		t.Errorf("the streams of a member that left moved after %s, not at once", at.Sub(left))
	}
	aHas, _ := a.h.state()
	for _, s := range aHad {
		if !slices.Contains(aHas, s) {
			t.Errorf("stream %s moved off a, which stayed", s)
		}
	}
	bHas, _ := b.h.state()
	moved := 0
	for _, s := range slices.Concat(aHas, bHas) {
		if slices.Contains(cHad, s) {
			moved++
		}
	}
	if moved != 4 {
		t.Errorf("%d of c's streams went to a and b, want its 4", moved)
	}

	// b is cut off from Kafka: it stops its streams before the coordinator
	// gives them to a, at the session timeout.
	cutAt := time.Now()
	b.net.set(true)
	var tookAt time.Time
	testenv.Eventually(t, 15*time.Second, "a runs every stream", func() bool {
		owned, _ := a.h.state()
		if len(owned) == len(all) {
			tookAt = time.Now()
			return true
		}
		return false
	})
	lostAt := b.h.lostAt()
	if lostAt.IsZero() {
		t.Fatal("b, cut off, never stopped its streams")
	}
	t.Logf("b cut off: it stopped its streams after %s, a ran them after %s", lostAt.Sub(cutAt).Round(time.Millisecond), tookAt.Sub(cutAt).Round(time.Millisecond))
	if !lostAt.Before(tookAt) {
		t.Errorf("b stopped its streams %s after a was given them", lostAt.Sub(tookAt))
	}
	if owned, known := b.h.state(); len(owned) > 0 || known {
		t.Errorf("b holds %v after it lost the group", owned)
	}

	// b's network comes back: it joins again and takes its share.
	b.net.set(false)
	balanced(t, 20*time.Second, all, a, b)
	if !strings.Contains(b.log.String(), "no longer a member of the fleet's group") {
		t.Errorf("b did not log its loss:\n%s", b.log)
	}
}

// A stream moved while the member that ran it still releases it stays
// with the member it was given to when a rebalance comes meanwhile: the
// leader prefers that member's claim to the releasing one's, whichever
// member id sorts first, so the stream is not handed over twice.
func TestMembershipReleasing(t *testing.T) {
	brokers, _ := testenv.KfakeCluster(t, 1, kfake.GroupMinSessionTimeout(time.Second))
	all := streams(1, 12)
	// a runs every stream, then b, which can run the last six, joins and
	// a releases those. A claim's tie goes to the member id sorted first:
	// a's must sort first for the test to tell, so both start again until
	// it does.
	var a, b *member
	for try := 0; ; try++ {
		a = startReleasing(t, brokers, "a", all, testSettings, time.Minute)
		balanced(t, 20*time.Second, all, a)
		b = startReleasing(t, brokers, "b", streams(7, 12), testSettings, time.Minute)
		balanced(t, 20*time.Second, all, a, b)
		if a.h.memberID() < b.h.memberID() {
			break
		}
		if try == 20 {
			t.Fatal("a's member id did not sort before b's in 20 tries")
		}
		for _, m := range []*member{a, b} {
			if err := m.stop(t); err != nil {
				t.Fatal(err)
			}
		}
	}
	bGiven, _ := b.h.state()
	c := start(t, brokers, "c", all, testSettings)
	balanced(t, 20*time.Second, all, a, b, c)
	a.h.mu.Lock()
	claimed := slices.Clone(a.h.claimed)
	a.h.mu.Unlock()
	if len(claimed) == 0 || !slices.Equal(claimed[len(claimed)-1], bGiven) {
		t.Fatalf("a's joins said it released %v, want b's %v at its last", claimed, bGiven)
	}
	aHas, _ := a.h.state()
	for _, s := range bGiven {
		if slices.Contains(aHas, s) {
			t.Errorf("stream %s given to b went back to a, which was releasing it", s)
		}
	}
}

// The coordinator moving (NOT_COORDINATOR) costs no stream; a member the
// coordinator forgot (UNKNOWN_MEMBER_ID) stops its streams at once, joins
// again as a new member and takes its share again.
func TestMembershipCoordinatorErrors(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	all := streams(1, 6)
	a := start(t, c.ListenAddrs(), "a", all, testSettings)
	b := start(t, c.ListenAddrs(), "b", all, testSettings)
	balanced(t, 20*time.Second, all, a, b)
	a.h.mu.Lock()
	assignments := len(a.h.got)
	a.h.mu.Unlock()

	var mu sync.Mutex
	refused := 0
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		// A control function kept stays kept until dropped.
		c.KeepControl()
		if refused++; refused >= 3 {
			c.DropControl()
		}
		resp := req.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.NotCoordinator.Code
		return resp, nil, true
	})
	testenv.Eventually(t, 10*time.Second, "three heartbeats answered NOT_COORDINATOR", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refused >= 3
	})
	time.Sleep(testSettings.SessionTimeout)
	if !a.h.lostAt().IsZero() || !b.h.lostAt().IsZero() {
		t.Fatal("a member stopped its streams when the coordinator answered NOT_COORDINATOR")
	}
	a.h.mu.Lock()
	if len(a.h.got) != assignments {
		t.Errorf("NOT_COORDINATOR led to %d more assignments", len(a.h.got)-assignments)
	}
	a.h.mu.Unlock()

	// The coordinator forgets a.
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		hb := req.(*kmsg.HeartbeatRequest)
		resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
		c.KeepControl()
		if a.h.memberID() != hb.MemberID {
			return nil, nil, false // b's heartbeat
		}
		c.DropControl()
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	testenv.Eventually(t, 10*time.Second, "a stops its streams", func() bool { return !a.h.lostAt().IsZero() })
	balanced(t, 20*time.Second, all, a, b)
}

// A group the process cannot be a member of stops Run with an error that
// says why: one of another protocol type (a consumer group of that name),
// a session timeout the broker does not take, and refused ACLs.
func TestMembershipRefused(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(testSettings.Group), kgo.ConsumeTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	consumer.PollFetches(ctx) // joins
	refused := func(s Settings, want string) {
		t.Helper()
		m := start(t, c.ListenAddrs(), "a", streams(1, 2), s)
		select {
		case err := <-m.done:
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), want) {
				t.Errorf("Run = %v, want %q", err, want)
			}
			m.done <- err
		case <-time.After(10 * time.Second):
			t.Fatalf("Run went on, where it should have stopped with %q", want)
		}
	}
	refused(testSettings, "it is a group of another kind")
	s := testSettings
	s.Group, s.SessionTimeout = "too-short", 300*time.Millisecond
	refused(s, "the broker does not take a session timeout of 300ms")
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.(*kmsg.JoinGroupRequest).ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil, true
	})
	s = testSettings
	s.Group = "other"
	refused(s, "not authorized by the Kafka cluster: the principal needs the Read ACL on group other")
}

// Describe lists the members of a group, the host each says it runs on,
// the streams its config has and those it runs.
func TestDescribe(t *testing.T) {
	brokers, _ := testenv.KfakeCluster(t, 1, kfake.GroupMinSessionTimeout(time.Second))
	a := start(t, brokers, "host-a", streams(1, 3), testSettings)
	b := start(t, brokers, "host-b", streams(1, 4), testSettings)
	balanced(t, 20*time.Second, streams(1, 4), a, b)
	ctx := context.Background()
	d, err := Describe(ctx, kafka.Settings{Brokers: brokers}, testSettings.Group)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != "Stable" || len(d.Members) != 2 || d.Generation < 1 || d.Leader == "" {
		t.Fatalf("description %+v", d)
	}
	for _, m := range d.Members {
		want, _ := map[string]*member{"host-a": a, "host-b": b}[m.Name].h.state()
		if !slices.Equal(m.Streams, want) || m.ClientID != "walstream" || m.Host == "" || len(m.Configured) < 3 {
			t.Errorf("member %+v, want streams %v", m, want)
		}
	}
	if o, ok := d.Owner("s04"); !ok || o.Name != "host-b" {
		t.Errorf("s04 is %+v's, want host-b's: only it has the stream", o)
	}
	d, err = Describe(ctx, kafka.Settings{Brokers: brokers}, "no-such-group")
	if err != nil || len(d.Members) != 0 || d.State != "Dead" {
		t.Errorf("a group that does not exist: %+v, %v", d, err)
	}
}
