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
	faultRecreate        = "outbox-recreated"
	faultPartitions      = "partition-attached-dropped"
	// faultPause stops walstream with a Kafka transaction open for longer
	// than its transaction timeout, so that Kafka aborts the transaction.
	faultPause = "walstream-paused-past-txn-timeout"
	// The cluster's faults (-chaos.kafka-nodes=3).
	faultCoordinatorKill    = "kafka-coordinator-kill"
	faultOutboxLeaderKill   = "kafka-outbox-leader-kill"
	faultCheckpointLeadKill = "kafka-checkpoint-leader-kill"
	faultControllerKill     = "kafka-controller-kill"
	faultTwoBrokersDown     = "kafka-two-brokers-down"
	faultBrokerCutOff       = "kafka-broker-cut-off"
)

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

// deck is one round of faults. The short variant plays one deck, which has
// every kind and every crash point; the long one plays decks until its
// time is up. A cluster's deck has its broker faults instead of the one
// broker's restarts and network faults. Kinds in skip are left out.
func deck(long, cluster bool, skip map[string]bool) []fault {
	d := []fault{{kind: faultTerm}, {kind: faultPause}, {kind: faultPartitions}, {kind: faultReemit}}
	if cluster {
		d = append(d, fault{kind: faultCoordinatorKill}, fault{kind: faultOutboxLeaderKill}, fault{kind: faultCheckpointLeadKill},
			fault{kind: faultControllerKill}, fault{kind: faultTwoBrokersDown}, fault{kind: faultBrokerCutOff})
	} else {
		d = append(d, fault{kind: faultPGImmediate}, fault{kind: faultPGFast},
			fault{kind: faultBrokerKill}, fault{kind: faultBrokerTerm},
			fault{kind: faultBlackholePG}, fault{kind: faultBlackholeKafka},
			fault{kind: faultResetPG}, fault{kind: faultResetKafka}, fault{kind: faultLatencyKafka},
			fault{kind: faultTerminateSender}, fault{kind: faultZombie}, fault{kind: faultRecreate})
	}
	for _, p := range crashPoints {
		d = append(d, fault{kind: faultKill, crashAt: p})
	}
	if long {
		d = append(d, fault{kind: faultKill}, fault{kind: faultKill}, fault{kind: faultKill}, fault{kind: faultPartitions}, fault{kind: faultReemit})
		if !cluster {
			d = append(d, fault{kind: faultPGImmediate}, fault{kind: faultTerminateSender})
		}
	}
	return slices.DeleteFunc(d, func(f fault) bool { return skip[f.kind] })
}

// rig is what the faults act on.
type rig struct {
	pg     *testenv.Postgres
	pgURL  string // direct
	broker *brokerRig
	px     *proxies
	sup    *supervisor
	cons   *consumer
	wsBin  string
	// statusArgs run `walstream status` with walstream's connection
	// settings.
	statusArgs []string
	logf       func(format string, args ...any)
	// outboxDDL is the file that creates the outbox table.
	outboxDDL string
}

// faults injects faults and counts them.
type faults struct {
	rig     *rig
	rng     *mrand.Rand
	long    bool
	cluster bool
	skip    map[string]bool

	mu  sync.Mutex
	now string // the fault being injected, for the watchdog
	rep faultReport
	// gap are the event ids committed to a recreated outbox table before it
	// was in the publication: Postgres never sends them, and walstream must
	// stop naming the gap rather than go on silently.
	gap map[string]bool
	// partitions counts the partitions attached so far, which names them.
	partitions int
	// reemits are the re-emit requests made, which the checker judges.
	reemits reemits
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
	Errors  []string           `json:"errors,omitempty"`
	Notes   []string           `json:"notes,omitempty"`
}

func newFaults(r *rig, seed uint64, long, cluster bool, skip map[string]bool) *faults {
	return &faults{rig: r, rng: mrand.New(mrand.NewPCG(seed, 0xfa17)), long: long, cluster: cluster, skip: skip, gap: make(map[string]bool), rep: faultReport{
		Counts: make(map[string]int), CrashesArmed: make(map[string]int), ZombieOutcomes: make(map[string]int),
		PauseOutcomes: make(map[string]int), Targets: make(map[string][]int32)}}
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
	r.Errors, r.Notes, r.GapStops = slices.Clone(r.Errors), slices.Clone(r.Notes), slices.Clone(r.GapStops)
	return r
}

