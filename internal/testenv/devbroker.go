package testenv

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Devbroker is cmd/devbroker run as a child process with a data directory,
// so that it can be killed and restarted on the same port with its state.
type Devbroker struct {
	Bin, DataDir string
	Listen       string // the address it listens on
	Advertise    string // the address clients are told, when not Listen
	Partitions   int    // of auto-created topics; 3 when 0
	Output       io.Writer

	mu sync.Mutex
	p  *Process
}

// Start starts the broker and waits up to 30s for it to listen.
func (b *Devbroker) Start() error {
	partitions := b.Partitions
	if partitions == 0 {
		partitions = 3
	}
	args := []string{"-addr", b.Listen, "-data-dir", b.DataDir, "-partitions", strconv.Itoa(partitions)}
	if b.Advertise != "" {
		args = append(args, "-advertise", b.Advertise)
	}
	p, err := StartProcess(ProcessConfig{Name: "devbroker", Path: b.Bin, Output: b.Output, Args: args})
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.p = p
	b.mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", b.Listen, time.Second); err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("devbroker on %s exited at start: %s", b.Listen, p.ExitDesc())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devbroker on %s not listening after 30s", b.Listen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr is the address clients bootstrap from.
func (b *Devbroker) Addr() string {
	if b.Advertise != "" {
		return b.Advertise
	}
	return b.Listen
}

func (b *Devbroker) String() string { return "devbroker (kfake)" }

// Stop ends the broker with sig and waits for it to exit.
func (b *Devbroker) Stop(sig syscall.Signal) {
	b.mu.Lock()
	p := b.p
	b.mu.Unlock()
	if p != nil {
		_ = p.Stop(sig, 30*time.Second)
	}
}

// Close kills the broker and removes its data.
func (b *Devbroker) Close() {
	b.Stop(syscall.SIGKILL)
	os.RemoveAll(b.DataDir)
}

// Restart stops the broker with sig and starts it again from its data dir.
func (b *Devbroker) Restart(sig syscall.Signal) error {
	b.Stop(sig)
	return b.Start()
}
