package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/internal/testenv"
)

// Fault kinds, as counted in the report.
const (
	faultKill            = "walstream-kill"
	faultTerm            = "walstream-sigterm"
	faultPGImmediate     = "postgres-restart-immediate"
	faultPGFast          = "postgres-restart-fast"
	faultBrokerKill      = "broker-restart-sigkill"
	faultBrokerTerm      = "broker-restart-sigterm"
	faultBlackholePG     = "blackhole-postgres"
	faultBlackholeKafka  = "blackhole-kafka"
	faultResetPG         = "reset-peer-postgres"
	faultResetKafka      = "reset-peer-kafka"
	faultLatencyKafka    = "latency-kafka"
	faultTerminateSender = "walsender-terminated"
	faultZombie          = "zombie"
	// faultZombieHolding is a zombie paused as it takes its slot, before it
	// fences the instance before it and reads the checkpoint.
	faultZombieHolding = "zombie-holding-slot"
	faultRecreate      = "outbox-recreated"
	faultPartitions    = "partition-attached-dropped"
	// faultPause stops one stream's walstream with a Kafka transaction
	// open for longer than its transaction timeout, so that Kafka aborts
	// the transaction; meanwhile that transaction holds back the
	// checkpoint partition the other streams share.
	faultPause = "walstream-paused-past-txn-timeout"
	// faultForeign opens another producer's transaction on the checkpoint
	// topic and leaves it open until its coordinator aborts it.
	faultForeign = "foreign-txn-holds-checkpoint-topic"
	// The cluster's faults (-chaos.kafka-nodes=3).
	faultCoordinatorKill    = "kafka-coordinator-kill"
	faultOutboxLeaderKill   = "kafka-outbox-leader-kill"
	faultCheckpointLeadKill = "kafka-checkpoint-leader-kill"
	faultControllerKill     = "kafka-controller-kill"
	faultTwoBrokersDown     = "kafka-two-brokers-down"
	faultBrokerCutOff       = "kafka-broker-cut-off"
	// A fleet's faults (-chaos.fleet), on the process of a stream picked
	// at random: paused past the group's session timeout (its streams
	// move, and it must stop them when it runs again), paused briefly
	// (nothing moves), and every process restarted in turn as a rollout
	// does. A fleet's walstream-sigterm is a leave, then a join.
	faultFleetPause = "walstream-paused-past-session-timeout"
	faultFleetBrief = "walstream-paused-briefly"
	faultRolling    = "fleet-rolling-restart"
)

// sessionTimeout is the fleet's group's session timeout, walstream's
// default: a process paused longer loses its streams.
const sessionTimeout = 10 * time.Second

// crashPoints are walstream's named crash points (pipeline.CrashHook);
// mid-chunk is within a re-emit request's chunk.
var crashPoints = []string{"after-produce", "before-commit", "after-commit", "mid-transaction", "mid-stream", "mid-chunk"}

// walSenderTimeout is Postgres' wal_sender_timeout in the suite; a
// blackhole lasts longer.
const walSenderTimeout = 5 * time.Second

// fault is one entry of a deck: a kind and, for a kill, the crash point the
// restarted walstream is armed with.
type fault struct {
	kind    string
	crashAt string
}

// perStream are the kinds that act on one stream, picked at random: its
// walstream process, its slot, its outbox, its transaction coordinator.
// The others hit every stream at once.
var perStream = map[string]bool{faultKill: true, faultTerm: true, faultPause: true, faultTerminateSender: true,
	faultZombie: true, faultZombieHolding: true, faultRecreate: true, faultPartitions: true, faultCoordinatorKill: true, faultReemit: true,
	faultFleetPause: true, faultFleetBrief: true}

