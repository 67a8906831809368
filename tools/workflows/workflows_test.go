package workflows

import (
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"

	"github.com/walstream/walstream/tools/internal/build"
)

func lint(t *testing.T, files ...string) []*actionlint.Error {
	t.Helper()
	opts := &actionlint.LinterOptions{}
	// As actionlint's command: shellcheck checks the scripts when there is one.
	if sc, err := exec.LookPath("shellcheck"); err == nil {
		opts.Shellcheck = sc
	} else {
		t.Log("no shellcheck: run: scripts are not checked")
	}
	l, err := actionlint.NewLinter(io.Discard, opts)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := l.LintFiles(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return errs
}

// TestWorkflows lints every workflow of .github/workflows.
func TestWorkflows(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(build.Root, ".github/workflows/*.y*ml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no workflow in .github/workflows")
	}
	for _, e := range lint(t, files...) {
		t.Errorf("%s:%d:%d: %s [%s]", e.Filepath, e.Line, e.Column, e.Message, e.Kind)
	}
}

// TestLintFails: a workflow with a mistake in each of what actionlint
// checks fails, so that TestWorkflows passing means something.
func TestLintFails(t *testing.T) {
	errs := lint(t, filepath.Join("testdata", "broken.yml"))
	var kinds []string
	for _, e := range errs {
		kinds = append(kinds, e.Kind)
	}
	for _, want := range []string{"expression", "syntax-check"} {
		if !strings.Contains(strings.Join(kinds, " "), want) {
			t.Errorf("broken.yml: errors of kinds %q, want one of %s", kinds, want)
		}
	}
}
