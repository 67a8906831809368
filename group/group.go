package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/walstream/walstream/kafka"
)

// ProtocolType is the group's protocol type, as Kafka Connect's is
// "connect": a consumer group of the same name is refused by the
// coordinator, and not taken for a fleet.
const ProtocolType = "walstream"

// protocolName names the assignor and the format of its metadata; a
// later format is a new name, offered beside this one during a rollout.
const protocolName = "streams-1"

// Defaults of Settings.
const (
	DefaultSessionTimeout    = 10 * time.Second
	DefaultHeartbeatInterval = time.Second
	DefaultRebalanceTimeout  = 30 * time.Second
)

// DefaultGroup is the group of a fleet whose streams keep their checkpoints
// in checkpointTopic. Every process of one fleet config agrees on it, and
// two fleets that share it share the checkpoint topic, in which each
// stream's name is already its own (its checkpoint key and transactional
// id derive from it): a group may carry both, since a stream is only given
// to members that list it.
func DefaultGroup(checkpointTopic string) string { return "walstream-fleet-" + checkpointTopic }

// Settings are a fleet's membership of its group.
type Settings struct {
	// Group is the Kafka group id the fleet's processes join; empty
	// when the process shares its streams with no other.
	Group string
	// SessionTimeout is how long the coordinator waits for a member's
	// heartbeat before it gives the member's streams to the others; a
	// member that cannot reach the coordinator stops its streams a margin
	// before (lostAfter). HeartbeatInterval is how often a member
	// heartbeats, and so how soon it learns of a rebalance;
	// RebalanceTimeout how long the coordinator waits for every member to
	// join again at a rebalance.
	SessionTimeout, HeartbeatInterval, RebalanceTimeout time.Duration
}

// lostAfter is how long a member goes on running its streams without an
// answer of the coordinator that shows it still a member: two heartbeats,
// and at least a quarter of the session timeout, before the session
// timeout, after which the coordinator gives its streams to the others
// (7.5 s at the defaults). Stopping first gives the new owners free slots
// rather than a wait.
func (s Settings) lostAfter() time.Duration {
	return s.SessionTimeout - max(2*s.HeartbeatInterval, s.SessionTimeout/4)
}

// Handler is what a member drives: the streams of its process.
type Handler interface {
	// Owned are the streams the process runs now, those it is still
	// releasing included, and of them those it releases: what it tells
	// the leader at each join.
	Owned() (owned, releasing []string)
	// Assign is called with each generation's assignment, and with the
	// zero Assignment when the process is no member any more (the
	// coordinator forgot it, or did not answer for lostAfter): it must
	// then stop every stream, which the coordinator gives to the others.
	// It must not block: it is called with the member's lock held.
	Assign(Assignment)
}

// Config is one process's membership: the group's settings, the host it
// runs on and the streams its config has.
type Config struct {
	Settings
	Name    string
	Streams []string
}

// Membership is one process's membership of its fleet's group.
type Membership struct {
	cfg     Config
	client  *kgo.Client
	log     *slog.Logger
	metrics *Metrics

	mu sync.Mutex
	h  Handler
	// id is the member id the coordinator gave, empty before the first
	// join and after the coordinator forgot it; gen the generation of the
	// last join, -1 before the first.
	id  string
	gen int32
	// held: h holds an assignment; contact is the last answer showing
	// the coordinator knows this member, and lost fires lostAfter after it.
	held    bool
	contact time.Time
	lost    *time.Timer
	// again asks the join loop to join again.
	again chan rejoin
}

// NewMembership creates the membership of one process; it connects to
// Kafka when it runs.
func NewMembership(conn kafka.Settings, cfg Config, log *slog.Logger, m *Metrics) (*Membership, error) {
	return newMembership(conn, cfg, log, m)
}

