package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Build says how to build a command of this module.
type Build struct {
	// Pkg is the package's import path below the module, e.g.
	// "cmd/walstream".
	Pkg  string
	Race bool
	Tags []string
}

// The builds of this process: each Build is built once, into one
// directory that Main removes.
var builds struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

// Main runs the tests of a package that builds binaries or shares
// servers (SharedBroker, StartPostgres's cluster templates), and
// afterwards closes the servers and removes the binaries and templates:
// call it from TestMain as os.Exit(testenv.Main(m)).
func Main(m *testing.M) int {
	shared.Lock()
	shared.main = true
	shared.Unlock()
	code := m.Run()
	closeShared()
	removeTemplates()
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	return code
}

// Binary builds b, once per test binary, and returns the path of the
// executable; the build fails the test.
func Binary(t testing.TB, b Build) string {
	t.Helper()
	path, err := BuildBinary(b)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BuildBinary is Binary for callers that report errors their own way.
func BuildBinary(b Build) (string, error) {
	key := fmt.Sprintf("%s race=%v tags=%s", b.Pkg, b.Race, strings.Join(b.Tags, ","))
	builds.Lock()
	defer builds.Unlock()
	if path, ok := builds.bins[key]; ok {
		return path, nil
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "walstream-bin-")
		if err != nil {
			return "", fmt.Errorf("creating the build directory: %w", err)
		}
		builds.dir, builds.bins = dir, make(map[string]string)
	}
	path := filepath.Join(builds.dir, fmt.Sprintf("%s-%d", filepath.Base(b.Pkg), len(builds.bins)))
	args := []string{"build", "-o", path}
	if b.Race {
		args = append(args, "-race")
	}
	if len(b.Tags) > 0 {
		args = append(args, "-tags", strings.Join(b.Tags, ","))
	}
	args = append(args, "github.com/walstream/walstream/"+b.Pkg)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: go %s: %w\n%s", b.Pkg, strings.Join(args, " "), err, out)
	}
	builds.bins[key] = path
	return path, nil
}
