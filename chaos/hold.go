package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A hold is a transaction left open on the checkpoint partition, which
// every stream shares: it holds back the partition's last stable offset,
// so read_committed readers see no later checkpoint of any stream until it
// ends. walstream reads past it (kafka/decided.go), so the streams it
// does not belong to must go on as if nothing were open: no session ends,
// every stream keeps confirming what its load writes, a session started
// meanwhile resumes from its own last commit, and /readyz names the
// holder. Two faults hold the partition: a stream paused mid-commit past
// its transaction timeout (pause), and another producer's transaction
// (foreign).

// checkEvery is how often, during a hold, every watched stream must have
// confirmed what was written by the previous check.
const checkEvery = 10 * time.Second

// reSessionEnd is a session's end with the peer and the error that ended
// it.
var reSessionEnd = regexp.MustCompile(`msg="session ended, restarting from the checkpoint".* peer=(\w+) err="([^"]*)`)

// confirmWait is how long a check waits for a stream to confirm it: the
// machine is shared, and a stream may lag its load by seconds.
const confirmWait = 15 * time.Second

// hold is one hold, as the report has it.
type hold struct {
	Kind string `json:"kind"`
	// Holders are the transactional ids that held the partition, in
	// turn: a paused process's, then a foreign producer's. A process of
	// several streams stops at whichever stream's commit comes first, so
	// its entry is each of their ids, separated by |: any of them names it.
	Holders []string `json:"holders"`
	// Held says the partition's last stable offset was held back when
	// the watch began; Seconds is how long it stayed so from then.
	Held    bool    `json:"held"`
	Seconds float64 `json:"seconds"`
	// Watched are the streams that must go on, NotSettled those of them
	// that were still recovering from an earlier fault when it began,
	// whose session restarts are reported but not failed on.
	Watched    []string `json:"streams_watched"`
	NotSettled []string `json:"streams_not_settled,omitempty"`
	// SessionRestarts are the watched streams' session restarts during
	// the hold, by stream.
	SessionRestarts map[string]int `json:"session_restarts"`
	// Checks counts the times every watched stream was found to have
	// confirmed what was written checkEvery before; SlowestConfirm is
	// the longest a check waited for it.
	Checks         int     `json:"confirm_checks"`
	SlowestConfirm float64 `json:"slowest_confirm_seconds"`
	// Readyz is what /readyz of a watched stream said when it first named
	// each holder, and Named how many seconds into the hold it did.
	Readyz map[string]string  `json:"readyz,omitempty"`
	Named  map[string]float64 `json:"readyz_named_after_seconds,omitempty"`
	// Logged are the holders the process asked for /readyz logged (by
	// the id it logged).
	Logged []string `json:"logged,omitempty"`
	// Samples and Skipped are the sampler's ticks during the hold;
	// JudgedAfter the samples of each watched stream whose judgement
	// waited for the hold to end.
	Samples     int            `json:"samples"`
	Skipped     int            `json:"samples_skipped"`
	JudgedAfter map[string]int `json:"samples_judged_after_it"`
	// Paused is what the stream paused mid-commit did; Restarted what a
	// stream killed after a commit while the partition was held did
	// (foreign).
	Paused    string `json:"paused,omitempty"`
	Restarted string `json:"restarted_while_held,omitempty"`
}

// summary says it in a few words for the fault's line.
func (h *hold) summary() string {
	restarts, judged := 0, 0
	for _, n := range h.SessionRestarts {
		restarts += n
	}
	for _, n := range h.JudgedAfter {
		judged += n
	}
	var named []string
	for _, id := range h.Holders {
		if s, ok := h.Named[id]; ok {
			named = append(named, fmt.Sprintf("%s after %.1fs", id, s))
		} else {
			named = append(named, "not "+id)
		}
	}
	return fmt.Sprintf("held %.1fs (at the start: %v); %d other streams: %d session restarts, %d confirm checks (slowest %.1fs), readyz named %s, %d samples judged after it",
		h.Seconds, h.Held, len(h.Watched), restarts, h.Checks, h.SlowestConfirm, strings.Join(named, ", "), judged)
}

