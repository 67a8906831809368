package notices

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	classifier "github.com/google/licenseclassifier/v2"
	"github.com/google/licenseclassifier/v2/assets"
)

// Platforms are the GOOS/GOARCH pairs a release builds; a module linked
// on any of them is in the notice.
var Platforms = []string{"linux/amd64", "linux/arm64", "darwin/arm64"}

// Permissive are the licences (SPDX names) a linked module may have: none
// asks anything of walstream's own licence or source beyond keeping the
// notice. A module under any other fails the notice's test, and so the
// build, until a person has decided about it.
var Permissive = []string{"Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "MIT"}

// Module is one linked module and what its licence is.
type Module struct {
	Path, Version string
	// Dir is where the module's files are (the module cache).
	Dir string
	// LicenseFile is the licence's file in Dir; Licenses are the licences
	// its text matches, SPDX names, sorted.
	LicenseFile string
	Licenses    []string
	// Text is the licence file's, then any NOTICE file's.
	Text string
}

// Linked lists the modules the package pkg of the module at root links on
// each of Platforms, built as a release builds it (CGO off), sorted by
// path. The Go distribution itself comes first, as "go".
func Linked(ctx context.Context, root, pkg string) ([]Module, error) {
	byPath := make(map[string]Module)
	for _, p := range Platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-json=Module,Standard", pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("listing the packages %s links on %s: %w: %s", pkg, p, err, stderr.Bytes())
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var lp struct {
				Standard bool
				Module   *struct {
					Path, Version, Dir string
					Main               bool
					Replace            *struct{ Path, Version, Dir string }
				}
			}
			if err := dec.Decode(&lp); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("reading go list's output for %s: %w", p, err)
			}
			m := lp.Module
			switch {
			case lp.Standard:
				byPath["go"] = Module{Path: "go", Dir: goroot(ctx)}
			case m == nil || m.Main:
			case m.Replace != nil:
				byPath[m.Path] = Module{Path: m.Path, Version: m.Replace.Version, Dir: m.Replace.Dir}
			default:
				byPath[m.Path] = Module{Path: m.Path, Version: m.Version, Dir: m.Dir}
			}
		}
	}
	mods := make([]Module, 0, len(byPath))
	for _, m := range byPath {
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool {
		if (mods[i].Path == "go") != (mods[j].Path == "go") {
			return mods[i].Path == "go"
		}
		return mods[i].Path < mods[j].Path
	})
	return mods, nil
}

func goroot(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Classifier tells licences apart by their text.
type Classifier struct{ c *classifier.Classifier }

// NewClassifier loads the licence texts the classifier compares with.
func NewClassifier() (*Classifier, error) {
	c, err := assets.DefaultClassifier()
	if err != nil {
		return nil, fmt.Errorf("loading the licence classifier: %w", err)
	}
	return &Classifier{c}, nil
}

// minConfidence is how close a text must be to a known licence to be it;
// go-licenses uses the same threshold.
const minConfidence = 0.9

// Classify returns the SPDX names of the licences in text, sorted.
func (c *Classifier) Classify(text []byte) []string {
	var names []string
	for _, m := range c.c.Match(text).Matches {
		if m.MatchType == "License" && m.Confidence >= minConfidence && !slices.Contains(names, m.Name) {
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	return names
}

// licenseNames are the file names a licence is found under, most usual
// first; noticeNames those of Apache's NOTICE files.
var (
	licenseNames = []string{"LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "COPYING", "License", "license", "LICENSE-MIT"}
	noticeNames  = []string{"NOTICE", "NOTICE.txt", "NOTICE.md"}
)

// Describe finds each module's licence file, classifies it and reads its
// text and NOTICE. A module without a licence file, or whose licence is
// not recognised, is an error naming it.
func (c *Classifier) Describe(mods []Module) ([]Module, error) {
	var errs []error
	out := make([]Module, 0, len(mods))
	for _, m := range mods {
		file, text := readFirst(m.Dir, licenseNames)
		if file == "" {
			errs = append(errs, fmt.Errorf("%s %s: no licence file in %s", m.Path, m.Version, m.Dir))
			continue
		}
		m.LicenseFile, m.Licenses, m.Text = file, c.Classify(text), string(text)
		if len(m.Licenses) == 0 {
			errs = append(errs, fmt.Errorf("%s %s: %s is no licence the classifier knows", m.Path, m.Version, file))
			continue
		}
		if file, text := readFirst(m.Dir, noticeNames); file != "" {
			m.Text += "\n--- " + file + "\n\n" + string(text)
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

func readFirst(dir string, names []string) (string, []byte) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err == nil {
			return n, b
		}
	}
	return "", nil
}

// NotPermissive returns one error for each module under a licence not in
// Permissive.
func NotPermissive(mods []Module) error {
	var errs []error
	for _, m := range mods {
		for _, l := range m.Licenses {
			if !slices.Contains(Permissive, l) {
				errs = append(errs, fmt.Errorf("%s %s is under %s (%s), which is not one of the permissive licences %v", m.Path, m.Version, l, m.LicenseFile, Permissive))
			}
		}
	}
	return errors.Join(errs...)
}

// Notice is the text of THIRD_PARTY_NOTICES for mods: a list, then each
// module's licence text.
func Notice(mods []Module) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Third-party software in walstream\n\n")
	fmt.Fprintf(&b, "The walstream binaries (%s) link the Go modules\n", strings.Join(Platforms, ", "))
	fmt.Fprintf(&b, "below, each under the licence named, whose text follows the list.\n")
	fmt.Fprintf(&b, "walstream itself is under the Apache License 2.0 (LICENSE).\n")
	fmt.Fprintf(&b, "Generated by `make notices`; do not edit.\n\n")
	for _, m := range mods {
		fmt.Fprintf(&b, "%-60s %-40s %s\n", name(m), m.Version, strings.Join(m.Licenses, ", "))
	}
	for _, m := range mods {
		fmt.Fprintf(&b, "\n%s\n%s: %s, %s\n\n", strings.Repeat("=", 78), strings.TrimSpace(name(m)+" "+m.Version), strings.Join(m.Licenses, ", "), m.LicenseFile)
		b.WriteString(strings.TrimRight(m.Text, "\n"))
		b.WriteString("\n")
	}
	return b.Bytes()
}

func name(m Module) string {
	if m.Path == "go" {
		return "the Go standard library and runtime"
	}
	return m.Path
}
