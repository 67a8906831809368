package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The report names the read-ahead of the device under a directory (its
// disk's, for a partition) and DAMON's proactive reclaim, as sysfs shows
// them; a sysfs showing neither gives no note.
func TestMemoryNote(t *testing.T) {
	dir := t.TempDir()
	id, ok := deviceOf(dir)
	if !ok {
		t.Fatalf("no device for %s", dir)
	}
	sys := t.TempDir()
	write := func(rel, v string) {
		p := filepath.Join(sys, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := memoryNote(sys, dir); got != "" {
		t.Errorf("an empty sysfs: %q, want no note", got)
	}
	// The directory is on a partition of disk vdz, whose queue holds the
	// read-ahead.
	write("devices/virtual/block/vdz/queue/read_ahead_kb", "8192")
	if err := os.MkdirAll(filepath.Join(sys, "devices/virtual/block/vdz/vdz1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(sys, "dev/block"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/virtual/block/vdz/vdz1", filepath.Join(sys, "dev/block", id)); err != nil {
		t.Fatal(err)
	}
	damon := "kernel/mm/damon/admin/kdamonds/0/"
	write(damon+"state", "on")
	write(damon+"contexts/0/schemes/0/action", "pageout")
	write(damon+"contexts/0/schemes/0/access_pattern/age/min", "12")
	write(damon+"contexts/0/monitoring_attrs/intervals/aggr_us", "5000000")
	want := "read-ahead 8192 KB on " + dir + "'s device; DAMON pages out memory untouched for 1m0s"
	if got := memoryNote(sys, dir); got != want {
		t.Errorf("memoryNote = %q, want %q", got, want)
	}
	write(damon+"state", "off")
	if got := memoryNote(sys, dir); strings.Contains(got, "DAMON") {
		t.Errorf("DAMON off: %q names it", got)
	}
}
