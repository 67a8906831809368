package replication

import (
	"bytes"
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

// While the mark is raised, one socket read serves many of pgconn's 8 KiB
// reads, and an error that ends the stream comes only after every byte
// before it. Once it is lowered and what it buffered is read, the buffer
// is let go: a stream that keeps up holds none.
func TestLowatPassesOnWhatItBuffered(t *testing.T) {
	c, srv := lowatPair(t)
	c.raise()
	want := make([]byte, 100<<10)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if _, err := srv.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 8<<10)
	var got []byte
	for {
		n, err := c.Read(chunk)
		got = append(got, chunk[:n]...)
		if len(got) == n && c.rd.Buffered() == 0 {
			t.Errorf("the first read returned %d bytes and buffered none; %d were sent", n, len(want))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d sent", len(got), len(want))
	}

	// The backlog ends with bytes still buffered: they are read first,
	// then the buffer goes.
	c, srv = lowatPair(t)
	c.raise()
	if _, err := srv.Write(want); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for len(got) < len(want) {
		n, err := c.Read(chunk)
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
		got = append(got, chunk[:n]...)
		if c.raised && c.rd != nil && c.rd.Buffered() > 0 {
			if err := c.lower(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes across the mark's lowering, not the %d sent", len(got), len(want))
	}
	if _, err := srv.Write([]byte("COMMIT")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(chunk); err != nil || string(chunk[:n]) != "COMMIT" {
		t.Fatalf("Read = %q, %v; want COMMIT", chunk[:n], err)
	}
	if c.rd != nil {
		t.Errorf("the mark down and its buffer read, Read kept a %d-byte buffer", c.rd.Size())
	}
}