// newMembership is NewMembership with more client options, for tests.
func newMembership(conn kafka.Settings, cfg Config, log *slog.Logger, m *Metrics, opts ...kgo.Opt) (*Membership, error) {
	cl, err := kgo.NewClient(slices.Concat(conn.Opts(), []kgo.Opt{kgo.ClientID("walstream"),
		kafka.WithLogger(log.With("component", "fleet")),
		// A coordinator that moved is found again within a heartbeat or
		// two, not after franz-go's backoff of up to 5 s.
		kgo.RetryBackoffFn(func(fails int) time.Duration { return min(time.Duration(fails)*100*time.Millisecond, time.Second) })}, opts)...)
	if err != nil {
		return nil, fmt.Errorf("creating the Kafka client of group %s: %w", cfg.Group, err)
	}
	return &Membership{cfg: cfg, client: cl, log: log.With("group", cfg.Group), metrics: m, gen: -1}, nil
}

// rejoin asks the join loop for a new join: a heartbeat learned that the
// group of generation gen rebalances, or forgot this member, or err is a
// permanent error.
type rejoin struct {
	gen int32
	err error
}

// Run keeps the process in the group until ctx ends, then leaves it: it
// joins, gives h each generation's assignment, and heartbeats; a
// rebalance makes it join again, keeping its streams meanwhile (a stream
// moves when the next assignment gives it to another). It returns nil
// when ctx ends, and an error the group cannot go on from (refused ACLs,
// a group of another protocol type, a session timeout the broker does not
// take).
func (m *Membership) Run(ctx context.Context, h Handler) error {
	defer m.client.Close()
	m.mu.Lock()
	m.h = h
	m.lost = time.AfterFunc(time.Hour, m.loseIfSilent)
	m.lost.Stop()
	m.again = make(chan rejoin, 1)
	again := m.again
	m.mu.Unlock()
	defer m.lost.Stop()
	hctx, stop := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() { defer close(beating); m.heartbeat(hctx) }()
	defer func() { stop(); <-beating }()

	wait := retryFirst
	for {
		// A request to rejoin that the join below answers anyway.
		select {
		case <-again:
		default:
		}
		err := m.join(ctx)
		switch {
		case ctx.Err() != nil:
			m.leave(ctx)
			return nil
		case errors.Is(err, ErrRefused):
			return err
		case errors.Is(err, errRejoin):
			continue
		case err != nil:
			m.log.Warn(fmt.Sprintf("could not join the fleet's group; retrying in %s", wait), "err", err, "member_id", m.memberID())
			select {
			case <-ctx.Done():
				m.leave(ctx)
				return nil
			case <-time.After(wait):
			}
			wait = min(2*wait, retryMax)
			continue
		}
		wait = retryFirst
		for {
			select {
			case <-ctx.Done():
				m.leave(ctx)
				return nil
			case r := <-again:
				if r.err != nil {
					return r.err
				}
				if m.stale(r.gen) {
					continue // about a generation this member left behind
				}
			}
			break
		}
	}
}

// Retries of a join that failed without an answer to act on.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 5 * time.Second
)

// errRejoin: the group rebalances or forgot this member; join again at once.
var errRejoin = errors.New("join again")

// ErrRefused marks the errors no join can get past: refused ACLs, a group
// of another kind, settings the broker does not take.
var ErrRefused = errors.New("the fleet's group refused this process")

