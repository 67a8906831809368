package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DocsBlock returns the first code block opening with fence after heading
// in docs/<file>, so that a test runs what the page shows.
func DocsBlock(t testing.TB, file, heading, fence string) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", file))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/%s has no heading %q", file, heading)
	}
	_, block, ok := strings.Cut(after, fence+"\n")
	if !ok {
		t.Fatalf("docs/%s: no %s block after %q", file, fence, heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}