// deck is one round of faults. The short variant plays one deck, which has
// every kind and every crash point; the long one plays decks until its
// time is up. A cluster's deck has its broker faults instead of the one
// broker's restarts and network faults. Kinds in skip are left out. With
// three walstream processes or more (procs), the short deck plays its
// pause inside the foreign transaction's hold (foreign). A fleet's deck
// has its pauses and rollouts instead of the faults that hold one
// stream's process (a zombie, a pause mid-commit, a foreign transaction
// watched against the other processes) or stop one stream for good (a
// recreated outbox table).
func deck(long, cluster, fleet bool, procs int, skip map[string]bool) []fault {
	d := []fault{{kind: faultTerm}, {kind: faultPartitions}, {kind: faultReemit}}
	switch {
	case fleet:
		d = append(d, fault{kind: faultFleetPause}, fault{kind: faultFleetBrief}, fault{kind: faultRolling})
	case long || procs < 3 || skip[faultForeign]:
		d = append(d, fault{kind: faultForeign}, fault{kind: faultPause})
	default:
		d = append(d, fault{kind: faultForeign})
	}
	if cluster {
		d = append(d, fault{kind: faultCoordinatorKill}, fault{kind: faultOutboxLeaderKill}, fault{kind: faultCheckpointLeadKill},
			fault{kind: faultControllerKill}, fault{kind: faultTwoBrokersDown}, fault{kind: faultBrokerCutOff})
	} else {
		d = append(d, fault{kind: faultPGImmediate}, fault{kind: faultPGFast},
			fault{kind: faultBrokerKill}, fault{kind: faultBrokerTerm},
			fault{kind: faultBlackholePG}, fault{kind: faultBlackholeKafka},
			fault{kind: faultResetPG}, fault{kind: faultResetKafka}, fault{kind: faultLatencyKafka},
			fault{kind: faultTerminateSender})
		if !fleet {
			d = append(d, fault{kind: faultZombie}, fault{kind: faultZombieHolding}, fault{kind: faultRecreate})
		}
	}
	for _, p := range crashPoints {
		d = append(d, fault{kind: faultKill, crashAt: p})
	}
	if long {
		// Three kills more, and one per process: each stream's process
		// is killed about as often as the one process was before the
		// holds of the checkpoint topic took their share of the time.
		for range 3 + procs {
			d = append(d, fault{kind: faultKill})
		}
		d = append(d, fault{kind: faultPartitions}, fault{kind: faultReemit})
		if !cluster {
			d = append(d, fault{kind: faultPGImmediate}, fault{kind: faultTerminateSender})
		}
		if fleet {
			d = append(d, fault{kind: faultTerm}, fault{kind: faultFleetPause}, fault{kind: faultFleetBrief})
		}
	}
	return slices.DeleteFunc(d, func(f fault) bool { return skip[f.kind] })
}

// rig is what the faults act on.
type rig struct {
	pg      *testenv.Postgres
	pgURL   string // direct, the postgres database
	broker  *brokerRig
	px      *proxies
	streams []*stream
	cons    *consumer
	smp     *sampler
	wsBin   string
	logf    func(format string, args ...any)
	// outboxDDL is the file that creates the outbox table.
	outboxDDL string
}

// processes are the supervisors of the streams' walstream processes.
func (r *rig) processes() []*supervisor {
	var sups []*supervisor
	for _, st := range r.streams {
		for _, s := range st.sups {
			if !slices.Contains(sups, s) {
				sups = append(sups, s)
			}
		}
	}
	return sups
}

// statusArgs run `walstream status` for st as an operator would, with
// walstream's connection settings.
func (r *rig) statusArgs(st *stream) []string {
	return []string{"status", "--pg-url", st.wsURL, "--slot", st.slot, "--kafka-brokers", r.px.kafkaAddrs()}
}

// faults injects faults and counts them.
type faults struct {
	rig     *rig
	rng     *mrand.Rand
	long    bool
	cluster bool
	fleet   bool
	skip    map[string]bool

	mu  sync.Mutex
	now string // the fault being injected, for the watchdog
	rep faultReport
	// partitions counts the partitions attached so far, which names them;
	// foreigns the foreign transactions.
	partitions, foreigns int
}

// faultReport is what the faults did, for the report.
type faultReport struct {
	Counts         map[string]int `json:"injected"`
	CrashesArmed   map[string]int `json:"crash_points_armed"`
	CrashesMissed  int            `json:"crash_points_not_reached"`
	ZombieOutcomes map[string]int `json:"zombie_outcomes"`
	ProxyReplaced  int            `json:"proxies_replaced"`
	GapRows        int            `json:"rows_in_recreation_gaps"`
	GapStops       []string       `json:"recreation_stops,omitempty"`
	// PauseOutcomes: how a walstream paused past its transaction timeout
	// went on, by what ended its session.
	PauseOutcomes map[string]int `json:"pause_outcomes,omitempty"`
	// Targets are the nodes the cluster's faults hit, by fault.
	Targets map[string][]int32 `json:"cluster_fault_targets,omitempty"`
	// ByStream counts the faults on one stream, by stream and kind.
	ByStream map[string]map[string]int `json:"by_stream"`
	// Moves are how long a fleet's streams took to stream in another
	// process after a fault on theirs; FleetPauses how a paused process
	// of a fleet went on.
	Moves       []move         `json:"fleet_moves,omitempty"`
	FleetPauses map[string]int `json:"fleet_pause_outcomes,omitempty"`
	// Holds are the checkpoint partition's holds: a stream paused
	// mid-commit, a foreign transaction.
	Holds  []hold   `json:"holds"`
	Errors []string `json:"errors,omitempty"`
	Notes  []string `json:"notes,omitempty"`
}