// holdWatch watches the streams a hold must not disturb.
type holdWatch struct {
	f       *faults
	rec     hold
	streams []*stream
	settled map[*stream]bool
	began   time.Time
	// heldAt is the offset of the hold's last transaction on the
	// checkpoint partition: it is over once the last stable offset is
	// past it.
	heldAt  int64
	ends    map[*stream]int
	late    map[*stream]int
	ticks   [2]int // the sampler's samples and skipped ticks at the start
	lastWAL pglogrepl.LSN
	lastAt  time.Time
	// asked is the stream whose /readyz must name the holders.
	asked *stream
}

// others are the streams not carried by st's process.
func (f *faults) others(st *stream) []*stream {
	return slices.DeleteFunc(slices.Clone(f.rig.streams), func(o *stream) bool { return o.sup == st.sup })
}

// positions reads every slot's confirmed_flush_lsn, by slot, and the
// server's WAL end.
func (f *faults) positions(ctx context.Context) (map[string]pglogrepl.LSN, pglogrepl.LSN, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.rig.pgURL)
	if err != nil {
		return nil, 0, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT slot_name, coalesce(confirmed_flush_lsn, '0/0')::text, pg_current_wal_lsn()::text FROM pg_replication_slots")
	if err != nil {
		return nil, 0, fmt.Errorf("reading the slots: %w", err)
	}
	confirmed := make(map[string]pglogrepl.LSN)
	var end pglogrepl.LSN
	for rows.Next() {
		var slot, c, e string
		if err := rows.Scan(&slot, &c, &e); err != nil {
			return nil, 0, fmt.Errorf("reading the slots: %w", err)
		}
		confirmed[slot], _ = pglogrepl.ParseLSN(c)
		end, _ = pglogrepl.ParseLSN(e)
	}
	return confirmed, end, rows.Err()
}

// walEnd reads the server's WAL end.
func (f *faults) walEnd(ctx context.Context) (pglogrepl.LSN, error) {
	_, end, err := f.positions(ctx)
	return end, err
}