// gapIDs returns the event ids lost in recreation gaps so far.
func (f *faults) gapIDs() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.gap)
}

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
		d := deck(f.long, f.cluster, f.skip)
		f.rng.Shuffle(len(d), func(i, j int) { d[i], d[j] = d[j], d[i] })
		for _, ft := range d {
			if ctx.Err() != nil || (round > 0 && time.Now().After(until)) {
				return
			}
			start := time.Now()
			f.mu.Lock()
			f.now = fmt.Sprintf("%s since %s", ft.kind, start.Format(time.TimeOnly))
			f.mu.Unlock()
			detail := f.inject(ctx, ft)
			f.mu.Lock()
			f.rep.Counts[ft.kind]++
			f.now = ""
			f.mu.Unlock()
			f.rig.logf("fault %-28s %-40s took %s", ft.kind, detail, time.Since(start).Round(10*time.Millisecond))
			sleep(ctx, 300*time.Millisecond+time.Duration(f.rng.Int64N(int64(1200*time.Millisecond))))
		}
	}
}

func (f *faults) inject(ctx context.Context, ft fault) string {
	r := f.rig
	switch ft.kind {
	case faultKill:
		return f.kill(ctx, ft.crashAt)
	case faultTerm:
		p := f.current()
		if p == nil {
			return "no walstream running"
		}
		stopProc(p, syscall.SIGTERM, 30*time.Second)
		if p.Err() != nil {
			f.failf("walstream #%d did not exit 0 within 30s of SIGTERM: %s\n%s", p.id, p.ExitDesc(), p.LastLines(10))
		}
		f.restart("")
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
		n, err := f.exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walstream' AND active")
		if err != nil {
			f.failf("terminating the walsender: %v", err)
		}
		return fmt.Sprintf("%d terminated", n)
	case faultZombie:
		return f.zombie(ctx)
	case faultRecreate:
		return f.recreate(ctx)
	case faultPartitions:
		return f.partition(ctx)
	case faultPause:
		return f.pause(ctx)
	case faultReemit:
		return f.reemit(ctx)
	case faultCoordinatorKill, faultOutboxLeaderKill, faultCheckpointLeadKill, faultControllerKill:
		return f.killNode(ctx, ft.kind)
	case faultTwoBrokersDown:
		return f.twoDown(ctx)
	case faultBrokerCutOff:
		return f.cutOff(ctx)
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

// exec runs SQL on a fresh direct connection and returns the rows affected.
func (f *faults) exec(ctx context.Context, sql string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.rig.pgURL)
	if err != nil {
		return 0, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(ctx, sql)
	return tag.RowsAffected(), err
}

// waitSlot waits up to d for the slot to be active (held by a walsender)
// or not.
func (f *faults) waitSlot(ctx context.Context, active bool, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		if got, err := f.slotActive(ctx); err == nil && got == active {
			return true
		}
	}
	return false
}

func (f *faults) slotActive(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.rig.pgURL)
	if err != nil {
		return false, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.Background())
	var active bool
	err = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'walstream'").Scan(&active)
	return active, err
}

// current returns the running walstream, starting one if there is none.
func (f *faults) current() *wsProc {
	if p := f.rig.sup.current(); p != nil {
		return p
	}
	return f.restart("")
}

func (f *faults) restart(crashAt string) *wsProc {
	p, err := f.rig.sup.start(crashAt)
	if err != nil {
		f.failf("starting walstream: %v", err)
	}
	return p
}

// kill SIGKILLs walstream and starts it again, armed with a crash point
// when point is set; an armed process is given 20 s to reach it.
func (f *faults) kill(ctx context.Context, point string) string {
	p := f.current()
	if p == nil {
		return "no walstream running"
	}
	stopProc(p, syscall.SIGKILL, 10*time.Second)
	if point == "" {
		f.restart("")
		return fmt.Sprintf("#%d", p.id)
	}
	n := 1 + f.rng.IntN(20)
	switch point {
	case "mid-transaction", "mid-stream":
		n = 1 + f.rng.IntN(2000)
	case "mid-chunk":
		// A request of an aggregate type, a third of the table, which the
		// restarted walstream meets and crashes within one of its first
		// chunks.
		n = 1 + f.rng.IntN(3)
		if _, err := f.request(ctx, typePredicate(aggregateTypes[f.rng.IntN(len(aggregateTypes))])); err != nil {
			f.note("a re-emit request before the mid-chunk crash: %v", err)
		}
	}
	crashAt := fmt.Sprintf("%s:%d", point, n)
	f.mu.Lock()
	f.rep.CrashesArmed[point]++
	f.mu.Unlock()
	np := f.restart(crashAt)
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
		f.restart("")
		return fmt.Sprintf("#%d, then #%d did not reach %s in 20s", p.id, np.id, crashAt)
	}
	return fmt.Sprintf("#%d, then #%d crashed at %s", p.id, np.id, crashAt)
}

