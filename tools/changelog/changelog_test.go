package changelog

import (
	"os"
	"strings"
	"testing"
)

// TestChangelog: CHANGELOG.md has the shape release notes are taken from,
// and its newest release has notes.
func TestChangelog(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	sections, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(sections) < 2 {
		t.Fatalf("CHANGELOG.md has %d sections, want Unreleased and at least 0.1.0", len(sections))
	}
	notes, err := Notes(string(b), "v"+sections[1].Version)
	if err != nil || !strings.HasPrefix(notes, "# walstream v"+sections[1].Version+" (") || !strings.Contains(notes, "### Added") {
		t.Errorf("notes of %s: %q, %v", sections[1].Version, notes, err)
	}
}

func TestParseRefuses(t *testing.T) {
	const ok = "# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-12-01\n\n- b\n\n## [0.1.0] - 2026-11-28\n\n- a\n\n[Unreleased]: u\n[0.2.0]: x\n[0.1.0]: y\n"
	if _, err := Parse(ok); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if n, err := Notes(ok, "v0.1.0"); err != nil || n != "# walstream v0.1.0 (2026-11-28)\n\n- a\n" {
		t.Errorf("Notes(v0.1.0) = %q, %v", n, err)
	}
	if n, err := Snapshot(ok, "v0.2.0-1-gabcdef0"); err != nil || !strings.Contains(n, "No changes recorded") {
		t.Errorf("Snapshot = %q, %v", n, err)
	}
	if _, err := Notes(ok, "v0.3.0"); err == nil || !strings.Contains(err.Error(), "no section ## [0.3.0]") {
		t.Errorf("Notes(v0.3.0): %v, want no section", err)
	}
	for name, bad := range map[string]string{
		"no unreleased": strings.Replace(ok, "## [Unreleased]\n", "", 1),
		"not semver":    strings.Replace(ok, "[0.2.0] - ", "[0.2] - ", 1),
		"no date":       strings.Replace(ok, "[0.2.0] - 2026-12-01", "[0.2.0]", 1),
		"oldest first":  strings.Replace(ok, "2026-12-01", "2026-11-01", 1),
		"no link":       strings.Replace(ok, "[0.2.0]: x\n", "", 1),
		"empty":         strings.Replace(ok, "- b\n", "", 1),
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