func newFaults(r *rig, seed uint64, long, cluster, fleet bool, skip map[string]bool) *faults {
	f := &faults{rig: r, rng: mrand.New(mrand.NewPCG(seed, 0xfa17)), long: long, cluster: cluster, fleet: fleet, skip: skip, rep: faultReport{
		Counts: make(map[string]int), CrashesArmed: make(map[string]int), ZombieOutcomes: make(map[string]int),
		PauseOutcomes: make(map[string]int), Targets: make(map[string][]int32), ByStream: make(map[string]map[string]int),
		FleetPauses: make(map[string]int)}}
	for _, st := range r.streams {
		f.rep.ByStream[st.name] = make(map[string]int)
	}
	return f
}

func (f *faults) failf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rep.Errors = append(f.rep.Errors, fmt.Sprintf(format, args...))
	f.rig.logf("FAULT ERROR: "+format, args...)
}

// report returns a copy of what the faults did so far.
func (f *faults) report() faultReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.rep
	r.Counts, r.CrashesArmed, r.ZombieOutcomes = maps.Clone(r.Counts), maps.Clone(r.CrashesArmed), maps.Clone(r.ZombieOutcomes)
	r.PauseOutcomes, r.Targets = maps.Clone(r.PauseOutcomes), maps.Clone(r.Targets)
	r.Moves, r.FleetPauses = slices.Clone(r.Moves), maps.Clone(r.FleetPauses)
	r.Errors, r.Notes, r.GapStops, r.Holds = slices.Clone(r.Errors), slices.Clone(r.Notes), slices.Clone(r.GapStops), slices.Clone(r.Holds)
	r.ByStream = make(map[string]map[string]int)
	for k, v := range f.rep.ByStream {
		r.ByStream[k] = maps.Clone(v)
	}
	return r
}

// gapIDs returns the event ids of st lost in recreation gaps so far.
func (f *faults) gapIDs(st *stream) map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(st.gap)
}

// pick picks a stream at random.
func (f *faults) pick() *stream { return f.rig.streams[f.rng.IntN(len(f.rig.streams))] }

// injecting returns the fault being injected, if any.
func (f *faults) injecting() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// note records something the harness had to work around, which is not
// by itself a failure.
func (f *faults) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rep.Notes = append(f.rep.Notes, fmt.Sprintf(format, args...))
	f.rig.logf("note: "+format, args...)
}

// run plays decks until until (the first deck always in full) or ctx ends.
func (f *faults) run(ctx context.Context, until time.Time) {
	for round := 0; round == 0 || (f.long && time.Now().Before(until)); round++ {
		d := deck(f.long, f.cluster, f.fleet, len(f.rig.processes()), f.skip)
		f.rng.Shuffle(len(d), func(i, j int) { d[i], d[j] = d[j], d[i] })
		for _, ft := range d {
			if ctx.Err() != nil || (round > 0 && time.Now().After(until)) {
				return
			}
			start := time.Now()
			var st *stream
			if perStream[ft.kind] {
				st = f.pick()
			}
			f.mu.Lock()
			f.now = fmt.Sprintf("%s since %s", ft.kind, start.Format(time.TimeOnly))
			f.mu.Unlock()
			detail := f.inject(ctx, ft, st)
			f.mu.Lock()
			f.rep.Counts[ft.kind]++
			if st != nil {
				f.rep.ByStream[st.name][ft.kind]++
				detail = st.name + ": " + detail
			}
			f.now = ""
			f.mu.Unlock()
			f.rig.logf("fault %-34s %-40s took %s", ft.kind, detail, time.Since(start).Round(10*time.Millisecond))
			sleep(ctx, 300*time.Millisecond+time.Duration(f.rng.Int64N(int64(1200*time.Millisecond))))
		}
	}
}

