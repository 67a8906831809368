package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/walstream/walstream/publish"
)

// commitTimeout is walstream's --commit-timeout in the suite; it asks
// Kafka for a transaction timeout of twice that.
const commitTimeout = 10 * time.Second

const txnTimeout = 2 * commitTimeout

var reSessionEnd = regexp.MustCompile(`msg="session ended, restarting from the checkpoint".* peer=(\w+) err="([^"]*)`)

// pause SIGKILLs walstream and starts it again armed to stop itself
// (SIGSTOP) just before its n-th Kafka commit, every record of the
// transaction written: a process paused with a transaction open. It stays
// stopped past its transaction timeout, so that Kafka's coordinator aborts
// the transaction and bumps the producer epoch, and then goes on
// (SIGCONT). It must go on by itself: end its session, replay from the
// checkpoint, and never take the abort for another producer. Which error
// ends the session first depends on which peer it hears from first: the
// walsender has given up on it too (wal_sender_timeout).
func (f *faults) pause(ctx context.Context) string {
	p := f.current()
	if p == nil {
		return "no walstream running"
	}
	stopProc(p, syscall.SIGKILL, 10*time.Second)
	n := 1 + f.rng.IntN(10)
	np := f.restart(fmt.Sprintf("before-commit:%d:stop", n))
	if np == nil {
		return "restart failed"
	}
	if err := np.WaitLog(ctx, "stop point before-commit reached", 30*time.Second); err != nil {
		f.note("walstream #%d did not reach its stop point before commit %d within 30s", np.id, n)
		return fmt.Sprintf("#%d, then #%d did not reach commit %d", p.id, np.id, n)
	}
	hold := txnTimeout + abortCleanup + 2*time.Second + time.Duration(f.rng.Int64N(int64(2*time.Second)))
	sleep(ctx, hold)
	sessions := len(reStreaming.FindAllString(np.Log(), -1))
	np.Signal(syscall.SIGCONT)
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
		f.failf("walstream #%d paused %s past its transaction timeout: %s (%s):\n%s", np.id, hold.Round(100*time.Millisecond), outcome, np.ExitDesc(), np.LastLines(15))
	case strings.Contains(log, "another producer") || strings.Contains(log, "took over"):
		f.failf("walstream #%d took the transaction Kafka aborted on timeout for another producer:\n%s", np.id, np.LastLines(15))
	}
	f.mu.Lock()
	f.rep.PauseOutcomes[outcome]++
	f.mu.Unlock()
	return fmt.Sprintf("#%d, then #%d stopped before commit %d for %s: %s", p.id, np.id, n, hold.Round(100*time.Millisecond), outcome)
}

