package changelog

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Section is one release's part of the changelog.
type Section struct {
	// Version is "Unreleased" or a semantic version without the v.
	Version string
	// Date is the release's day; zero for Unreleased.
	Date time.Time
	// Body is the text under the heading, trimmed.
	Body string
}

var (
	heading = regexp.MustCompile(`(?m)^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?[ \t]*$`)
	semver  = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?$`)
	linkRef = regexp.MustCompile(`(?m)^\[([^\]]+)\]: \S+$`)
)

// Parse reads the sections of a changelog and checks its shape: an
// Unreleased section first, then releases with semantic versions and
// dates, newest first, each with a link reference.
func Parse(text string) ([]Section, error) {
	ms := heading.FindAllStringSubmatchIndex(text, -1)
	if len(ms) == 0 || text[ms[0][2]:ms[0][3]] != "Unreleased" {
		return nil, errors.New("the first section is not ## [Unreleased]")
	}
	refs := make(map[string]bool)
	for _, m := range linkRef.FindAllStringSubmatch(text, -1) {
		refs[m[1]] = true
	}
	var sections []Section
	for i, m := range ms {
		end := len(text)
		if i+1 < len(ms) {
			end = ms[i+1][0]
		}
		s := Section{Version: text[m[2]:m[3]], Body: strings.TrimSpace(linkRef.ReplaceAllString(text[m[1]:end], ""))}
		if !refs[s.Version] {
			return nil, fmt.Errorf("## [%s] has no link reference [%s]: at the end", s.Version, s.Version)
		}
		if i > 0 {
			if !semver.MatchString(s.Version) {
				return nil, fmt.Errorf("## [%s]: not a semantic version (1.2.3, 1.2.3-rc.1)", s.Version)
			}
			if m[4] < 0 {
				return nil, fmt.Errorf("## [%s] has no date (## [%s] - YYYY-MM-DD)", s.Version, s.Version)
			}
			var err error
			if s.Date, err = time.Parse(time.DateOnly, text[m[4]:m[5]]); err != nil {
				return nil, fmt.Errorf("## [%s]: %w", s.Version, err)
			}
			if prev := sections[len(sections)-1]; i > 1 && s.Date.After(prev.Date) {
				return nil, fmt.Errorf("## [%s] dated %s comes after ## [%s] dated %s: newest first", s.Version, s.Date.Format(time.DateOnly), prev.Version, prev.Date.Format(time.DateOnly))
			}
			if s.Body == "" {
				return nil, fmt.Errorf("## [%s] is empty", s.Version)
			}
		}
		sections = append(sections, s)
	}
	return sections, nil
}

// Notes returns the release notes of version (v0.1.0 or 0.1.0): its
// section. A version without one is an error: a release's changes are
// written down before it is cut.
func Notes(text, version string) (string, error) {
	sections, err := Parse(text)
	if err != nil {
		return "", fmt.Errorf("reading CHANGELOG.md: %w", err)
	}
	v := strings.TrimPrefix(version, "v")
	for _, s := range sections {
		if s.Version == v {
			return fmt.Sprintf("# walstream %s (%s)\n\n%s\n", version, s.Date.Format(time.DateOnly), s.Body), nil
		}
	}
	return "", fmt.Errorf("CHANGELOG.md has no section ## [%s]: move the changes under [Unreleased] into one before tagging v%s", v, v)
}

// Snapshot returns the notes of a build that is no release: the
// Unreleased section, named for the build's version.
func Snapshot(text, version string) (string, error) {
	sections, err := Parse(text)
	if err != nil {
		return "", fmt.Errorf("reading CHANGELOG.md: %w", err)
	}
	body := sections[0].Body
	if body == "" {
		body = "No changes recorded since the last release."
	}
	return fmt.Sprintf("# walstream %s (not a release)\n\n%s\n", version, body), nil
}
