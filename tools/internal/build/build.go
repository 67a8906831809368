package build

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Root is the walstream repository, from a package folder of this module.
const Root = "../.."

// Walstream builds cmd/walstream of the repository at root for goos and
// goarch into dir, as .goreleaser.yaml does (static, CGO off, version and
// commit stamped) but for -trimpath, which would compile every package
// again rather than share the other tests' builds, and returns the
// binary's path.
func Walstream(ctx context.Context, root, dir, goos, goarch, version, commit string) (string, error) {
	out := filepath.Join(dir, "walstream-"+goos+"-"+goarch)
	cmd := exec.CommandContext(ctx, "go", "build",
		"-ldflags", "-s -w -X main.version="+version+" -X main.commit="+commit,
		"-o", out, "./cmd/walstream")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building walstream for %s/%s: %w: %s", goos, goarch, err, stderr.Bytes())
	}
	return out, nil
}

// Host builds cmd/walstream of the repository at root for this machine
// into dir, as the repository's own tests build it (internal/testenv: no
// flags, cgo as the environment has it), so that with a build cache warm
// from them it is a link only; for tests that run walstream here and need
// no release binary.
func Host(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "walstream")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/walstream")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building walstream: %w: %s", err, stderr.Bytes())
	}
	return out, nil
}
