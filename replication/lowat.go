package replication

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// While walstream is behind, the walsender sends as fast as it decodes,
// one small message at a time, and walstream, faster than it, used to find
// the socket empty after every row: reads, waits in the poller and
// wake-ups, about one of each per row, were half of walstream's CPU in a
// backlog drain.
// Raising the socket's SO_RCVLOWAT makes the kernel wake a waiting read
// only once lowatBytes are queued, so a backlog is read in large chunks.
// Caught up, it stays at 1: a lone message must not wait.
const (
	lowatBytes = 64 << 10
	// lowatWait bounds how long a read waits for lowatBytes; when they do
	// not come in time the backlog is over, and the read takes what is
	// there and lowers the mark. A walsender draining a backlog of ~430 B
	// rows fills 64 KiB in 1 to 2 ms, so a 2 ms wait timed out and lowered
	// the mark often: walbench measured 5.3 µs of CPU per row at 2 ms and
	// 3.5 µs at 10 ms (300k rows, 3 runs each). Only the read that ends a
	// backlog pays the wait.
	lowatWait = 10 * time.Millisecond
	// backlogAge is how far a transaction's commit is behind the time the
	// walsender sent it for the stream to count as behind; both are the
	// server's clock, so walstream's clock skew does not matter. Far above
	// the lag of a stream that keeps up.
	backlogAge = time.Second
	// readBufBytes is how much one read from the socket takes. pgconn reads
	// in 8 KiB chunks, so a 64 KiB wake-up still cost eight reads, each
	// with a system call and, while the mark is raised, a read deadline.
	readBufBytes = 256 << 10
)

// lowatConn is the replication connection's socket, under TLS if any.
// Reads come from the replication loop's goroutine only; SetReadDeadline
// and SetDeadline may come from another, to stop a read.
type lowatConn struct {
	net.Conn
	raw    syscall.RawConn
	raised bool // owned by the reading goroutine

	// rd buffers the socket's reads, readBufBytes at a time, while the mark
	// is raised; created then and dropped once the mark is lowered and it
	// is empty, so that a stream that keeps up holds no such buffer (a
	// process of many streams held one for each). Owned by the reading
	// goroutine.
	rd *bufio.Reader

	mu       sync.Mutex // orders deadline changes against the short ones Read sets
	deadline time.Time  // the read deadline the connection's user set
}

// dialLowat wraps dial so that connections it makes can raise their
// receive low-water mark.
func dialLowat(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc, ok := c.(syscall.Conn)
		if !ok || !lowatSupported {
			return c, nil
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return c, nil
		}
		return &lowatConn{Conn: c, raw: raw}, nil
	}
}

// lowatOf returns the lowatConn under a replication connection, or nil
// when it has none.
func lowatOf(conn *pgconn.PgConn) *lowatConn {
	nc := conn.Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	lc, _ := nc.(*lowatConn)
	return lc
}

func (c *lowatConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return c.Conn.SetDeadline(t)
}

func (c *lowatConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return c.Conn.SetReadDeadline(t)
}

// raise sets the low-water mark to lowatBytes. It is called for every
// transaction decoded while behind, so it costs nothing when raised.
func (c *lowatConn) raise() {
	if c != nil && !c.raised && c.setLowat(lowatBytes) == nil {
		c.raised = true
	}
}

// lower sets the low-water mark back to 1 byte.
func (c *lowatConn) lower() error {
	c.raised = false
	return c.setLowat(1)
}

func (c *lowatConn) setLowat(n int) error {
	var serr error
	if err := c.raw.Control(func(fd uintptr) { serr = setRcvLowat(fd, n) }); err != nil {
		return err
	}
	return serr
}

var _ net.Conn = (*lowatConn)(nil)

// Read passes on what the last socket read buffered, and reads the socket
// again, as much as it holds up to readBufBytes, only once that is used up.
// While the mark is down, it reads the socket for the caller's buffer as it
// comes: messages come one at a time then.
func (c *lowatConn) Read(b []byte) (int, error) {
	switch {
	case c.rd != nil && c.rd.Buffered() > 0:
	case c.raised:
		if c.rd == nil {
			c.rd = bufio.NewReaderSize(socket{c}, readBufBytes)
		}
	default:
		c.rd = nil
		return c.read(b)
	}
	return c.rd.Read(b)
}

// socket is the lowatConn's own reads, under its buffer.
type socket struct{ c *lowatConn }

func (s socket) Read(b []byte) (int, error) { return s.c.read(b) }

// read reads the socket. While the mark is raised it waits at most
// lowatWait for it; past that it lowers the mark and waits for anything, up
// to the user's deadline.
func (c *lowatConn) read(b []byte) (int, error) {
	if !c.raised {
		return c.Conn.Read(b)
	}
	c.mu.Lock()
	short := time.Now().Add(lowatWait)
	user := c.deadline
	err := c.Conn.SetReadDeadline(earliest(short, user))
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	c.mu.Lock()
	user = c.deadline
	if !user.IsZero() && !time.Now().Before(user) {
		c.mu.Unlock()
		return n, err // the user's deadline, not the short one
	}
	err = c.Conn.SetReadDeadline(user)
	if err == nil {
		err = c.lower()
	}
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// earliest returns the earlier of a and a deadline u, zero meaning none.
func earliest(a, u time.Time) time.Time {
	if u.IsZero() || a.Before(u) {
		return a
	}
	return u
}
