package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// pgoWindow is the length of each CPU profile walbench asks walstream for.
// pprof profiles a fixed time, and a phase's length is not known when it
// starts, so a phase is covered by back-to-back windows; the last one ends
// at most this long after the phase.
const pgoWindow = 2 * time.Second

// pgoProfiles collects walstream's own CPU profiles (its pprof endpoint)
// over every measured phase, for profile-guided optimization: their merge is
// cmd/walstream/default.pgo, which go build applies to walstream.
type pgoProfiles struct {
	addr  string // walstream's --pprof-addr
	dir   string
	files []string
}

// newPGOProfiles reserves a loopback address for walstream's pprof
// listener and returns the profiles to be saved in dir.
func newPGOProfiles(dir string) (*pgoProfiles, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	port, err := testenv.PickPort()
	if err != nil {
		return nil, fmt.Errorf("walstream's pprof listener: %w", err)
	}
	return &pgoProfiles{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}, nil
}

// pgoPhase is one phase being profiled.
type pgoPhase struct {
	stopping chan struct{}
	done     chan error
	files    []string // written by the profiling goroutine until done
	into     *pgoProfiles
}

// start profiles walstream from now until stop, in files named after the
// phase. A nil pgoProfiles profiles nothing.
func (g *pgoProfiles) start(ctx context.Context, phase string) *pgoPhase {
	if g == nil {
		return nil
	}
	ph := &pgoPhase{stopping: make(chan struct{}), done: make(chan error, 1), into: g}
	go func() { ph.done <- ph.run(ctx, phase) }()
	return ph
}

func (ph *pgoPhase) run(ctx context.Context, phase string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", ph.into.addr, int(pgoWindow.Seconds()))
	// walstream may not listen yet when its phase starts.
	listenBy := time.Now().Add(30 * time.Second)
	for i := 0; ; {
		select {
		case <-ph.stopping:
			return nil
		default:
		}
		path := filepath.Join(ph.into.dir, fmt.Sprintf("%s-%03d.pprof", phase, i))
		err := fetchTo(ctx, url, path)
		var op *net.OpError
		switch {
		case errors.As(err, &op) && i == 0 && time.Now().Before(listenBy):
			time.Sleep(50 * time.Millisecond)
			continue
		case err != nil:
			return fmt.Errorf("profiling walstream in %s: %w", phase, err)
		}
		ph.files = append(ph.files, path)
		i++
	}
}

// stop ends the phase's profiling once the window under way is written.
func (ph *pgoPhase) stop() error {
	if ph == nil {
		return nil
	}
	close(ph.stopping)
	err := <-ph.done
	ph.into.files = append(ph.into.files, ph.files...)
	return err
}

// fetchTo saves the body of a GET of url in path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("reading %s: %w", url, err)
	}
	return f.Close()
}

// merge writes the merge of every profile taken into out, with go tool
// pprof.
func (g *pgoProfiles) merge(ctx context.Context, out string) error {
	if len(g.files) == 0 {
		return errors.New("no walstream CPU profile was taken: no scenario ran walstream")
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	var msg bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof", "-proto"}, g.files...)...)
	cmd.Stdout, cmd.Stderr = f, &msg
	if err := cmd.Run(); err != nil {
		f.Close()
		return fmt.Errorf("merging %d walstream CPU profiles into %s: %w: %s", len(g.files), out, err, msg.Bytes())
	}
	return f.Close()
}