// inject injects one fault; st is the stream a fault of one stream acts on.
func (f *faults) inject(ctx context.Context, ft fault, st *stream) string {
	r := f.rig
	if f.fleet && slices.Contains([]string{faultKill, faultTerm, faultFleetPause, faultFleetBrief}, ft.kind) {
		// A fault on a process that streams: st's, once an earlier
		// fault's moves are over.
		f.settled(ctx, 30*time.Second)
	}
	switch ft.kind {
	case faultKill:
		return f.kill(ctx, st, ft.crashAt)
	case faultTerm:
		p := f.current(st)
		if p == nil {
			return "no walstream running"
		}
		if f.fleet {
			return f.leave(ctx, p)
		}
		stopProc(p, syscall.SIGTERM, 30*time.Second)
		if p.Err() != nil {
			f.failf("walstream #%d of %s did not exit 0 within 30s of SIGTERM: %s\n%s", p.id, st.name, p.ExitDesc(), p.LastLines(10))
		}
		f.restart(p.sup, "")
		return fmt.Sprintf("#%d %s", p.id, p.ExitDesc())
	case faultPGImmediate, faultPGFast:
		mode := map[string]string{faultPGImmediate: "immediate", faultPGFast: "fast"}[ft.kind]
		if err := r.pg.Restart(mode); err != nil {
			f.failf("restarting Postgres -m %s: %v", mode, err)
		}
		return "-m " + mode
	case faultBrokerKill, faultBrokerTerm:
		sig := map[string]syscall.Signal{faultBrokerKill: syscall.SIGKILL, faultBrokerTerm: syscall.SIGTERM}[ft.kind]
		if err := r.broker.Restart(sig); err != nil {
			f.failf("restarting the broker: %v", err)
		}
		return sig.String()
	case faultBlackholePG:
		// Longer than wal_sender_timeout: the walsender gives up on walstream.
		d := walSenderTimeout + time.Second + time.Duration(f.rng.Int64N(int64(2*time.Second)))
		f.toxic(ctx, &r.px.pg, d, "timeout", `{"timeout":0}`, "upstream", "downstream")
		return d.Round(10 * time.Millisecond).String()
	case faultBlackholeKafka:
		// Sometimes longer than --commit-timeout: the commit fails and is
		// retried from the checkpoint, while walstream keeps the
		// walsender alive.
		d := walSenderTimeout + time.Second + time.Duration(f.rng.Int64N(int64(6*time.Second)))
		f.toxic(ctx, &r.px.kafka[0], d, "timeout", `{"timeout":0}`, "upstream", "downstream")
		return d.Round(10 * time.Millisecond).String()
	case faultResetPG, faultResetKafka:
		p := map[string]**toxiproxy.Proxy{faultResetPG: &r.px.pg, faultResetKafka: &r.px.kafka[0]}[ft.kind]
		stream := []string{"upstream", "downstream"}[f.rng.IntN(2)]
		ms := f.rng.IntN(50)
		f.toxic(ctx, p, time.Second, "reset_peer", fmt.Sprintf(`{"timeout":%d}`, ms), stream)
		return fmt.Sprintf("%s after %dms", stream, ms)
	case faultLatencyKafka:
		ms := 100 + f.rng.IntN(2400)
		d := 4*time.Second + time.Duration(f.rng.Int64N(int64(2*time.Second)))
		f.toxic(ctx, &r.px.kafka[0], d, "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, ms, ms/4), "upstream", "downstream")
		return fmt.Sprintf("%dms each way for %s", ms, d.Round(10*time.Millisecond))
	case faultTerminateSender:
		n, err := f.exec(ctx, r.pgURL, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active", st.slot)
		if err != nil {
			f.failf("terminating the walsender of slot %s: %v", st.slot, err)
		}
		return fmt.Sprintf("%d terminated", n)
	case faultZombie:
		return f.zombie(ctx, st, false)
	case faultZombieHolding:
		return f.zombie(ctx, st, true)
	case faultRecreate:
		return f.recreate(ctx, st)
	case faultPartitions:
		return f.partition(ctx, st)
	case faultPause:
		return f.pause(ctx, st)
	case faultForeign:
		return f.foreign(ctx)
	case faultReemit:
		return f.reemit(ctx, st)
	case faultCoordinatorKill, faultOutboxLeaderKill, faultCheckpointLeadKill, faultControllerKill:
		return f.killNode(ctx, ft.kind, st)
	case faultTwoBrokersDown:
		return f.twoDown(ctx)
	case faultBrokerCutOff:
		return f.cutOff(ctx)
	case faultFleetPause:
		return f.fleetPause(ctx, st, sessionTimeout+2*time.Second+time.Duration(f.rng.Int64N(int64(6*time.Second))))
	case faultFleetBrief:
		return f.fleetPause(ctx, st, time.Second+time.Duration(f.rng.Int64N(int64(3*time.Second))))
	case faultRolling:
		return f.rolling(ctx)
	}
	panic("unknown fault " + ft.kind)
}

// toxic adds a toxic to *p on the given streams for d, then removes it.
func (f *faults) toxic(ctx context.Context, p **toxiproxy.Proxy, d time.Duration, typ, attrs string, streams ...string) {
	px := f.rig.px
	err := px.change(p, func(p *toxiproxy.Proxy) error {
		for _, s := range streams {
			if err := addToxic(p, typ+"_"+s, typ, s, attrs); err != nil {
				return err
			}
		}
		return nil
	})
	f.noteProxy(err)
	sleep(ctx, d)
	f.noteProxy(px.change(p, removeToxics))
}

func (f *faults) noteProxy(err error) {
	if err == nil {
		return
	}
	if !errors.Is(err, errProxyReplaced) {
		f.failf("%v", err)
		return
	}
	f.mu.Lock()
	f.rep.ProxyReplaced++
	f.mu.Unlock()
	f.note("%v", err)
}

// exec runs SQL on a fresh direct connection to url and returns the rows
// affected.
func (f *faults) exec(ctx context.Context, url, sql string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

// waitSlot waits up to d for st's slot to be active (held by a walsender)
// or not.
func (f *faults) waitSlot(ctx context.Context, st *stream, active bool, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		if got, err := f.slotActive(ctx, st); err == nil && got == active {
			return true
		}
	}
	return false
}

func (f *faults) slotActive(ctx context.Context, st *stream) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.rig.pgURL)
	if err != nil {
		return false, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.Background())
	var active bool
	err = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", st.slot).Scan(&active)
	return active, err
}

