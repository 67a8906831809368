package pipeline

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/decode"
)

// fileSpool keeps a streamed transaction's messages until it ends, in a
// temporary file unlinked as soon as it is created: an outbox transaction
// Postgres streams may be of any size and may still abort, so it is held
// on disk rather than in memory, and the kernel frees the file when
// walstream closes it, or dies, so nothing is left behind. It is used from
// the stream's goroutine only.
type fileSpool struct {
	f     *os.File
	w     *bufio.Writer
	size  int64 // written, buffered or not
	bytes prometheus.Gauge
}

var _ decode.Spool = (*fileSpool)(nil)

// spoolBuffer is each spool's write buffer: streamed transactions may be
// many at once, each spooled in small writes.
const spoolBuffer = 32 << 10

// newFileSpool creates the spool of transaction xid in dir (the system's
// temporary directory when empty: $TMPDIR, else /tmp), counting its bytes
// in bytes.
func newFileSpool(dir string, xid uint32, bytes prometheus.Gauge) (*fileSpool, error) {
	f, err := os.CreateTemp(dir, fmt.Sprintf("walstream-xid%d-*", xid))
	if err != nil {
		return nil, fmt.Errorf("creating the spool of streamed transaction %d: %w", xid, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("unlinking the spool %s of streamed transaction %d: %w", f.Name(), xid, err)
	}
	return &fileSpool{f: f, w: bufio.NewWriterSize(f, spoolBuffer), bytes: bytes}, nil
}

func (s *fileSpool) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.size += int64(n)
	s.bytes.Add(float64(n))
	return n, err
}

// ReadAt reads what was written, flushing the buffer first.
func (s *fileSpool) ReadAt(p []byte, off int64) (int, error) {
	if err := s.w.Flush(); err != nil {
		return 0, err
	}
	return s.f.ReadAt(p, off)
}

func (s *fileSpool) Truncate(size int64) error {
	if err := s.w.Flush(); err != nil {
		return err
	}
	if err := s.f.Truncate(size); err != nil {
		return err
	}
	if _, err := s.f.Seek(size, io.SeekStart); err != nil {
		return err
	}
	s.bytes.Sub(float64(s.size - size))
	s.size = size
	return nil
}

func (s *fileSpool) Close() error {
	s.bytes.Sub(float64(s.size))
	s.size = 0
	return s.f.Close()
}
