package notices

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/licenseclassifier/v2/assets"
)

var update = flag.Bool("update", false, "rewrite THIRD_PARTY_NOTICES")

const noticeFile = "../../THIRD_PARTY_NOTICES"

// TestNotices finds every module the walstream binary links on the
// release's platforms, fails when one is under a licence that is not
// permissive or has none the classifier knows, and when THIRD_PARTY_NOTICES
// is not what it generates (make notices rewrites it).
func TestNotices(t *testing.T) {
	c, err := NewClassifier()
	if err != nil {
		t.Fatal(err)
	}
	linked, err := Linked(context.Background(), "../..", "./cmd/walstream")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := c.Describe(linked)
	if err != nil {
		t.Fatal(err)
	}
	if err := NotPermissive(mods); err != nil {
		t.Fatal(err)
	}
	got := Notice(mods)
	if *update {
		if err := os.WriteFile(noticeFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(noticeFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("THIRD_PARTY_NOTICES is stale: the modules walstream links changed; run make notices")
	}
	t.Logf("%d modules linked, licences: %s", len(mods), summary(mods))
}

func summary(mods []Module) string {
	count := make(map[string]int)
	for _, m := range mods {
		count[strings.Join(m.Licenses, "+")]++
	}
	var parts []string
	for _, l := range Permissive {
		if count[l] > 0 {
			parts = append(parts, l+" "+strconv.Itoa(count[l]))
			delete(count, l)
		}
	}
	for l, n := range count {
		parts = append(parts, l+" "+strconv.Itoa(n))
	}
	return strings.Join(parts, ", ")
}

// TestNotPermissive: a module under the GPL, or with a licence the
// classifier does not know, or with none, fails.
func TestNotPermissive(t *testing.T) {
	c, err := NewClassifier()
	if err != nil {
		t.Fatal(err)
	}
	gpl, err := assets.ReadLicenseFile("License/GPL-3.0/license.txt")
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{"gpl": "LICENSE", "unknown": "COPYING", "none": ""}
	texts := map[string][]byte{"gpl": gpl, "unknown": []byte("You may do anything with this code on Tuesdays.\n")}
	var mods []Module
	for name, file := range dirs {
		dir := t.TempDir()
		if file != "" {
			if err := os.WriteFile(filepath.Join(dir, file), texts[name], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mods = append(mods, Module{Path: "example.com/" + name, Version: "v1.0.0", Dir: dir})
	}
	described, err := c.Describe(mods)
	if err == nil || !strings.Contains(err.Error(), "example.com/unknown v1.0.0: COPYING is no licence") || !strings.Contains(err.Error(), "example.com/none v1.0.0: no licence file") {
		t.Errorf("Describe: %v; want errors for the unknown licence and the missing one", err)
	}
	if len(described) != 1 || described[0].Path != "example.com/gpl" {
		t.Fatalf("Describe kept %+v, want the GPL module alone", described)
	}
	if err := NotPermissive(described); err == nil || !strings.Contains(err.Error(), "example.com/gpl v1.0.0 is under GPL-3.0") {
		t.Errorf("NotPermissive: %v; want the GPL module named", err)
	}
}