// current returns the walstream running st, starting one if there is
// none. In a fleet, where no process may stream st while it moves, it is
// another process of the fleet.
func (f *faults) current(st *stream) *wsProc {
	if p := st.proc(); p != nil {
		return p
	}
	for _, i := range f.rng.Perm(len(st.sups)) {
		if p := st.sups[i].current(); p != nil {
			return p
		}
	}
	return f.restart(st.sup, "")
}

// restart starts the walstream of sup.
func (f *faults) restart(sup *supervisor, crashAt string) *wsProc {
	p, err := sup.start(crashAt)
	if err != nil {
		f.failf("starting walstream of %s: %v", sup, err)
	}
	return p
}

// kill SIGKILLs st's walstream and starts it again, armed with a crash
// point when point is set; an armed process is given 20 s to reach it.
func (f *faults) kill(ctx context.Context, st *stream, point string) string {
	p := f.current(st)
	if p == nil {
		return "no walstream running"
	}
	streaming := p.streamingNow()
	killed := time.Now()
	stopProc(p, syscall.SIGKILL, 10*time.Second)
	if point == "" {
		f.restart(p.sup, "")
		if f.fleet {
			return fmt.Sprintf("#%d; %s", p.id, f.moved(ctx, faultKill, p, streaming, killed))
		}
		return fmt.Sprintf("#%d", p.id)
	}
	// Each stream has its share of the load: a crash point N commits or
	// events away is reached as soon as with one stream.
	n := 1 + f.rng.IntN(max(2, 20/len(f.rig.streams)))
	switch point {
	case "mid-transaction", "mid-stream":
		n = 1 + f.rng.IntN(2000/len(f.rig.streams))
	case "mid-chunk":
		// A request of an aggregate type, a third of the table, which the
		// restarted walstream meets and crashes within one of its first
		// chunks.
		n = 1 + f.rng.IntN(3)
		if _, err := f.request(ctx, st, st.typePredicate(aggregateTypes[f.rng.IntN(len(aggregateTypes))])); err != nil {
			f.note("a re-emit request of %s before the mid-chunk crash: %v", st.name, err)
		}
	}
	crashAt := fmt.Sprintf("%s:%d", point, n)
	f.mu.Lock()
	f.rep.CrashesArmed[point]++
	f.mu.Unlock()
	np := f.restart(p.sup, crashAt)
	if np == nil {
		return "restart failed"
	}
	select {
	case <-np.Done():
		// The supervisor counts the crash and starts a clean walstream.
		return fmt.Sprintf("#%d, then #%d crashed at %s", p.id, np.id, crashAt)
	case <-time.After(20 * time.Second):
	case <-ctx.Done():
	}
	if stopProc(np, syscall.SIGKILL, 10*time.Second); !np.KilledBy(syscall.SIGKILL) || !strings.Contains(np.Log(), "crash point") {
		f.mu.Lock()
		f.rep.CrashesMissed++
		f.mu.Unlock()
		f.restart(p.sup, "")
		return fmt.Sprintf("#%d, then #%d did not reach %s in 20s", p.id, np.id, crashAt)
	}
	return fmt.Sprintf("#%d, then #%d crashed at %s", p.id, np.id, crashAt)
}

