package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Registry is Apicurio Registry on loopback, a JVM child process with its
// default in-memory storage (every start begins empty, ids from 1), from
// the application scripts/deps.sh installs at APICURIO_VERSION. Clients
// reach it through a gate, so that a test can cut them off and let them
// back without losing what it holds.
type Registry struct {
	Version string
	port    int // the registry's own
	p       *Process
	gate    *Gate
}

// StartRegistry starts Apicurio Registry, stopped at the end of the test.
// A registry that cannot start skips the test, or fails it under CI.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	r, err := LaunchRegistry(context.Background(), nil)
	if err != nil {
		Unavailable(t, "%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("apicurio registry log (last 40 lines):\n%s", r.p.LastLines(40))
		}
		r.Close()
	})
	return r
}

// LaunchRegistry is StartRegistry for callers outside a test (walbench):
// it returns errors, and the caller ends the registry with Close. out,
// when set, gets the registry's log.
func LaunchRegistry(ctx context.Context, out io.Writer) (*Registry, error) {
	r, java, jar, err := installedRegistry()
	if err != nil {
		return nil, err
	}
	err = startOnFreePort(func(bool) error {
		port, err := PickPort()
		if err != nil {
			return err
		}
		r.port = port
		return r.start(ctx, java, jar, out)
	})
	if err != nil {
		return nil, err
	}
	if r.gate, err = NewGate("127.0.0.1:" + strconv.Itoa(r.port)); err != nil {
		r.p.Kill()
		return nil, err
	}
	return r, nil
}

// installedRegistry is the registry scripts/deps.sh installed, not
// started: its version, the java to run it with and its jar.
func installedRegistry() (r *Registry, java, jar string, err error) {
	versions, err := JavaVersions()
	if err != nil {
		return nil, "", "", err
	}
	version := versions["APICURIO_VERSION"]
	dir := filepath.Join(JavaDir(), "apicurio-registry-"+version)
	if _, err := os.Stat(filepath.Join(dir, "installed")); err != nil {
		return nil, "", "", fmt.Errorf("finding Apicurio Registry %s in %s (run scripts/deps.sh): %w", version, dir, err)
	}
	if java, err = javaBinary(); err != nil {
		return nil, "", "", err
	}
	return &Registry{Version: version}, java, filepath.Join(dir, "app", "apicurio-registry-app-"+version+"-runner.jar"), nil
}

// start runs the registry's jar on r.port and waits until it answers;
// an error portTaken knows when the port was taken before it bound it.
func (r *Registry) start(ctx context.Context, java, jar string, out io.Writer) error {
	// A small serial heap and the first JIT tier: it halves the CPU a
	// start takes on two busy cores (about 150 MB resident).
	p, err := StartProcess(ProcessConfig{Name: "apicurio-registry", Path: java, Output: out, Args: []string{
		"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
		"-Dquarkus.http.host=127.0.0.1", "-Dquarkus.http.port=" + strconv.Itoa(r.port),
		"-Dquarkus.otel.sdk.disabled=true", "-jar", jar}})
	if err != nil {
		return err
	}
	r.p = p
	if err = r.waitReady(ctx, 90*time.Second); err != nil {
		p.Kill()
		return fmt.Errorf("starting Apicurio Registry %s on 127.0.0.1:%d: %w\n%s", r.Version, r.port, err, p.LastLines(20))
	}
	return nil
}

// waitReady waits until the Confluent-compatible API answers.
func (r *Registry) waitReady(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d/apis/ccompat/v7/subjects", r.port)
	var last error
	for {
		// Each try bounded: what holds the port may take the request and
		// never answer, while the registry has exited.
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		rcancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-r.p.Done():
			// The JVM's words, or Quarkus's when it checks the port first.
			if r.p.saidPortTaken() || strings.Contains(r.p.Log(), "seems to be in use by another process") {
				return fmt.Errorf("%w: the registry exited: %s", syscall.EADDRINUSE, r.p.ExitDesc())
			}
			return fmt.Errorf("the registry exited: %s", r.p.ExitDesc())
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", url, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// URL is the registry's Confluent-compatible API, through the gate.
func (r *Registry) URL() string { return "http://" + r.gate.Addr() + "/apis/ccompat/v7" }

// NativeURL is the registry's own API, as Apicurio's converter takes it,
// through the gate.
func (r *Registry) NativeURL() string { return "http://" + r.gate.Addr() + "/apis/registry/v2" }

// String names the registry and its version.
func (r *Registry) String() string { return "Apicurio Registry " + r.Version }

// Cut refuses every connection to the registry, and ends those open,
// until Restore.
func (r *Registry) Cut() { r.gate.Close() }

// Restore lets clients reach the registry again.
func (r *Registry) Restore() error { return r.gate.Open() }

// Close stops the registry.
func (r *Registry) Close() {
	if r.gate != nil {
		r.gate.Close()
	}
	_ = r.p.Stop(syscall.SIGTERM, 10*time.Second)
}

// Gate is a loopback TCP proxy that can be closed (connections refused,
// open ones cut) and opened again on the same address.
type Gate struct {
	upstream string
	addr     string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

// NewGate listens on a free loopback port and forwards to upstream.
func NewGate(upstream string) (*Gate, error) {
	g := &Gate{upstream: upstream, conns: make(map[net.Conn]bool)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the gate to %s: %w", upstream, err)
	}
	g.addr = ln.Addr().String()
	g.serve(ln)
	return g, nil
}

// Addr is where clients connect.
func (g *Gate) Addr() string { return g.addr }

// Open listens again after Close.
func (g *Gate) Open() error {
	g.mu.Lock()
	open := g.ln != nil
	g.mu.Unlock()
	if open {
		return nil
	}
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		return fmt.Errorf("opening the gate to %s on %s: %w", g.upstream, g.addr, err)
	}
	g.serve(ln)
	return nil
}

func (g *Gate) serve(ln net.Listener) {
	g.mu.Lock()
	g.ln = ln
	g.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.forward(c)
		}
	}()
}

func (g *Gate) forward(c net.Conn) {
	up, err := net.Dial("tcp", g.upstream)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	if g.ln == nil {
		g.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	g.conns[c], g.conns[up] = true, true
	g.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	g.mu.Lock()
	delete(g.conns, c)
	delete(g.conns, up)
	g.mu.Unlock()
}

// Close refuses new connections and ends the open ones.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		c.Close()
		delete(g.conns, c)
	}
}
