package testenv

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// The servers the tests of one test binary share: a broker of each kind
// any test asked for, started at the first test that asks and closed by
// Main after the last test. A Kafka node costs seconds of two cores to
// start; tests that only produce to it and read it back, each under names
// of its own (TopicPrefix), need no node of their own.
var shared struct {
	sync.Mutex
	main    bool // Main runs this binary's tests, and closes what is shared
	brokers map[BrokerKind]*sharedLaunch
}

// sharedLaunch is a shared broker being started, or started.
type sharedLaunch struct {
	done chan struct{} // closed when b or err is set
	b    Broker
	err  error
}

// SharedBroker is a broker of the given kind that the tests of this test
// binary share, started at the first call and closed by Main (which the
// package's TestMain must run). A test on it must keep to names of its
// own (TopicPrefix) and may not stop, restart or close it: those fail the
// test. A test that does, or needs a broker configured otherwise, starts
// its own (StartBroker, StartKafka). One that cannot start skips the
// test, or fails it under CI.
func SharedBroker(t testing.TB, kind BrokerKind) Broker {
	t.Helper()
	return SharedBrokerAsync(t, kind)()
}

// SharedBrokerAsync is SharedBroker in the background, as
// StartBrokerAsync is StartBroker: the function it returns waits for the
// broker.
func SharedBrokerAsync(t testing.TB, kind BrokerKind) func() Broker {
	t.Helper()
	shared.Lock()
	if !shared.main {
		shared.Unlock()
		t.Fatal("a shared broker needs the package's TestMain to run its tests with testenv.Main, which closes it")
	}
	l, ok := shared.brokers[kind]
	if !ok {
		l = &sharedLaunch{done: make(chan struct{})}
		if shared.brokers == nil {
			shared.brokers = make(map[BrokerKind]*sharedLaunch)
		}
		shared.brokers[kind] = l
		go func() {
			defer close(l.done)
			l.b, l.err = LaunchBroker(context.Background(), kind)
		}()
	}
	shared.Unlock()
	return func() Broker {
		t.Helper()
		<-l.done
		if l.err != nil {
			Unavailable(t, "starting the shared %s: %v", kind, l.err)
		}
		t.Cleanup(func() {
			if k, ok := l.b.(*Kafka); ok && t.Failed() {
				k.logNodes(t)
			}
		})
		return sharedBroker{l.b, t}
	}
}

// closeShared closes every shared broker, once the tests are done.
func closeShared() {
	shared.Lock()
	defer shared.Unlock()
	for _, l := range shared.brokers {
		<-l.done
		if l.err == nil {
			l.b.Close()
		}
	}
	shared.brokers = nil
}

// sharedBroker is a shared broker as one test holds it: the test may not
// end it for the others.
type sharedBroker struct {
	Broker
	t testing.TB
}

var _ Broker = sharedBroker{}

func (b sharedBroker) String() string { return b.Broker.String() + " (shared)" }

func (b sharedBroker) Stop(syscall.Signal) { b.refuse("stopping") }

func (b sharedBroker) Start() error { return b.refuse("starting") }

func (b sharedBroker) Restart(syscall.Signal) error { return b.refuse("restarting") }

func (b sharedBroker) Close() { b.refuse("closing") }

func (b sharedBroker) refuse(what string) error {
	b.t.Helper()
	err := fmt.Errorf("%s %s, which other tests use: a test that stops or restarts its broker starts its own (StartBroker)", what, b)
	b.t.Fatal(err)
	return err
}

// prefixes numbers the names TopicPrefix gives, so that each is new in
// this test binary.
var prefixes atomic.Int64

// TopicPrefix is a prefix of Kafka names (topics, transactional ids) that
// no other test of this binary gets, for a test on a shared broker: the
// test's name, in the characters a topic name may hold, and a number,
// ending in a dot, such as "TestBadRowStops-7.". It holds no underscore:
// Kafka refuses a topic whose name differs from another's only by '.'
// against '_'.
func TopicPrefix(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	return fmt.Sprintf("%s-%d.", name, prefixes.Add(1))
}