// zombie stops st's streaming walstream A with SIGSTOP until its
// walsender times out, starts B, which takes the slot and fences A's
// transactional id, and then resumes A. A must not publish again: it
// either exits non-zero saying it was fenced or waits as a standby for the
// slot (and is killed after a while).
//
// holding stops A as it takes its slot instead (started again armed to
// stop itself there), after IDENTIFY_SYSTEM and before it fences the
// instance before it and reads the checkpoint: resumed, it fences B and
// finds B's checkpoint past the WAL end it identified, which is WAL the
// server has, not phantom events.
func (f *faults) zombie(ctx context.Context, st *stream, holding bool) string {
	a := f.current(st)
	if holding && a != nil {
		stopProc(a, syscall.SIGKILL, 10*time.Second)
		if a = f.restart(st.sup, "slot-held:1:stop"); a != nil && a.WaitLog(ctx, "stop point slot-held reached", 60*time.Second) != nil {
			f.failf("zombie: walstream #%d of %s did not reach its stop point slot-held within 60s", a.id, st.name)
			return "no stop at slot-held"
		}
	} else if a == nil || !a.streaming(60*time.Second) || !f.waitSlot(ctx, st, true, 60*time.Second) {
		f.failf("zombie: walstream of %s not streaming within 60s", st.name)
		return "no streaming walstream"
	}
	if a == nil {
		return "restart failed"
	}
	st.sup.detach(a)
	if !holding {
		a.Signal(syscall.SIGSTOP)
	}
	stopped := time.Now()
	// Every slot of the process is released, so that B takes them all.
	for _, o := range st.sup.streams {
		if !f.waitSlot(ctx, o, false, 60*time.Second) {
			f.failf("zombie: slot %s still active 60s after SIGSTOP of #%d", o.slot, a.id)
		}
	}
	released := time.Since(stopped)
	streamsBefore := len(reStreaming.FindAllString(a.Log(), -1))
	b := f.restart(st.sup, "")
	if b == nil || !b.streaming(60*time.Second) {
		f.failf("zombie: second walstream not streaming within 60s")
	}
	if holding {
		sleep(ctx, time.Second) // B's commits, past the WAL end A identified
	}
	a.Signal(syscall.SIGCONT)
	decided := make(chan struct{})
	if holding {
		// Each stream of a process stops at its own slot-held, so a
		// process of several may stop again as it is resumed.
		go func() {
			for {
				select {
				case <-decided:
					return
				case <-a.Done():
					return
				case <-time.After(200 * time.Millisecond):
					a.Signal(syscall.SIGCONT)
				}
			}
		}()
	}
	var outcome string
	select {
	case <-a.Done():
		switch log := a.Log(); {
		case a.Err() == nil:
			outcome = "exit-0"
		case strings.Contains(log, "fenced"):
			outcome = "fenced-exit"
		default:
			outcome = "other-exit"
		}
	case <-time.After(10 * time.Second):
		switch log := a.Log(); {
		case strings.Contains(log, "fenced"):
			outcome = "fenced-still-running"
		case strings.Contains(log, "is active for PID") || strings.Contains(log, "standby"):
			outcome = "standby"
		default:
			outcome = "running"
		}
		stopProc(a, syscall.SIGKILL, 10*time.Second)
	}
	close(decided)
	if b != nil && b.Exited() {
		f.failf("zombie: the new walstream #%d exited (%s) after #%d resumed:\n%s", b.id, b.ExitDesc(), a.id, b.LastLines(5))
	}
	// Postgres lets one walsender stream a slot, so a zombie streaming
	// again means its replacement lost the slot meanwhile (another fault):
	// a takeover in turn, not two publishers; the checker judges the data.
	// A zombie holding the slot goes on to stream once on a replication
	// connection its walsender has left: a session that ends at its
	// first read, not a slot taken again.
	if holding {
		streamsBefore++
	}
	if n := len(reStreaming.FindAllString(a.Log(), -1)); n > streamsBefore {
		outcome = "took-slot-again"
	}
	// Nothing in the suite restores a server: phantom events are a
	// misjudged placement, whatever else the zombie did.
	if outcome == "exit-0" || outcome == "other-exit" || outcome == "running" || strings.Contains(a.Log(), "phantom events") {
		f.failf("zombie: walstream #%d: %s (%s):\n%s", a.id, outcome, a.ExitDesc(), a.LastLines(15))
	}
	if holding {
		outcome = "holding-" + outcome
	}
	f.mu.Lock()
	f.rep.ZombieOutcomes[outcome]++
	f.mu.Unlock()
	bid := 0
	if b != nil {
		bid = b.id
	}
	return fmt.Sprintf("#%d stopped, slot free after %s, #%d took over; #%d: %s", a.id, released.Round(100*time.Millisecond), bid, a.id, outcome)
}

