package secret

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// File is a file holding one secret, such as a password, which another
// process may replace while walstream runs.
type File struct {
	Path  string
	start [sha256.Size]byte // its content when NewFile read it
	mu    sync.Mutex
	last  Use // guarded by mu
}

// Use says which content of a file a connection used: when it was read,
// and whether it was the content walstream started with. It goes into the
// errors of refused connections, so that a rotation that reached one side
// only is told apart from a wrong secret; it never holds the secret.
type Use struct {
	Path    string
	At      time.Time
	Changed bool // the content differs from the content at start
}

// String is "read from PATH at HH:MM:SS UTC (changed since start)", or
// empty for no use.
func (u Use) String() string {
	if u.Path == "" {
		return ""
	}
	how := "as at start"
	if u.Changed {
		how = "changed since start"
	}
	return fmt.Sprintf("read from %s at %s (%s)", u.Path, u.At.UTC().Format("15:04:05 UTC"), how)
}

// NewFile reads the secret at path once, so that a missing or unreadable
// file is an error at start, and keeps its content's digest to tell a
// changed one later.
func NewFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return &File{Path: path, start: sha256.Sum256(b)}, nil
}

// Read reads the secret anew, less one trailing newline, and records the
// use (Last).
func (f *File) Read() (string, Use, error) {
	b, u, err := f.content()
	return Trim(string(b)), u, err
}

// content reads the file anew as it is, and records the use.
func (f *File) content() ([]byte, Use, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, Use{}, fmt.Errorf("reading %s: %w", f.Path, err)
	}
	u := Use{Path: f.Path, At: time.Now(), Changed: sha256.Sum256(b) != f.start}
	f.mu.Lock()
	f.last = u
	f.mu.Unlock()
	return b, u, nil
}

// Last is the last use of the file, zero before the first.
func (f *File) Last() Use {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// Trim drops one trailing newline (LF or CRLF) from a secret file's
// content, which editors and `echo` add.
func Trim(s string) string {
	return strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r")
}
