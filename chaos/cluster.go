package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/kafka"
)

// commitTimeout is walstream's --commit-timeout in the suite; it asks
// Kafka for a transaction timeout of twice that.
const commitTimeout = 10 * time.Second

const txnTimeout = 2 * commitTimeout

// killNode SIGKILLs the Kafka node the fault names: the transaction
// coordinator of st's transactional id, the leader of an outbox partition
// of any stream, the leader of the checkpoint topic, or the active
// controller. It starts the node again after a few seconds and waits for
// the cluster's health (every replica back in sync).
func (f *faults) killNode(ctx context.Context, kind string, st *stream) string {
	br := f.rig.broker
	var id int32
	var what string
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; sleep(ctx, 500*time.Millisecond) {
		switch kind {
		case faultCoordinatorKill:
			id, err = br.coordinator(ctx, st.txnID)
			what = "transaction coordinator of " + st.txnID
			if err == nil {
				what += f.coordinatorPartition(ctx, id, st.txnID)
			}
		case faultOutboxLeaderKill:
			topics := outboxTopics(f.rig.streams)
			topic, part := topics[f.rng.IntN(len(topics))], int32(f.rng.IntN(3))
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
// the transactions of txnID, and notes when its leader is not the
// coordinator Kafka named: both are how an operator finds it.
func (f *faults) coordinatorPartition(ctx context.Context, coordinator int32, txnID string) string {
	br := f.rig.broker
	md, err := br.adm.Metadata(ctx, "__transaction_state")
	if err != nil {
		return ""
	}
	parts := md.Topics["__transaction_state"].Partitions
	n := kafka.TransactionLogPartition(txnID, len(parts))
	if p, ok := parts[n]; ok && p.Leader != coordinator {
		f.note("FindCoordinator named node %d for %s, but __transaction_state-%d is led by node %d", coordinator, txnID, n, p.Leader)
	}
	return fmt.Sprintf(", leader of __transaction_state-%d", n)
}

// twoDown SIGKILLs two of the three brokers. The controller quorum,
// which has two more voters, fences them after broker.session.timeout.ms
// (9 s) and shrinks every ISR to the last broker, which then refuses
// walstream's writes (NOT_ENOUGH_REPLICAS: min.insync.replicas is 2).
// No stream may commit meanwhile; a walstream must say why in /readyz and
// `walstream status` (asked of a stream picked at random); once the
// brokers are back every stream must go on.
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
	// that nothing may commit until the brokers are back. What settled is
	// read up to the last stable offsets, which the fencing of the two
	// (and the last broker's leading every partition) may have moved on
	// since the checker last fetched.
	sleep(ctx, commitTimeout+2*time.Second)
	if lso, complete, err := f.rig.cons.stableOffsets(ctx); err != nil || !complete || !f.rig.cons.waitCaughtUp(ctx, lso, 10*time.Second) {
		f.note("two brokers down: the checker did not read up to the last stable offsets (%v, complete %v)", err, complete)
	}
	last := func() map[*stream]checkpoint.Checkpoint {
		cps := make(map[*stream]checkpoint.Checkpoint)
		for _, st := range f.rig.streams {
			cps[st], _ = f.rig.cons.lastCheckpoint(st.name, 1<<62)
		}
		return cps
	}
	before := last()
	asked := f.pick()
	var readyz, status string
	saidReadyz, saidStatus := false, false
	const why = "Kafka cannot take walstream's writes"
	for until := killed.Add(40*time.Second + time.Duration(f.rng.Int64N(int64(10*time.Second)))); time.Now().Before(until) && ctx.Err() == nil; sleep(ctx, time.Second) {
		if code, body := f.readyz(asked); code != 0 && !saidReadyz {
			readyz = fmt.Sprintf("%d %s", code, body)
			// A fleet's processes lose its group too, whose coordinator
			// cannot complete a rebalance, and say so.
			saidReadyz = code == http.StatusServiceUnavailable && (strings.Contains(body, why) || f.fleet && strings.Contains(body, msgNotMember))
		}
		if !saidStatus && time.Since(killed) > 25*time.Second {
			status = f.status(ctx, asked)
			saidStatus = strings.Contains(status, why)
		}
	}
	after := last()
	for _, st := range f.rig.streams {
		if a, b := after[st], before[st]; a.Less(b) || b.Less(a) {
			f.failf("a checkpoint of %s committed while two of three brokers were down: %s, then %s", st.name, b, a)
		}
	}
	if !saidReadyz {
		f.failf("with two of three brokers down, /readyz of %s never said %q (or, in a fleet, %q); it last said: %s", asked.name, why, msgNotMember, readyz)
	}
	if !saidStatus {
		f.failf("with two of three brokers down, walstream status of %s did not say %q:\n%s", asked.name, why, status)
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
	// The load goes on, so every stream commits again soon after.
	for deadline := time.Now().Add(time.Minute); ; sleep(ctx, 200*time.Millisecond) {
		var behind []string
		for _, st := range f.rig.streams {
			if cp, _ := f.rig.cons.lastCheckpoint(st.name, 1<<62); !after[st].Less(cp) {
				behind = append(behind, st.name)
			}
		}
		if len(behind) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			f.failf("%s committed nothing within a minute of the brokers' return", strings.Join(behind, ", "))
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

// getReadyz asks p's /readyz about st (?stream= in a process of several
// streams); code 0 when it does not answer.
func getReadyz(p *wsProc, st *stream) (code int, body string) {
	m := reHTTPAddr.FindStringSubmatch(p.Log())
	if m == nil {
		return 0, ""
	}
	u := "http://" + m[1] + "/readyz"
	if len(st.sup.streams) > 1 {
		u += "?stream=" + url.QueryEscape(st.name)
	}
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(u)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// status runs `walstream status` of st as an operator would, with
// walstream's connection settings, and returns what it printed and how it
// exited.
func (f *faults) status(ctx context.Context, st *stream) string {
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, f.rig.wsBin, f.rig.statusArgs(st)...).CombinedOutput()
	return fmt.Sprintf("%s(exit: %v)", out, err)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