// zombie stops the streaming walstream A with SIGSTOP until its walsender
// times out, starts B, which takes the slot and fences A's transactional
// id, and then resumes A. A must not publish again: it either exits
// non-zero saying it was fenced or waits as a standby for the slot (and is
// killed after a while).
func (f *faults) zombie(ctx context.Context) string {
	a := f.current()
	if a == nil || !a.streaming(60*time.Second) || !f.waitSlot(ctx, true, 60*time.Second) {
		f.failf("zombie: walstream not streaming within 60s")
		return "no streaming walstream"
	}
	f.rig.sup.detach(a)
	a.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	if !f.waitSlot(ctx, false, 60*time.Second) {
		f.failf("zombie: slot still active 60s after SIGSTOP of #%d", a.id)
	}
	released := time.Since(stopped)
	streamsBefore := len(reStreaming.FindAllString(a.Log(), -1))
	b := f.restart("")
	if b == nil || !b.streaming(60*time.Second) {
		f.failf("zombie: second walstream not streaming within 60s")
	}
	a.Signal(syscall.SIGCONT)
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
	if b != nil && b.Exited() {
		f.failf("zombie: the new walstream #%d exited (%s) after #%d resumed:\n%s", b.id, b.ExitDesc(), a.id, b.LastLines(5))
	}
	// Postgres lets one walsender stream a slot, so a zombie streaming
	// again means its replacement lost the slot meanwhile (another fault):
	// a takeover in turn, not two publishers; the checker judges the data.
	if n := len(reStreaming.FindAllString(a.Log(), -1)); n > streamsBefore {
		outcome = "took-slot-again"
	}
	if outcome == "exit-0" || outcome == "other-exit" || outcome == "running" {
		f.failf("zombie: walstream #%d: %s (%s):\n%s", a.id, outcome, a.ExitDesc(), a.LastLines(15))
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
func (f *faults) recreate(ctx context.Context) string {
	p := f.current()
	if p == nil {
		return "no walstream running"
	}
	f.rig.sup.detach(p)
	conn, err := pgx.Connect(ctx, f.rig.pgURL)
	if err != nil {
		f.failf("connecting to recreate the outbox: %v", err)
		f.restart("")
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
		f.failf("recreating the outbox table: %v", err)
	}
	f.mu.Lock()
	for _, id := range gap {
		f.gap[id] = true
	}
	f.rep.GapRows += len(gap)
	f.mu.Unlock()

	// Rows keep coming into the new table, so the stream shows it at once;
	// the slot monitor would find it too.
	stop := "still running"
	select {
	case <-p.Done():
		stop = strings.TrimSpace(p.LastLines(1))
		if !gapStop.MatchString(stop) {
			f.failf("walstream #%d stopped without naming the recreated table (OID %d, now %d): %s", p.id, oldOID, newOID, p.LastLines(10))
		}
	case <-time.After(60 * time.Second):
		stopProc(p, syscall.SIGKILL, 10*time.Second)
		f.failf("walstream #%d went on streaming for 60s after the outbox table was recreated (OID %d, now %d) with %d rows lost", p.id, oldOID, newOID, len(gap))
	case <-ctx.Done():
	}
	f.mu.Lock()
	f.rep.GapStops = append(f.rep.GapStops, stop)
	f.mu.Unlock()
	f.rig.sup.setArg("--accept-recreated-table", fmt.Sprintf("public.outbox=%d", newOID))
	f.restart("")
	return fmt.Sprintf("OID %d, now %d, %d rows in the gap; #%d stopped", oldOID, newOID, len(gap), p.id)
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
func (f *faults) partition(ctx context.Context) string {
	f.partitions++
	name := fmt.Sprintf("outbox_part_%d", f.partitions)
	conn, err := pgx.Connect(ctx, f.rig.pgURL)
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