// killNode SIGKILLs the Kafka node the fault names: the transaction
// coordinator of walstream's transactional id, the leader of an outbox
// partition, the leader of the checkpoint topic, or the active controller.
// It starts the node again after a few seconds and waits for the cluster's
// health (every replica back in sync).
func (f *faults) killNode(ctx context.Context, kind string) string {
	br := f.rig.broker
	var id int32
	var what string
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; sleep(ctx, 500*time.Millisecond) {
		switch kind {
		case faultCoordinatorKill:
			id, err = br.coordinator(ctx)
			what = "transaction coordinator"
			if err == nil {
				what += f.coordinatorPartition(ctx, id)
			}
		case faultOutboxLeaderKill:
			topic, part := outboxTopics()[f.rng.IntN(len(aggregateTypes))], int32(f.rng.IntN(3))
			id, err = br.leader(ctx, topic, part)
			what = fmt.Sprintf("leader of %s-%d", topic, part)
		case faultCheckpointLeadKill:
			id, err = br.leader(ctx, checkpointTopic, 0)
			what = "leader of " + checkpointTopic + "-0"
		case faultControllerKill:
			id, err = br.activeController(ctx)
			what = "active controller"
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		f.failf("%s: %v", kind, err)
		return err.Error()
	}
	f.mu.Lock()
	f.rep.Targets[kind] = append(f.rep.Targets[kind], id)
	f.mu.Unlock()
	node := br.node(id)
	node.Stop(syscall.SIGKILL)
	sleep(ctx, 2*time.Second+time.Duration(f.rng.Int64N(int64(8*time.Second))))
	start := time.Now()
	if err := node.Start(); err != nil {
		f.failf("starting Kafka node %d again: %v", id, err)
	}
	back := time.Since(start)
	if why := br.waitHealthy(ctx, 2*time.Minute); why != "" {
		f.note("after %s of node %d, the cluster was not healthy within 2m: %s", kind, id, why)
	}
	return fmt.Sprintf("node %d (%s), started again in %s, healthy after %s", id, what, back.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// coordinatorPartition names the transaction state partition that holds
// walstream's transactions, and notes when its leader is not the
// coordinator Kafka named: both are how an operator finds it.
func (f *faults) coordinatorPartition(ctx context.Context, coordinator int32) string {
	br := f.rig.broker
	md, err := br.adm.Metadata(ctx, "__transaction_state")
	if err != nil {
		return ""
	}
	parts := md.Topics["__transaction_state"].Partitions
	n := publish.TransactionLogPartition(br.txnID, len(parts))
	if p, ok := parts[n]; ok && p.Leader != coordinator {
		f.note("FindCoordinator named node %d for %s, but __transaction_state-%d is led by node %d", coordinator, br.txnID, n, p.Leader)
	}
	return fmt.Sprintf(", leader of __transaction_state-%d", n)
}

// twoDown SIGKILLs two of the three brokers. The controller quorum,
// which has two more voters, fences them after broker.session.timeout.ms
// (9 s) and shrinks every ISR to the last broker, which then refuses
// walstream's writes (NOT_ENOUGH_REPLICAS: min.insync.replicas is 2).
// walstream must wait, commit nothing, and say why in /readyz and in
// `walstream status`; once the brokers are back it must go on.
func (f *faults) twoDown(ctx context.Context) string {
	br := f.rig.broker
	ids := br.brokerIDs()
	f.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	down := ids[:2]
	f.mu.Lock()
	f.rep.Targets[faultTwoBrokersDown] = append(f.rep.Targets[faultTwoBrokersDown], down...)
	f.mu.Unlock()
	for _, id := range down {
		br.node(id).Stop(syscall.SIGKILL)
	}
	killed := time.Now()
	// Whatever was in flight settles within the commit timeout; after
	// that nothing may commit until the brokers are back.
	sleep(ctx, commitTimeout+2*time.Second)
	before, _ := f.rig.cons.lastCheckpoint(1 << 62)
	var readyz, status string
	saidReadyz, saidStatus := false, false
	const why = "Kafka cannot take walstream's writes"
	for until := killed.Add(40*time.Second + time.Duration(f.rng.Int64N(int64(10*time.Second)))); time.Now().Before(until) && ctx.Err() == nil; sleep(ctx, time.Second) {
		if p := f.rig.sup.current(); p != nil && !saidReadyz {
			if code, body := getReadyz(p); code != 0 {
				readyz = fmt.Sprintf("%d %s", code, body)
				saidReadyz = code == http.StatusServiceUnavailable && strings.Contains(body, why)
			}
		}
		if !saidStatus && time.Since(killed) > 25*time.Second {
			status = f.status(ctx)
			saidStatus = strings.Contains(status, why)
		}
	}
	after, _ := f.rig.cons.lastCheckpoint(1 << 62)
	if after.Less(before) || before.Less(after) {
		f.failf("a checkpoint committed while two of three brokers were down: %s, then %s", before, after)
	}
	if !saidReadyz {
		f.failf("with two of three brokers down, /readyz never said %q; it last said: %s", why, readyz)
	}
	if !saidStatus {
		f.failf("with two of three brokers down, walstream status did not say %q:\n%s", why, status)
	}
	var wg sync.WaitGroup
	for _, id := range down {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := br.node(id).Start(); err != nil {
				f.failf("starting Kafka node %d again: %v", id, err)
			}
		}()
	}
	wg.Wait()
	back := time.Now()
	if h := br.waitHealthy(ctx, 2*time.Minute); h != "" {
		f.note("after two brokers down, the cluster was not healthy within 2m: %s", h)
	}
	// The load goes on, so walstream commits again soon after.
	for deadline := time.Now().Add(time.Minute); ; sleep(ctx, 200*time.Millisecond) {
		if cp, _ := f.rig.cons.lastCheckpoint(1 << 62); after.Less(cp) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			f.failf("walstream committed nothing within a minute of the brokers' return")
			break
		}
	}
	return fmt.Sprintf("nodes %v down %s, committing again %s after their return; readyz said %q", down,
		back.Sub(killed).Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond), clip(readyz, 160))
}

// cutOff blackholes one broker's listener, which clients and the other
// brokers reach it through, for 10 to 20 s. Its controller listener is not
// proxied: the broker stays registered, keeps leading its partitions and
// is not fenced, so walstream waits for it (or for the session to fail
// over after a commit timeout) rather than for a new leader.
func (f *faults) cutOff(ctx context.Context) string {
	i := f.rng.IntN(len(f.rig.px.kafka))
	d := 10*time.Second + time.Duration(f.rng.Int64N(int64(10*time.Second)))
	f.mu.Lock()
	f.rep.Targets[faultBrokerCutOff] = append(f.rep.Targets[faultBrokerCutOff], int32(i+1))
	f.mu.Unlock()
	f.toxic(ctx, &f.rig.px.kafka[i], d, "timeout", `{"timeout":0}`, "upstream", "downstream")
	start := time.Now()
	if why := f.rig.broker.waitHealthy(ctx, 2*time.Minute); why != "" {
		f.note("after node %d was cut off, the cluster was not healthy within 2m: %s", i+1, why)
	}
	return fmt.Sprintf("node %d for %s, healthy %s after", i+1, d.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// getReadyz asks a walstream's /readyz; code 0 when it does not answer.
func getReadyz(p *wsProc) (code int, body string) {
	m := reHTTPAddr.FindStringSubmatch(p.Log())
	if m == nil {
		return 0, ""
	}
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + m[1] + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// status runs `walstream status` as an operator would, with walstream's
// connection settings, and returns what it printed and how it exited.
func (f *faults) status(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, f.rig.wsBin, f.rig.statusArgs...).CombinedOutput()
	return fmt.Sprintf("%s(exit: %v)", out, err)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
