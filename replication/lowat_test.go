package replication

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// lowatPair returns a lowatConn dialed to a loopback listener and the
// server's end of the connection.
func lowatPair(t *testing.T) (*lowatConn, net.Conn) {
	t.Helper()
	if !lowatSupported {
		t.Skip("SO_RCVLOWAT is not used on this platform")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var d net.Dialer
	c, err := dialLowat(d.DialContext)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	lc, ok := c.(*lowatConn)
	if !ok {
		t.Fatalf("dialLowat made a %T, want *lowatConn", c)
	}
	return lc, srv
}

// A message smaller than the raised mark is still read: at the end of a
// backlog the last rows must not wait for more.
func TestLowatReadsASmallMessage(t *testing.T) {
	c, srv := lowatPair(t)
	c.raise()
	if !c.raised {
		t.Fatal("raise did not raise the mark")
	}
	go func() {
		// Most likely after the read found the socket empty; the message
		// must arrive either way.
		time.Sleep(10 * lowatWait)
		_, _ = srv.Write([]byte("BEGIN"))
	}()
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "BEGIN" {
		t.Fatalf("Read = %q, %v; want BEGIN", buf[:n], err)
	}
}

// A deadline the user set, here one already past, ends a read while the
// mark is raised, as it does a plain read.
func TestLowatKeepsTheUsersDeadline(t *testing.T) {
	c, _ := lowatPair(t)
	c.raise()
	if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %v, want %v", err, os.ErrDeadlineExceeded)
	}
	if !c.raised {
		t.Fatal("the user's deadline lowered the mark; only the end of a backlog should")
	}
}

// A held read that finds the socket empty waits until the hold ends for
// the small messages a live stream sends, takes all of them in one read, and leaves the mark lowered
// for the reads after it.
func TestLowatHoldReadsAtItsEnd(t *testing.T) {
	c, srv := lowatPair(t)
	until := time.Now().Add(200 * time.Millisecond)
	c.hold(until)
	if !c.raised {
		t.Fatal("hold did not raise the mark")
	}
	// Written once the read waits; a read finds what is there already
	// without waiting, whatever the mark.
	go func() {
		for _, m := range []string{"BEGIN", "INSERT", "COMMIT"} {
			time.Sleep(20 * time.Millisecond)
			_, _ = srv.Write([]byte(m))
		}
	}()
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "BEGININSERTCOMMIT" {
		t.Fatalf("Read = %q, %v; want the three messages at once", buf[:n], err)
	}
	if time.Now().Before(until) {
		t.Fatal("the held read returned before the hold ended")
	}
	if c.raised {
		t.Fatal("the mark is still raised after the held read")
	}
	// The next read is a plain one: a lone message is read at once.
	go func() { _, _ = srv.Write([]byte("BEGIN")) }()
	start := time.Now()
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "BEGIN" {
		t.Fatalf("Read = %q, %v; want BEGIN", buf[:n], err)
	}
	if d := time.Since(start); d > lowatWait {
		t.Fatalf("a read after the hold waited %s", d)
	}
}

// A held read ends early when a chunk of lowatBytes comes: a burst is read
// at once.
func TestLowatHoldEndsOnAChunk(t *testing.T) {
	c, srv := lowatPair(t)
	c.hold(time.Now().Add(time.Minute))
	go func() { _, _ = srv.Write(make([]byte, lowatBytes)) }()
	buf := make([]byte, 2*lowatBytes)
	start := time.Now()
	n, err := io.ReadAtLeast(c, buf, lowatBytes)
	if err != nil || n < lowatBytes {
		t.Fatalf("Read = %d bytes, %v", n, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a chunk of %d bytes waited %s for the hold", lowatBytes, d)
	}
	if c.raised {
		t.Fatal("the mark is still raised after the held read")
	}
}

// A user's deadline before the hold's end still ends the read.
func TestLowatHoldKeepsTheUsersDeadline(t *testing.T) {
	c, _ := lowatPair(t)
	c.hold(time.Now().Add(time.Minute))
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %v, want %v", err, os.ErrDeadlineExceeded)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the read waited %s, past the user's deadline", d)
	}
}
