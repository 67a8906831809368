package chart

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHelmTestPod runs the helm test pod's command as its container
// would, with busybox's sh, wget, timeout and sleep (the image's), against a
// stand-in of the metrics Service: it passes once an instance answers 200
// on /readyz, after standbys' 503s, and fails, saying why, when none does.
func TestHelmTestPod(t *testing.T) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set and busybox is missing: apt-get install busybox (scripts/deps.sh)")
		}
		t.Skip("busybox is missing: apt-get install busybox (set CI=1 to make this a failure)")
	}
	// Only busybox's applets on PATH, as in the image.
	bin := t.TempDir()
	for _, applet := range []string{"sh", "wget", "timeout", "sleep"} {
		if err := os.Symlink(busybox, filepath.Join(bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	r := make(rendered)
	for _, o := range render(t, valuesOf("tests: {attempts: 4}")) {
		r[o.Kind] = append(r[o.Kind], o)
	}
	pod := r.testPod(t)
	if pod == nil {
		t.Fatal("no helm test pod")
	}
	c := pod.Spec.Containers[0]
	if len(c.Command) != 3 || c.Command[0] != "sh" || c.Command[1] != "-c" {
		t.Fatalf("command %q, want sh -c <script>", c.Command)
	}
	env := make(map[string]string)
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if want := "http://walstream-metrics:9187/readyz"; env["READYZ_URL"] != want || env["ATTEMPTS"] != "4" {
		t.Fatalf("environment %v, want READYZ_URL %s (the metrics Service) and ATTEMPTS 4", env, want)
	}
	for _, c2 := range []struct {
		name      string
		standbys  int // 503s before a 200
		wantErr   bool
		wantTries int64
	}{
		{"the streaming instance answers", 2, false, 3},
		{"none streams", 100, true, 4},
	} {
		t.Run(c2.name, func(t *testing.T) {
			var tries atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/readyz" || r.URL.RawQuery != "" {
					http.Error(w, "not found", http.StatusNotFound)
					return
				}
				if tries.Add(1) <= int64(c2.standbys) {
					http.Error(w, "not streaming: standby: slot \"walstream\" is held by pid 4242", http.StatusServiceUnavailable)
					return
				}
				fmt.Fprintln(w, "ok")
			}))
			defer srv.Close()
			cmd := exec.Command(filepath.Join(bin, "sh"), "-c", c.Command[2])
			cmd.Env = []string{"PATH=" + bin, "READYZ_URL=" + srv.URL + "/readyz", "ATTEMPTS=" + env["ATTEMPTS"]}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if (err != nil) != c2.wantErr {
				t.Fatalf("the test pod's command: %v, want an error %v\n%s", err, c2.wantErr, stderr.Bytes())
			}
			if got := tries.Load(); got != c2.wantTries {
				t.Errorf("%d requests, want %d", got, c2.wantTries)
			}
			if c2.wantErr && !strings.Contains(stderr.String(), "no walstream instance answered 200") {
				t.Errorf("stderr %q: want it to say no instance streams", stderr.String())
			}
		})
	}
}
