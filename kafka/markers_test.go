package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnProducer commits or aborts one record at a time to partition 0 of
// topic under transactional id id, and returns its offset.
type txnProducer struct {
	t  *testing.T
	cl *kgo.Client
}

func newTxnProducer(t *testing.T, conn Settings, id string) *txnProducer {
	t.Helper()
	cl, err := kgo.NewClient(append(conn.Opts(), kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &txnProducer{t: t, cl: cl}
}

// produce writes one record in a new transaction and leaves it open.
func (tp *txnProducer) produce(topic, key string) int64 {
	tp.t.Helper()
	if err := tp.cl.BeginTransaction(); err != nil {
		tp.t.Fatal(err)
	}
	r, err := tp.cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(key)}).First()
	if err != nil {
		tp.t.Fatal(err)
	}
	return r.Offset
}

func (tp *txnProducer) end(commit bool) {
	tp.t.Helper()
	if err := tp.cl.EndTransaction(context.Background(), kgo.TransactionEndTry(commit)); err != nil {
		tp.t.Fatal(err)
	}
}

// One Markers decides the records of several producers on one partition,
// waited for at once and one after another: committed, aborted, a record
// read before anyone waited for it, one the partition does not hold, and
// one still open when the wait ends.
func TestMarkersDecideEveryWaiter(t *testing.T) {
	conn, adm := cluster(t, 1, kfake.SeedTopics(1, "cps"))
	_ = adm
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := NewMarkers(conn.Opts())
	defer m.Close()

	const n = 6
	ps := make([]*txnProducer, n)
	offsets := make([]int64, n)
	for i := range ps {
		ps[i] = newTxnProducer(t, conn, fmt.Sprintf("tx-%d", i))
		offsets[i] = ps[i].produce("cps", fmt.Sprintf("k%d", i))
	}
	type result struct {
		d   Decision
		err error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := m.Watch("cps", 0, offsets[i], time.Now()).Wait(ctx)
			results[i] = result{d, err}
		}()
	}
	// Every waiter waits on records still open; then each is decided,
	// the even ones committed and the odd ones aborted, last first.
	time.Sleep(200 * time.Millisecond)
	ended := make([]time.Time, n)
	for i := n - 1; i >= 0; i-- {
		ended[i] = time.Now()
		ps[i].end(i%2 == 0)
	}
	wg.Wait()
	for i, r := range results {
		want := FateCommitted
		if i%2 == 1 {
			want = FateAborted
		}
		if r.err != nil || r.d.Fate != want {
			t.Errorf("record %d at offset %d: Await = %+v, %v; want fate %d", i, offsets[i], r.d, r.err, want)
		}
		// The decision is timed by the read that found the marker.
		if r.d.At.Before(ended[i]) {
			t.Errorf("record %d decided at %s, before its transaction ended at %s", i, r.d.At.Format(time.StampMicro), ended[i].Format(time.StampMicro))
		}
	}

	// A record committed while nobody waited, read since for a later wait:
	// it is decided from what the loop read, or read again.
	early := ps[0].produce("cps", "early")
	ps[0].end(true)
	late := ps[1].produce("cps", "late")
	done := make(chan result, 1)
	go func() {
		d, err := m.Watch("cps", 0, late, time.Now()).Wait(ctx)
		done <- result{d, err}
	}()
	time.Sleep(200 * time.Millisecond) // the loop reads past early
	if d, err := m.Watch("cps", 0, early, time.Now()).Wait(ctx); err != nil || d.Fate != FateCommitted {
		t.Errorf("the record read before its wait: Await = %+v, %v; want committed", d, err)
	}
	ps[1].end(true)
	if r := <-done; r.err != nil || r.d.Fate != FateCommitted {
		t.Errorf("the later record: Await = %+v, %v; want committed", r.d, r.err)
	}

	// A marker is no record a producer wrote: the partition holds none to
	// wait for there.
	if _, err := m.Watch("cps", 0, late+1, time.Now()).Wait(ctx); !errors.Is(err, ErrNoRecord) {
		t.Errorf("Await at the marker's offset = %v, want ErrNoRecord", err)
	}

	// A record still open when the wait ends is undecided.
	open := ps[2].produce("cps", "open")
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	x := m.Watch("cps", 0, open, time.Now())
	if d, err := x.Wait(short); !errors.Is(err, context.DeadlineExceeded) || d.Fate != FateOpen {
		t.Errorf("Wait of an open record = %+v, %v; want open, the deadline exceeded", d, err)
	}
	ps[2].end(false)
	if d, err := x.Wait(ctx); err != nil || d.Fate != FateAborted {
		t.Errorf("Wait of the record aborted since = %+v, %v; want aborted", d, err)
	}
}

// A wait due later is read for no sooner, unless a read for another wait
// decides it first: then several are answered by one fetch.
func TestMarkersWaitUntilDue(t *testing.T) {
	conn, _ := cluster(t, 1, kfake.SeedTopics(1, "cps"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := NewMarkers(conn.Opts())
	defer m.Close()
	a, b := newTxnProducer(t, conn, "tx-a"), newTxnProducer(t, conn, "tx-b")
	offA := a.produce("cps", "a")
	a.end(true)
	offB := b.produce("cps", "b")
	b.end(true)

	lazy := m.Watch("cps", 0, offA, time.Now().Add(time.Hour))
	select {
	case <-lazy.Done():
		t.Fatal("a wait due in an hour was answered at once")
	case <-time.After(300 * time.Millisecond):
	}
	// A wait due now reads the partition, which decides the lazy one too.
	if d, err := m.Watch("cps", 0, offB, time.Now()).Wait(ctx); err != nil || d.Fate != FateCommitted {
		t.Fatalf("Wait = %+v, %v; want committed", d, err)
	}
	select {
	case <-lazy.Done():
	case <-time.After(time.Second):
		t.Fatal("the lazy wait was not answered by the other's read")
	}
	if d, err := lazy.Wait(ctx); err != nil || d.Fate != FateCommitted {
		t.Errorf("the lazy wait: %+v, %v; want committed", d, err)
	}

	// Hurry brings a lazy wait's read forward.
	offC := a.produce("cps", "c")
	a.end(true)
	x := m.Watch("cps", 0, offC, time.Now().Add(time.Hour))
	x.Hurry(time.Now().Add(100 * time.Millisecond))
	select {
	case <-x.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a hurried wait was not answered")
	}
}

// Close ends a wait in progress and stops the loop.
func TestMarkersClose(t *testing.T) {
	conn, _ := cluster(t, 1, kfake.SeedTopics(1, "cps"))
	p := newTxnProducer(t, conn, "tx-close")
	off := p.produce("cps", "k")
	m := NewMarkers(conn.Opts())
	errc := make(chan error, 1)
	go func() {
		_, err := m.Watch("cps", 0, off, time.Now()).Wait(context.Background())
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	m.Close()
	if err := <-errc; !errors.Is(err, ErrMarkersClosed) {
		t.Errorf("Wait across Close = %v, want ErrMarkersClosed", err)
	}
	if _, err := m.Watch("cps", 0, off, time.Now()).Wait(context.Background()); !errors.Is(err, ErrMarkersClosed) {
		t.Errorf("Wait after Close = %v, want ErrMarkersClosed", err)
	}
	p.end(false)
}
