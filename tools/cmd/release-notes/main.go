package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/walstream/walstream/tools/changelog"
)

func main() {
	file := flag.String("changelog", "CHANGELOG.md", "the changelog")
	version := flag.String("version", "", "the version, as tagged (v0.1.0)")
	snapshot := flag.Bool("snapshot", false, "a build that is no release: the Unreleased section")
	flag.Parse()
	b, err := os.ReadFile(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release-notes:", err)
		os.Exit(1)
	}
	notes, err := changelog.Notes(string(b), *version)
	if *snapshot {
		notes, err = changelog.Snapshot(string(b), *version)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release-notes:", err)
		os.Exit(1)
	}
	fmt.Print(notes)
}