// join joins the group and syncs: as the leader, it assigns the streams;
// every member hands the assignment it receives to its handler.
func (m *Membership) join(ctx context.Context) error {
	g := m.cfg.Group
	for {
		m.mu.Lock()
		md := Metadata{Version: formatVersion, Name: m.cfg.Name, Streams: m.cfg.Streams}
		md.Owned, md.Releasing = m.h.Owned()
		id := m.id
		m.mu.Unlock()
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = g, id, ProtocolType
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = millis(m.cfg.SessionTimeout), millis(m.cfg.RebalanceTimeout)
		req.Reason = kmsg.StringPtr("a walstream process joins its fleet")
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = protocolName, encode(md)
		req.Protocols = append(req.Protocols, p)
		jctx, cancel := context.WithTimeout(ctx, m.cfg.RebalanceTimeout+m.cfg.SessionTimeout)
		resp, err := req.RequestWith(jctx, m.client)
		cancel()
		if err != nil {
			return m.refused("joining", err)
		}
		switch err := kerr.ErrorForCode(resp.ErrorCode); {
		case err == nil:
		case errors.Is(err, kerr.MemberIDRequired):
			m.mu.Lock()
			m.id = resp.MemberID
			m.mu.Unlock()
			continue
		case errors.Is(err, kerr.UnknownMemberID):
			m.forgotten(id, m.generation(), "the coordinator no longer knows this member")
			continue
		default:
			return m.refused("joining", err)
		}
		m.mu.Lock()
		m.id, m.gen = resp.MemberID, resp.Generation
		m.touchLocked()
		m.mu.Unlock()
		return m.sync(ctx, resp)
	}
}

// sync sends the leader's assignment, or asks for it, and hands it on.
func (m *Membership) sync(ctx context.Context, joined *kmsg.JoinGroupResponse) error {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.Generation, req.MemberID = m.cfg.Group, joined.Generation, joined.MemberID
	req.ProtocolType, req.Protocol = kmsg.StringPtr(ProtocolType), joined.Protocol
	if joined.LeaderID == joined.MemberID {
		req.GroupAssignment = m.lead(joined)
	}
	sctx, cancel := context.WithTimeout(ctx, m.cfg.RebalanceTimeout+m.cfg.SessionTimeout)
	resp, err := req.RequestWith(sctx, m.client)
	cancel()
	if err != nil {
		return m.refused(fmt.Sprintf("syncing generation %d of", joined.Generation), err)
	}
	switch err := kerr.ErrorForCode(resp.ErrorCode); {
	case err == nil:
	case errors.Is(err, kerr.RebalanceInProgress), errors.Is(err, kerr.IllegalGeneration):
		return errRejoin
	case errors.Is(err, kerr.UnknownMemberID):
		m.forgotten(joined.MemberID, joined.Generation, "the coordinator no longer knows this member")
		return errRejoin
	default:
		return m.refused("syncing", err)
	}
	a, err := decodeAssignment(resp.MemberAssignment)
	if err != nil {
		return fmt.Errorf("group %s, generation %d, leader %s: %w", m.cfg.Group, joined.Generation, joined.LeaderID, err)
	}
	a.Self = joined.MemberID
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.id != joined.MemberID || m.gen != joined.Generation {
		return errRejoin // a heartbeat learned meanwhile that this generation is over
	}
	m.touchLocked()
	m.held = true
	m.metrics.rebalances.Inc()
	m.metrics.members.Set(float64(len(a.Members)))
	m.metrics.assigned.Set(float64(len(a.Mine())))
	m.log.Info("fleet assignment", "generation", a.Generation, "member_id", a.Self, "leader", a.Leader,
		"members", len(a.Members), "streams", a.Mine())
	m.h.Assign(a)
	return nil
}

// lead assigns the streams of the members that joined: the leader's job.
func (m *Membership) lead(joined *kmsg.JoinGroupResponse) []kmsg.SyncGroupRequestGroupAssignment {
	members := make(map[string]Metadata, len(joined.Members))
	for _, jm := range joined.Members {
		md, err := decodeMetadata(jm.ProtocolMetadata)
		if err != nil {
			m.log.Warn("a member of the fleet's group is given no stream", "member_id", jm.MemberID, "err", err)
		}
		members[jm.MemberID] = md
	}
	a := Assignment{Version: formatVersion, Generation: joined.Generation, Leader: joined.MemberID, Members: Assign(members)}
	moved, total := 0, 0
	for _, am := range a.Members {
		total += len(am.Streams)
		for _, s := range am.Streams {
			if !slices.Contains(members[am.ID].Owned, s) {
				moved++
			}
		}
	}
	m.log.Info("assigned the fleet's streams", "generation", joined.Generation, "members", len(a.Members), "streams", total,
		"started_anew", moved)
	b := encode(a)
	out := make([]kmsg.SyncGroupRequestGroupAssignment, len(a.Members))
	for i, am := range a.Members {
		out[i] = kmsg.NewSyncGroupRequestGroupAssignment()
		out[i].MemberID, out[i].MemberAssignment = am.ID, b
	}
	return out
}