// gapStop is what a stop must say to name a recreation gap: the stream's
// or the startup's TableRecreatedError, the slot monitor's SetupError
// ("object: reason"), or the startup's SetupError for a table the
// checkpoint recorded that is missing (a start between DROP and CREATE).
var gapStop = regexp.MustCompile(`table public\.outbox was dropped and recreated: OID \d+, now \d+|` +
	`table "public"\."outbox":? (was dropped and recreated while streaming|is no longer in publication|` +
	`was dropped after checkpoint [0-9A-F]+/[0-9A-F]+( \(\+\d+ events of the transaction committed at [0-9A-F]+/[0-9A-F]+\))? \(OID \d+\))`)

// recreate drops the outbox table under load and creates it again, the
// way that loses rows: the writers commit rows to the new table before it
// is added to the publication, in a later transaction. The gap is the
// ledger rows committed between the DROP (which waits for every writer of
// the old table) and a lock that holds the writers off while the table is
// added: the ledger, not the table, because writers delete some of their
// rows again. walstream must stop naming the gap; the harness then plays
// the operator, accepting the new table, and later rows must flow exactly
// once.
func (f *faults) recreate(ctx context.Context, st *stream) string {
	p := f.current(st)
	if p == nil {
		return "no walstream running"
	}
	st.sup.detach(p)
	conn, err := pgx.Connect(ctx, st.url)
	if err != nil {
		f.failf("connecting to recreate the outbox of %s: %v", st.name, err)
		f.restart(st.sup, "")
		return "no connection"
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ddl, err := os.ReadFile(f.rig.outboxDDL)
	if err != nil {
		f.failf("reading the outbox DDL: %v", err)
	}
	var oldOID, newOID uint32
	var gap []string
	err = func() error {
		if err := conn.QueryRow(ctx, "SELECT 'public.outbox'::regclass::oid").Scan(&oldOID); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "DROP TABLE public.outbox"); err != nil {
			return err
		}
		rows, err := conn.Query(ctx, "SELECT id::text FROM ledger")
		if err != nil {
			return err
		}
		before, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, string(ddl)); err != nil {
			return err
		}
		if err := conn.QueryRow(ctx, "SELECT 'public.outbox'::regclass::oid").Scan(&newOID); err != nil {
			return err
		}
		sleep(ctx, 200*time.Millisecond+time.Duration(f.rng.Int64N(int64(600*time.Millisecond))))
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
		if _, err := tx.Exec(ctx, "LOCK TABLE public.outbox IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, "SELECT id::text FROM ledger")
		if err != nil {
			return err
		}
		after, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		old := make(map[string]bool, len(before))
		for _, id := range before {
			old[id] = true
		}
		for _, id := range after {
			if !old[id] {
				gap = append(gap, id)
			}
		}
		if _, err := tx.Exec(ctx, "ALTER PUBLICATION walstream_outbox ADD TABLE public.outbox"); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}()
	if err != nil {
		f.failf("recreating the outbox table of %s: %v", st.name, err)
	}
	f.mu.Lock()
	for _, id := range gap {
		st.gap[id] = true
	}
	f.rep.GapRows += len(gap)
	f.mu.Unlock()

	// Rows keep coming into the new table, so the stream shows it at once;
	// the slot monitor would find it too.
	stop := "still running"
	select {
	case <-f.stopped(ctx, p, st):
		stop = strings.TrimSpace(p.LastLines(1))
		if len(st.sup.streams) > 1 {
			// A process of several streams goes on with the others until
			// it is stopped, then names each stream that stopped.
			stopProc(p, syscall.SIGTERM, 30*time.Second)
			stop = "(no line)"
			for _, m := range reStopLine.FindAllStringSubmatch(p.Log(), -1) {
				if m[1] == st.name {
					stop = m[0]
				}
			}
		}
		if !gapStop.MatchString(stop) {
			f.failf("walstream #%d stopped %s without naming the recreated table (OID %d, now %d): %s", p.id, st.name, oldOID, newOID, p.LastLines(10))
		}
	case <-time.After(60 * time.Second):
		stopProc(p, syscall.SIGKILL, 10*time.Second)
		f.failf("walstream #%d went on streaming for 60s after the outbox table was recreated (OID %d, now %d) with %d rows lost", p.id, oldOID, newOID, len(gap))
	case <-ctx.Done():
	}
	f.mu.Lock()
	f.rep.GapStops = append(f.rep.GapStops, stop)
	f.mu.Unlock()
	st.sup.accept(st, newOID)
	f.restart(st.sup, "")
	return fmt.Sprintf("OID %d, now %d, %d rows in the gap; #%d stopped", oldOID, newOID, len(gap), p.id)
}