// waitConfirmed waits up to d for every stream of ss to have its slot
// confirmed at lsn or past it, and returns those that were not, and how
// long it waited.
func (f *faults) waitConfirmed(ctx context.Context, ss []*stream, lsn pglogrepl.LSN, d time.Duration) ([]*stream, time.Duration) {
	start := time.Now()
	for {
		confirmed, _, err := f.positions(ctx)
		var behind []*stream
		for _, st := range ss {
			if err != nil || confirmed[st.slot] < lsn {
				behind = append(behind, st)
			}
		}
		if len(behind) == 0 || time.Since(start) > d || ctx.Err() != nil {
			return behind, time.Since(start)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// settle waits up to a minute for each stream of ss to stream and to
// confirm what was written when it began: a stream still recovering from
// an earlier fault may end a session for that fault's sake. It returns
// the streams that settled.
func (f *faults) settle(ctx context.Context, ss []*stream) map[*stream]bool {
	settled := make(map[*stream]bool)
	end, err := f.walEnd(ctx)
	if err != nil {
		f.note("settling before a hold: %v", err)
		return settled
	}
	deadline := time.Now().Add(time.Minute)
	for _, st := range ss {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if p := st.proc(); p != nil && p.streaming(time.Until(deadline)) {
				break
			}
			sleep(ctx, 200*time.Millisecond)
		}
	}
	behind, _ := f.waitConfirmed(ctx, ss, end, time.Until(deadline))
	for _, st := range ss {
		settled[st] = !slices.Contains(behind, st)
	}
	if len(behind) > 0 {
		f.note("before a hold, %s had not confirmed %s within a minute", names(behind), end)
	}
	return settled
}

func names(ss []*stream) string {
	var n []string
	for _, st := range ss {
		n = append(n, st.name)
	}
	return strings.Join(n, ", ")
}

// watch starts watching ss through a hold of kind by holders, which ends
// once the checkpoint partition's last stable offset is past heldAt (-1:
// past where it is now).
func (f *faults) watch(ctx context.Context, kind string, holders []string, heldAt int64, ss []*stream, settled map[*stream]bool) *holdWatch {
	h := &holdWatch{f: f, streams: ss, settled: settled, began: time.Now(), heldAt: heldAt,
		ends: make(map[*stream]int), late: make(map[*stream]int),
		rec: hold{Kind: kind, Holders: holders, SessionRestarts: make(map[string]int), JudgedAfter: make(map[string]int),
			Readyz: make(map[string]string), Named: make(map[string]float64)}}
	lso, _, err1 := f.rig.cons.stableOffsets(ctx)
	hwm, _, err2 := f.rig.cons.endOffsets(ctx)
	if err := errors.Join(err1, err2); err != nil {
		f.note("reading the offsets of %s at the start of a hold: %v", checkpointTopic, err)
	} else {
		if h.heldAt < 0 {
			h.heldAt = lso[cpPart]
		}
		h.rec.Held = lso[cpPart] <= h.heldAt && lso[cpPart] < hwm[cpPart]
	}
	for _, st := range ss {
		h.rec.Watched = append(h.rec.Watched, st.name)
		if !settled[st] {
			h.rec.NotSettled = append(h.rec.NotSettled, st.name)
		}
		h.ends[st] = len(st.lines(reSessionEnds))
		h.late[st] = f.rig.smp.judgedLate(st)
	}
	if len(ss) > 0 {
		h.asked = ss[f.rng.IntN(len(ss))]
	}
	f.rig.smp.mu.Lock()
	h.ticks = [2]int{f.rig.smp.Samples, f.rig.smp.Skipped}
	f.rig.smp.mu.Unlock()
	h.lastWAL, _ = f.walEnd(ctx)
	h.lastAt = time.Now()
	return h
}

// through watches until until: every checkEvery, each watched stream must
// have confirmed the WAL end of the check before; until /readyz of one of
// them has named every holder, it is asked every second.
func (h *holdWatch) through(ctx context.Context, until time.Time) {
	for time.Now().Before(until) && ctx.Err() == nil {
		if h.asked != nil && len(h.rec.Named) < len(h.rec.Holders) {
			if p := h.asked.proc(); p != nil {
				if code, body := getReadyz(p, h.asked); code == http.StatusOK {
					for _, holder := range h.rec.Holders {
						if _, ok := h.rec.Named[holder]; ok {
							continue
						}
						for _, id := range strings.Split(holder, "|") {
							if strings.Contains(body, " transactional id "+id+" ") {
								h.rec.Readyz[holder], h.rec.Named[holder] = clip(body, 400), time.Since(h.began).Seconds()
							}
						}
					}
				}
			}
		}
		if time.Since(h.lastAt) >= checkEvery && time.Until(until) > time.Second {
			h.check(ctx)
		}
		sleep(ctx, min(time.Second, time.Until(until)))
	}
}

// check requires every watched stream to confirm the WAL end of the last
// check, and takes the WAL end for the next.
func (h *holdWatch) check(ctx context.Context) {
	end, err := h.f.walEnd(ctx)
	behind, waited := h.f.waitConfirmed(ctx, h.streams, h.lastWAL, confirmWait)
	if len(behind) > 0 {
		h.f.failf("%s held by %s for %s: %s confirmed nothing past %s (the WAL end %s earlier) within %s more",
			checkpointTopic, strings.Join(h.rec.Holders, ", then "), time.Since(h.began).Round(100*time.Millisecond), names(behind), h.lastWAL,
			time.Since(h.lastAt).Round(100*time.Millisecond), confirmWait)
	}
	h.rec.Checks++
	h.rec.SlowestConfirm = max(h.rec.SlowestConfirm, waited.Seconds())
	if err == nil {
		h.lastWAL, h.lastAt = end, time.Now()
	}
}

// end waits up to d for the hold to end, checks that the watched streams
// confirmed what was written meanwhile, that none ended a session, that
// /readyz named the holders, and that the sampler judged the samples it
// deferred, and records the hold.
func (h *holdWatch) end(ctx context.Context, d time.Duration) {
	f := h.f
	holders := strings.Join(h.rec.Holders, ", then ")
	if h.rec.Held {
		for deadline := time.Now().Add(d); ; sleep(ctx, 100*time.Millisecond) {
			if lso, _, err := f.rig.cons.stableOffsets(ctx); err == nil && lso[cpPart] > h.heldAt {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				f.failf("%s still held at offset %d %s after the watch of %s began", checkpointTopic, h.heldAt, time.Since(h.began).Round(time.Second), holders)
				break
			}
		}
	} else {
		f.note("%s was not held by %s when the watch began", checkpointTopic, holders)
	}
	h.rec.Seconds = time.Since(h.began).Seconds()
	h.check(ctx)
	f.rig.smp.mu.Lock()
	h.rec.Samples, h.rec.Skipped = f.rig.smp.Samples-h.ticks[0], f.rig.smp.Skipped-h.ticks[1]
	f.rig.smp.mu.Unlock()
	for _, st := range h.streams {
		ended := st.lines(reSessionEnds)
		var lines []string
		for _, m := range ended[min(h.ends[st], len(ended)):] {
			lines = append(lines, m[0])
		}
		h.rec.SessionRestarts[st.name] = len(lines)
		if len(lines) > 0 && h.settled[st] {
			f.failf("%s ended %d sessions while %s held %s, with no other fault:\n  %s", st.name, len(lines), holders, checkpointTopic, strings.Join(lines, "\n  "))
		}
		// Every sample taken during the hold after the stream confirmed
		// anything waits for it to end; the sampler judges them once
		// its consumer reads past it.
		for deadline := time.Now().Add(10 * time.Second); ; sleep(ctx, 200*time.Millisecond) {
			h.rec.JudgedAfter[st.name] = f.rig.smp.judgedLate(st) - h.late[st]
			if !h.rec.Held || h.rec.JudgedAfter[st.name] > 0 || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
		if h.rec.Held && h.rec.JudgedAfter[st.name] == 0 {
			f.failf("the sampler judged no sample of %s after %s held %s for %.1fs: the check of its confirmed position against its checkpoints was not deferred through the hold",
				st.name, holders, checkpointTopic, h.rec.Seconds)
		}
	}
	if h.asked != nil && h.rec.Held {
		for _, id := range h.rec.Holders {
			if _, ok := h.rec.Named[id]; !ok {
				f.failf("/readyz of %s never named %s, which held %s (for %.1fs, with %s)", h.asked.name, id, checkpointTopic, h.rec.Seconds, holders)
			}
		}
		logged := func(holder string) bool {
			return slices.ContainsFunc(strings.Split(holder, "|"), func(id string) bool { return slices.Contains(h.rec.Logged, id) })
		}
		for _, m := range h.asked.processLines(reHoldLogged) {
			if !slices.Contains(h.rec.Logged, m[1]) {
				h.rec.Logged = append(h.rec.Logged, m[1])
			}
		}
		for holder := range h.rec.Named {
			if !logged(holder) {
				f.failf("/readyz of %s named %s holding %s, but its log never did", h.asked.name, holder, checkpointTopic)
			}
		}
	}
	f.mu.Lock()
	f.rep.Holds = append(f.rep.Holds, h.rec)
	f.mu.Unlock()
}

// stopPoint is what walstream says as it stops itself at before-commit.
const stopPoint = "stop point before-commit reached"

// pausing is a stream's walstream stopped with a Kafka transaction open.
type pausing struct {
	st     *stream
	before *wsProc // the process killed to start the paused one
	p      *wsProc
	n      int           // the commit it stopped before
	hold   time.Duration // how long it stays stopped
}

// pauseStart SIGKILLs st's walstream and starts it again armed to stop
// itself (SIGSTOP) just before its n-th Kafka commit, every record of the
// transaction written, the checkpoint record too: a process paused with a
// transaction open, which holds back the last stable offset of the
// checkpoint partition every stream shares. nil when it did not stop.
func (f *faults) pauseStart(ctx context.Context, st *stream) *pausing {
	before := f.current(st)
	if before == nil {
		return nil
	}
	stopProc(before, syscall.SIGKILL, 10*time.Second)
	n := 1 + f.rng.IntN(max(2, 10/len(f.rig.streams)))
	p := f.restart(st.sup, fmt.Sprintf("before-commit:%d:stop", n))
	if p == nil {
		return nil
	}
	if err := p.WaitLog(ctx, stopPoint, 30*time.Second); err != nil {
		f.note("walstream #%d of %s did not reach its stop point before commit %d within 30s", p.id, st.name, n)
		return nil
	}
	// Past the transaction timeout, so that Kafka's coordinator aborts
	// the transaction and bumps the producer epoch.
	hold := txnTimeout + abortCleanup + 2*time.Second + time.Duration(f.rng.Int64N(int64(2*time.Second)))
	return &pausing{st: st, before: before, p: p, n: n, hold: hold}
}

// holder is the transactional id holding the partition: of the paused
// process's stream, or, of several, of one of them.
func (ps *pausing) holder() string {
	var ids []string
	for _, st := range ps.st.sup.streams {
		ids = append(ids, st.txnID)
	}
	return strings.Join(ids, "|")
}

// end waits until the pause has lasted its hold and resumes the process
// (SIGCONT). It must go on by itself: end its session, replay from the
// checkpoint, and never take the abort for another producer. Which error
// ends the session first depends on which peer it hears from first: the
// walsender has given up on it too (wal_sender_timeout).
//
// Each stream of a process counts its own commits to the stop point: a
// process of several stops again at another stream's n-th commit, and is
// resumed at once, for as long as it runs.
func (ps *pausing) end(ctx context.Context, f *faults, stopped time.Time) string {
	sleep(ctx, time.Until(stopped.Add(ps.hold)))
	np, st := ps.p, ps.st
	sessions := len(reStreaming.FindAllString(np.Log(), -1))
	np.Signal(syscall.SIGCONT)
	if len(st.sup.streams) > 1 {
		go func() {
			for resumed := 1; !np.Exited(); time.Sleep(200 * time.Millisecond) {
				if n := strings.Count(np.Log(), stopPoint); n > resumed {
					np.Signal(syscall.SIGCONT)
					resumed = n
				}
			}
		}()
	}
	outcome := "still not streaming after 60s"
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
		if np.Exited() {
			outcome = "exited"
			break
		}
		if len(reStreaming.FindAllString(np.Log(), -1)) > sessions {
			outcome = "other"
			if m := reSessionEnd.FindStringSubmatch(np.Log()); m != nil {
				switch {
				case strings.Contains(m[2], "aborted the open transaction"):
					outcome = "kafka-aborted-it"
				case m[1] == "postgres":
					outcome = "postgres-first"
				}
			}
			break
		}
	}
	log := np.Log()
	switch {
	case outcome == "exited" || outcome == "still not streaming after 60s":
		f.failf("walstream #%d of %s paused %s past its transaction timeout: %s (%s):\n%s", np.id, st.name, ps.hold.Round(100*time.Millisecond), outcome, np.ExitDesc(), np.LastLines(15))
	case strings.Contains(log, "another producer") || strings.Contains(log, "took over"):
		f.failf("walstream #%d of %s took the transaction Kafka aborted on timeout for another producer:\n%s", np.id, st.name, np.LastLines(15))
	}
	f.mu.Lock()
	f.rep.PauseOutcomes[outcome]++
	f.mu.Unlock()
	return fmt.Sprintf("%s #%d, then #%d stopped before commit %d for %s: %s", st.sup, ps.before.id, np.id, ps.n, ps.hold.Round(100*time.Millisecond), outcome)
}

// pause stops st's walstream mid-commit past its transaction timeout
// (pauseStart) and resumes it. Meanwhile its open transaction holds back
// the checkpoint partition: the other streams must go on as if nothing
// were open (watch), and /readyz of one of them name the paused stream's
// transactional id.
func (f *faults) pause(ctx context.Context, st *stream) string {
	others := f.others(st)
	settled := f.settle(ctx, others)
	ps := f.pauseStart(ctx, st)
	if ps == nil {
		return "did not stop mid-commit"
	}
	stopped := time.Now()
	h := f.watch(ctx, faultPause, []string{ps.holder()}, -1, others, settled)
	h.through(ctx, stopped.Add(ps.hold))
	h.rec.Paused = ps.end(ctx, f, stopped)
	h.end(ctx, time.Minute)
	return h.rec.Paused + "; " + h.rec.summary()
}

// foreign opens a transaction on the checkpoint topic as another producer
// (its own transactional id, not walstream), writes a record under a key
// no stream uses, and leaves the transaction open until its coordinator
// aborts it at its timeout: 30 s in the short variant, 30 to 90 s in the
// long one. Meanwhile every stream must go on (watch), and one stream,
// killed right after a Kafka commit, must resume from that commit, which
// only walstream's reading past the last stable offset finds: the
// checkpoint a read_committed reader sees is older, and resuming from it
// would publish the committed transaction again.
//
// With a third stream to watch, another stream is first paused
// mid-commit past its transaction timeout (pauseStart): the partition is
// held by its transaction, then, once Kafka aborted that, by the foreign
// one, and /readyz must name both in turn. The short variant plays its
// pause this way only, which saves the half minute of a pause of its own.
func (f *faults) foreign(ctx context.Context) string {
	f.foreigns++
	id := fmt.Sprintf("chaos-foreign-%d", f.foreigns)
	timeout := 30 * time.Second
	if f.long {
		timeout += time.Duration(f.rng.Int64N(int64(60 * time.Second)))
	}
	victim := f.pick()
	point := fmt.Sprintf("after-commit:%d", 1+f.rng.IntN(3))
	f.mu.Lock()
	f.rep.ByStream[victim.name][faultForeign]++
	f.rep.CrashesArmed["after-commit"]++
	f.mu.Unlock()
	watched := f.others(victim)
	var ps *pausing
	if pausable := f.pausable(victim); pausable != nil {
		watched = slices.DeleteFunc(watched, func(o *stream) bool { return o.sup == pausable.sup })
		settled := f.settle(ctx, f.rig.streams)
		if ps = f.pauseStart(ctx, pausable); ps == nil {
			return "did not stop mid-commit"
		}
		f.mu.Lock()
		f.rep.Counts[faultPause]++
		f.rep.ByStream[pausable.name][faultPause]++
		f.mu.Unlock()
		return f.hold(ctx, id, timeout, victim, point, ps, watched, settled)
	}
	return f.hold(ctx, id, timeout, victim, point, nil, watched, f.settle(ctx, f.rig.streams))
}

// pausable picks the stream foreign pauses besides victim: one of another
// process, which leaves a stream of a third process to watch; nil when
// there is none, or pauses are left out.
func (f *faults) pausable(victim *stream) *stream {
	if f.skip[faultPause] {
		return nil
	}
	others := f.others(victim)
	f.rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	for _, o := range others {
		if slices.ContainsFunc(others, func(w *stream) bool { return w.sup != o.sup }) {
			return o
		}
	}
	return nil
}

// hold is foreign's hold: the foreign transaction opened (after the
// pause ps, when there is one) and watched until Kafka aborts it.
func (f *faults) hold(ctx context.Context, id string, timeout time.Duration, victim *stream, point string, ps *pausing, watched []*stream, settled map[*stream]bool) string {
	stopped := time.Now()
	br := f.rig.broker
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(br.direct, ",")...), kgo.Dialer(br.dialer()),
		kgo.TransactionalID(id), kgo.TransactionTimeout(timeout))
	if err != nil {
		f.failf("creating the foreign producer %s: %v", id, err)
		return "no producer"
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rec *kgo.Record
	err = cl.BeginTransaction()
	if err == nil {
		rec = &kgo.Record{Topic: checkpointTopic, Key: []byte("chaos-foreign"), Value: []byte(`{"not":"a checkpoint"}`)}
		err = cl.ProduceSync(pctx, rec).FirstErr()
	}
	if err != nil {
		f.note("the foreign producer %s could not open its transaction: %v", id, err)
		if ps != nil {
			ps.end(ctx, f, stopped)
		}
		return "no transaction"
	}
	began := time.Now()
	holders := []string{id}
	if ps != nil {
		holders = []string{ps.holder(), id}
	}
	h := f.watch(ctx, faultForeign, holders, rec.Offset, watched, settled)
	restarted, paused := make(chan string, 1), make(chan string, 1)
	go func() { restarted <- f.restartHeld(ctx, victim, point, rec.Offset) }()
	go func() {
		if ps != nil {
			paused <- ps.end(ctx, f, stopped)
		}
		close(paused)
	}()
	// The coordinator aborts the transaction at its timeout, within
	// abortCleanup.
	h.through(ctx, began.Add(timeout-time.Second))
	h.rec.Restarted, h.rec.Paused = <-restarted, <-paused
	h.end(ctx, time.Minute)
	detail := fmt.Sprintf("%s for %s (offset %d); %s", id, timeout, rec.Offset, h.rec.Restarted)
	if ps != nil {
		detail += "; paused before it: " + h.rec.Paused
	}
	return detail + "; " + h.rec.summary()
}

// restartHeld kills st's walstream, starts it armed to die right after
// its n-th Kafka commit (point), and requires the clean process its
// supervisor then starts to stream while the checkpoint partition is still
// held at heldAt, and to confirm what was written before it started.
func (f *faults) restartHeld(ctx context.Context, st *stream, point string, heldAt int64) string {
	p := f.current(st)
	if p == nil {
		return st.name + ": no walstream running"
	}
	stopProc(p, syscall.SIGKILL, 10*time.Second)
	np := f.restart(st.sup, point)
	if np == nil {
		return st.name + ": restart failed"
	}
	select {
	case <-np.Done():
	case <-time.After(30 * time.Second):
		stopProc(np, syscall.SIGKILL, 10*time.Second)
		f.restart(st.sup, "")
		f.note("walstream #%d of %s did not reach %s within 30s while %s was held", np.id, st.name, point, checkpointTopic)
		return fmt.Sprintf("%s: #%d did not reach %s", st.name, np.id, point)
	case <-ctx.Done():
		return ""
	}
	if !np.KilledBy(syscall.SIGKILL) || !strings.Contains(np.Log(), "crash point") {
		f.failf("walstream #%d of %s, armed with %s while %s was held, exited otherwise (%s):\n%s", np.id, st.name, point, checkpointTopic, np.ExitDesc(), np.LastLines(15))
	}
	crashed := time.Now()
	var clean *wsProc
	for deadline := time.Now().Add(10 * time.Second); clean == nil && time.Now().Before(deadline); sleep(ctx, 100*time.Millisecond) {
		if c := st.sup.current(); c != nil && c != np {
			clean = c
		}
	}
	if clean == nil || !clean.streaming(60*time.Second) {
		f.failf("after #%d of %s died at %s, no walstream of it streamed within 60s while %s was held", np.id, st.name, point, checkpointTopic)
		return fmt.Sprintf("%s: #%d crashed at %s, none streaming after", st.name, np.id, point)
	}
	streamed := time.Since(crashed)
	held := "no longer held"
	if lso, _, err := f.rig.cons.stableOffsets(ctx); err == nil && lso[cpPart] <= heldAt {
		held = "still held"
	}
	end, err := f.walEnd(ctx)
	if err != nil {
		return fmt.Sprintf("%s: #%d crashed at %s, #%d streaming %s later (%s)", st.name, np.id, point, clean.id, streamed.Round(100*time.Millisecond), held)
	}
	behind, waited := f.waitConfirmed(ctx, []*stream{st}, end, 30*time.Second)
	if len(behind) > 0 {
		f.failf("#%d of %s, started while %s was held, confirmed nothing past %s within 30s", clean.id, st.name, checkpointTopic, end)
	}
	return fmt.Sprintf("%s: #%d crashed at %s, #%d streaming %s later (%s), confirmed the WAL end in %s",
		st.name, np.id, point, clean.id, streamed.Round(100*time.Millisecond), held, waited.Round(100*time.Millisecond))
}

// heldBy counts the holds that held the partition, by what held it: a
// paused stream (faultPause, alone or before a foreign transaction) or a
// foreign transaction.
func heldBy(hs []hold) map[string]int {
	n := make(map[string]int)
	for _, h := range hs {
		if !h.Held {
			continue
		}
		n[h.Kind]++
		if h.Kind == faultForeign && h.Paused != "" {
			n[faultPause]++
		}
	}
	return n
}