// heartbeat heartbeats every HeartbeatInterval while the member has a
// generation, also while it joins again (the coordinator answers
// REBALANCE_IN_PROGRESS, which shows it still knows the member), and asks
// the join loop to join again when the group rebalances.
func (m *Membership) heartbeat(ctx context.Context) {
	t := time.NewTicker(m.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		id, gen := m.id, m.gen
		m.mu.Unlock()
		if id == "" || gen < 0 {
			continue
		}
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.Generation, req.MemberID = m.cfg.Group, gen, id
		hctx, cancel := context.WithTimeout(ctx, min(m.cfg.lostAfter(), 5*time.Second))
		resp, err := req.RequestWith(hctx, m.client)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				m.log.Debug("heartbeat unanswered", "err", err, "generation", gen)
			}
			continue // loseIfSilent acts once it has lasted
		}
		switch err := kerr.ErrorForCode(resp.ErrorCode); {
		case err == nil:
			m.touch(id, gen)
		case errors.Is(err, kerr.RebalanceInProgress):
			m.touch(id, gen)
			m.ask(rejoin{gen: gen})
		case errors.Is(err, kerr.IllegalGeneration):
			m.ask(rejoin{gen: gen})
		case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.FencedInstanceID):
			m.forgotten(id, gen, "the coordinator no longer knows this member")
			m.ask(rejoin{gen: gen})
		case errors.Is(err, kerr.GroupAuthorizationFailed):
			m.ask(rejoin{gen: gen, err: m.refused("heartbeating", err)})
		default:
			m.log.Debug("heartbeat refused", "err", err, "generation", gen)
		}
	}
}

// ask asks the join loop to join again, unless it was asked already.
func (m *Membership) ask(r rejoin) {
	select {
	case m.again <- r:
	default:
	}
}

// touch notes an answer showing that the coordinator knows member id at
// generation gen, when that is still this member's.
func (m *Membership) touch(id string, gen int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.id == id && m.gen == gen {
		m.touchLocked()
	}
}

func (m *Membership) touchLocked() {
	m.contact = time.Now()
	m.lost.Reset(m.cfg.lostAfter())
}

// loseIfSilent stops the process's streams when the coordinator has not
// answered for lostAfter: the coordinator gives them to other members at
// the session timeout, and a process that cannot reach it (a network cut,
// a pause) must not hold their slots then.
func (m *Membership) loseIfSilent() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if silent := time.Since(m.contact); m.held && silent < m.cfg.lostAfter() {
		m.lost.Reset(m.cfg.lostAfter() - silent)
		return
	}
	m.loseLocked(fmt.Sprintf("the coordinator has not answered for %s", m.cfg.lostAfter()))
}

// forgotten notes that the coordinator no longer knows member id of
// generation gen: its streams may be another member's already.
func (m *Membership) forgotten(id string, gen int32, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.id != id || m.gen != gen {
		return
	}
	m.id, m.gen = "", -1
	m.loseLocked(why)
}

// loseLocked stops the process's streams, when it holds any.
func (m *Membership) loseLocked(why string) {
	if !m.held {
		return
	}
	m.held = false
	m.metrics.losses.Inc()
	m.metrics.members.Set(0)
	m.metrics.assigned.Set(0)
	m.log.Warn("no longer a member of the fleet's group: stopping every stream of this process until it joins again, "+
		"since the coordinator gives them to the other members (see docs/operations.md, A fleet across processes)", "why", why)
	m.h.Assign(Assignment{Lost: why})
	m.ask(rejoin{gen: -1})
}