// stopped is closed once p stops streaming st: it exits, or, in a process
// of several streams, logs that st stopped and the others go on.
func (f *faults) stopped(ctx context.Context, p *wsProc, st *stream) <-chan struct{} {
	if len(st.sup.streams) == 1 {
		return p.Done()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !p.Exited() && ctx.Err() == nil && len(p.streamStops(st)) == 0 {
			sleep(ctx, 200*time.Millisecond)
		}
	}()
	return done
}

// partitionWindow is how far ahead of the server's clock an attached
// partition's range of created_at starts, and how long it lasts: the
// writers fill it, a transaction's created_at being its start.
const (
	partitionLead   = 2 * time.Second
	partitionLength = 2 * time.Second
)

// partition attaches a partition of the outbox for the next seconds of
// created_at, lets the writers fill it, then drops it with its rows, which
// walstream may not have decoded yet: they are in the WAL, and Postgres
// decodes them with the catalog of their time. Every other partition is
// detached before it is dropped. None of it may stop walstream, lose a row
// or publish one twice.
func (f *faults) partition(ctx context.Context, st *stream) string {
	f.partitions++
	name := fmt.Sprintf("outbox_part_%d", f.partitions)
	conn, err := pgx.Connect(ctx, st.url)
	if err != nil {
		f.failf("connecting to attach a partition: %v", err)
		return "no connection"
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var from, to string
	var rows int64
	detach := f.partitions%2 == 1
	err = func() error {
		// A range the default partition cannot hold rows of yet: it starts
		// after every running transaction's created_at.
		if err := conn.QueryRow(ctx, "SELECT (now() + $1::interval)::text, (now() + $2::interval)::text",
			partitionLead.String(), (partitionLead+partitionLength).String()).Scan(&from, &to); err != nil {
			return err
		}
		for _, sql := range []string{
			fmt.Sprintf("CREATE TABLE public.%s (LIKE public.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)", name),
			fmt.Sprintf("ALTER TABLE public.outbox ATTACH PARTITION public.%s FOR VALUES FROM ('%s') TO ('%s')", name, from, to),
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		sleep(ctx, partitionLead+partitionLength+500*time.Millisecond)
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM public.%s", name)).Scan(&rows); err != nil {
			return err
		}
		drop := []string{fmt.Sprintf("DROP TABLE public.%s", name)}
		if detach {
			drop = append([]string{fmt.Sprintf("ALTER TABLE public.outbox DETACH PARTITION public.%s", name)}, drop...)
		}
		for _, sql := range drop {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		return nil
	}()
	if err != nil {
		f.failf("partition %s: %v", name, err)
	}
	how := "dropped"
	if detach {
		how = "detached and dropped"
	}
	return fmt.Sprintf("%s attached, %d rows, %s", name, rows, how)
}
