package release

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sigstore/cosign/v2/pkg/cosign"

	"github.com/walstream/walstream/tools/internal/build"
)

var full = flag.Bool("release.full", false, "TestReleaseBuild: make release in a clone of the repository's HEAD, and make verify-release on it (many minutes)")

// TestReleaseBuild runs make release on a clone of the repository's
// committed HEAD with a new key, then make verify-release (cosign's own
// commands) with its public key, which passes; with a byte flipped in an
// archive and with another key it fails, naming what. make test leaves it
// out (-release.full): TestSignVerify signs and verifies a small release
// with the same code.
func TestReleaseBuild(t *testing.T) {
	if !*full {
		t.Skip("make release takes many minutes: -release.full runs it")
	}
	ctx := context.Background()
	repo := filepath.Join(t.TempDir(), "walstream")
	run(t, "", nil, "git", "clone", "--quiet", build.Root, repo)
	// git describe names the build by the tags the clone has.
	keys := t.TempDir()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte(password), nil })
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(keys, "cosign.key"), kb.PrivateBytes)
	writeFile(t, filepath.Join(keys, "cosign.pub"), kb.PublicBytes)
	env := []string{"COSIGN_KEY=" + filepath.Join(keys, "cosign.key"), "COSIGN_PASSWORD=" + password}
	run(t, repo, env, "make", "release")
	dist := filepath.Join(repo, "dist")
	out := run(t, repo, nil, "make", "verify-release", "COSIGN_PUB="+filepath.Join(keys, "cosign.pub"))
	t.Logf("%s", lastLine(out))
	if _, err := VerifyDist(ctx, dist, kb.PublicBytes); err != nil {
		t.Error(err)
	}

	archives, _ := filepath.Glob(filepath.Join(dist, "walstream_*_linux_amd64.tar.gz"))
	if len(archives) != 1 {
		t.Fatalf("dist has %q, want one linux/amd64 archive", archives)
	}
	flipByte(t, archives[0])
	verify := func(pub string) ([]byte, error) {
		cmd := exec.Command("bash", filepath.Join(repo, "scripts/verify-release.sh"), dist)
		cmd.Env = append(os.Environ(), "COSIGN_PUB="+pub)
		return cmd.CombinedOutput()
	}
	out, err = verify(filepath.Join(keys, "cosign.pub"))
	if err == nil || !strings.Contains(string(out), filepath.Base(archives[0])+": FAILED") {
		t.Errorf("verify-release with a byte flipped in %s: %v\n%s", archives[0], err, out)
	}
	flipByte(t, archives[0])

	_, other := newKey(t)
	writeFile(t, filepath.Join(keys, "other.pub"), other)
	out, err = verify(filepath.Join(keys, "other.pub"))
	if err == nil || !strings.Contains(string(out), "SHA256SUMS.sig: SHA256SUMS is not signed with") {
		t.Errorf("verify-release with another key: %v\n%s", err, out)
	}
}

// run runs a command in dir with env added and returns its output; it
// fails the test if the command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