// refused words an error of the coordinator: the permanent ones are
// marked ErrRefused, the others are retried.
func (m *Membership) refused(what string, err error) error {
	g := m.cfg.Group
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Errorf("%w: %w: the principal needs the Read ACL on group %s: %w", ErrRefused, kafka.ErrAuthorization, g, err)
	case errors.Is(err, kerr.InconsistentGroupProtocol):
		return fmt.Errorf("%w: %s group %s: it is a group of another kind (a consumer group, or Kafka Connect's) or of walstream processes of another version: name the fleet's own group: %w",
			ErrRefused, what, g, err)
	case errors.Is(err, kerr.InvalidSessionTimeout):
		return fmt.Errorf("%w: %s group %s: the broker does not take a session timeout of %s (group.min.session.timeout.ms and group.max.session.timeout.ms bound it): %w",
			ErrRefused, what, g, m.cfg.SessionTimeout, err)
	case errors.Is(err, kerr.GroupMaxSizeReached):
		return fmt.Errorf("%w: %s group %s: it has group.max.size members already: %w", ErrRefused, what, g, err)
	case errors.Is(err, kerr.InvalidGroupID):
		return fmt.Errorf("%w: %s group %q: %w", ErrRefused, what, g, err)
	}
	return fmt.Errorf("%s group %s: %w", what, g, err)
}

// leave leaves the group, so that the coordinator gives this process's
// streams to the others at once rather than at the session timeout. It is
// called as the process stops: the streams are released meanwhile, and a
// new owner waits for each slot until this process frees it.
func (m *Membership) leave(ctx context.Context) {
	m.mu.Lock()
	id := m.id
	m.id, m.gen, m.held = "", -1, false
	m.mu.Unlock()
	if id == "" {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = m.cfg.Group
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID, lm.Reason = id, kmsg.StringPtr("the walstream process stops")
	req.Members = append(req.Members, lm)
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	resp, err := req.RequestWith(lctx, m.client)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, r := range resp.Members {
			err = errors.Join(err, kerr.ErrorForCode(r.ErrorCode))
		}
	}
	if err != nil {
		m.log.Warn("could not leave the fleet's group: the other members take this process's streams at the session timeout", "member_id", id, "err", err)
		return
	}
	m.log.Info("left the fleet's group", "member_id", id)
}

// leaveTimeout bounds the LeaveGroup at shutdown.
const leaveTimeout = 3 * time.Second

// stale reports whether a request to join again, about generation gen,
// is one the member need not act on: it holds the assignment of a later
// generation.
func (m *Membership) stale(gen int32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held && m.gen >= 0 && m.gen != gen
}

func (m *Membership) memberID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id
}

func (m *Membership) generation() int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

func millis(d time.Duration) int32 { return int32(d / time.Millisecond) }

// Metrics are the fleet's membership as this process sees it.
type Metrics struct {
	members, assigned  prometheus.Gauge
	rebalances, losses prometheus.Counter
}

// NewMetrics registers the membership's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walstream_fleet_members",
			Help: "Members of the fleet's group in the generation this process is in; 0 while it is in none (docs/operations.md, A fleet across processes)."}),
		assigned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walstream_fleet_assigned_streams",
			Help: "Streams the fleet's assignment gives this process."}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Name: "walstream_fleet_rebalances_total",
			Help: "Generations of the fleet's group this process joined: one per rebalance."}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{Name: "walstream_fleet_losses_total",
			Help: "Times this process stopped its streams because it was no longer a member: the coordinator did not answer, or no longer knew it."}),
	}
	reg.MustRegister(m.members, m.assigned, m.rebalances, m.losses)
	return m
}
