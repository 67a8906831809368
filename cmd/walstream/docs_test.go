package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/walstream/walstream/config"
)

// TestDocs checks README.md, ARCHITECTURE.md and every file in docs/ for
// what can be checked without a reader:
//
//   - every relative link resolves to a file or directory of the
//     repository, and every #anchor to a heading of the document it
//     names, by GitHub's rules for heading anchors (so do the links of
//     examples/inbox/README.md);
//   - every --flag named is a flag of a walstream command (run's
//     settings, the outbox router's, init's, status's and reemit's own, --help and
//     --version), except in a command line of another program: a code
//     span or a line of a code block whose program, after any VAR=value
//     words, is one of otherPrograms;
//   - every -flag on a command line of walbench (`go run ./cmd/walbench`,
//     `walbench`) or devbroker (`bin/devbroker`, `devbroker`) is one of
//     that program's flags, read from its source: they take Go's
//     single-dash flags;
//   - every WALSTREAM_ variable named is a flag's environment variable,
//     one of envOnly, or one the test harness or the scripts read (named
//     in internal/testenv or scripts/);
//   - README.md stays a landing page, at most readmeMaxLines long;
//   - every walstream_ metric named is one walstream registers (a name
//     ending in _* one that begins some), but for notMetrics;
//   - every "README, Words" pointer in docs/ begins a heading of README.md;
//   - what they say Docker Compose runs (Postgres N, Apache Kafka X.Y) is
//     what docker-compose.yml runs.
//
// It also checks the pointers into docs/ that code, scripts, deploy/ and
// ARCHITECTURE.md give ("see docs/postgres.md, Phantom events"): the file
// exists, and the words after it begin a heading of it, or a heading
// begins them.
func TestDocs(t *testing.T) {
	root := "../.."
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "ARCHITECTURE.md"), filepath.Join(root, "examples/inbox/README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	files = append(files, docs...)
	flags, env := walstreamFlags(t)
	for _, dir := range []string{"internal/testenv/*.go", "scripts/*.sh"} {
		srcs, err := filepath.Glob(filepath.Join(root, dir))
		if err != nil || len(srcs) == 0 {
			t.Fatalf("no %s: %v", dir, err)
		}
		for _, src := range srcs {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range envVar.FindAllString(string(b), -1) {
				env[v] = true
			}
		}
	}
	progFlags := map[string]map[string]bool{
		"walbench":  sourceFlags(t, filepath.Join(root, "cmd/walbench")),
		"devbroker": sourceFlags(t, filepath.Join(root, "cmd/devbroker")),
	}
	metrics := metricNames(t)
	compose := composeVersions(t, root)
	anchors := make(map[string]map[string]bool) // by clean path
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		name, _ := filepath.Rel(root, f)
		for _, l := range links(doc) {
			if err := checkLink(root, f, l, anchors); err != nil {
				t.Errorf("%s: link %q: %v", name, l, err)
			}
		}
		if strings.HasPrefix(name, "examples") {
			continue // the inbox's own flags
		}
		for _, c := range commandContexts(doc) {
			prog := program(c)
			if !otherPrograms[prog] {
				for _, m := range doubleDash.FindAllStringSubmatch(c, -1) {
					if !flags[m[1]] {
						t.Errorf("%s: --%s is not a flag of walstream (in %q)", name, m[1], oneLine(c))
					}
				}
			}
			if known := progFlags[prog]; known != nil {
				for _, m := range singleDash.FindAllStringSubmatch(c, -1) {
					if !known[m[1]] {
						t.Errorf("%s: -%s is not a flag of %s (in %q)", name, m[1], prog, oneLine(c))
					}
				}
			}
		}
		for _, m := range doubleDash.FindAllStringSubmatch(prose(doc), -1) {
			if !flags[m[1]] {
				t.Errorf("%s: --%s is not a flag of walstream", name, m[1])
			}
		}
		for _, v := range envVar.FindAllString(doc, -1) {
			if !env[v] {
				t.Errorf("%s: %s is not a walstream environment variable", name, v)
			}
		}
		for _, m := range metricName.FindAllString(doc, -1) {
			if err := knownMetric(m, metrics); err != nil {
				t.Errorf("%s: %s %v", name, m, err)
			}
		}
		for _, m := range readmePointer.FindAllStringSubmatch(doc, -1) {
			if !startsAHeading(t, filepath.Join(root, "README.md"), m[1]) {
				t.Errorf("%s: %q: no heading of README.md begins %q; link to the section of docs/ that says it", name, m[0], m[1])
			}
		}
		for _, m := range composeClaim.FindAllStringSubmatch(doc, -1) {
			if got := (composeVersion{m[1], m[2]}); got != compose {
				t.Errorf("%s: says Docker Compose runs Postgres %s and Apache Kafka %s; docker-compose.yml runs Postgres %s and Apache Kafka %s",
					name, got.postgres, got.kafka, compose.postgres, compose.kafka)
			}
		}
		if name == "README.md" {
			if n := strings.Count(doc, "\n"); n > readmeMaxLines {
				t.Errorf("README.md has %d lines; it is a landing page of at most %d: move the rest into docs/", n, readmeMaxLines)
			}
		}
	}
	checkPointers(t, root, anchors)
}

// readmeMaxLines is how long README.md may grow.
const readmeMaxLines = 200

var (
	// metricName is a walstream metric's name, or the beginning of some
	// ending in _*. A name goes on with a letter after walstream_: a
	// release's files (walstream_0.1.0_linux_amd64.tar.gz) are no metric.
	metricName = regexp.MustCompile(`\bwalstream_[a-z][a-z0-9_]*[a-z0-9](?:_\*)?`)
	// readmePointer is a pointer to a section of README.md in words.
	readmePointer = regexp.MustCompile(`\bREADME(?:\.md)?,\s+([A-Z][A-Za-z ]+)`)
	// composeClaim is what a document says Docker Compose runs.
	composeClaim = regexp.MustCompile(`docker compose up[^\n]*\n?[^\n]*?runs Postgres (\d+), Apache Kafka (\d+\.\d+)`)
)

// notMetrics are walstream_ names in the docs that are no metric: a
// publication, a slot, a build tag.
var notMetrics = map[string]bool{"walstream_outbox": true, "walstream_shadow": true, "walstream_faults": true}

// knownMetric says why name is not a metric walstream registers, nil when
// it is one, a histogram's series of one, or a name of notMetrics.
func knownMetric(name string, metrics map[string]bool) error {
	if prefix, ok := strings.CutSuffix(name, "*"); ok {
		for m := range metrics {
			if strings.HasPrefix(m, prefix) {
				return nil
			}
		}
		return errors.New("begins no metric walstream registers")
	}
	if metrics[name] || notMetrics[name] {
		return nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && metrics[base] {
			return nil
		}
	}
	return errors.New("is not a metric walstream registers (docs/metrics.md lists them)")
}

// composeVersion is the Postgres major and Apache Kafka release
// docker-compose.yml runs.
type composeVersion struct{ postgres, kafka string }

// composeVersions reads the images of docker-compose.yml.
func composeVersions(t *testing.T, root string) composeVersion {
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	pg := regexp.MustCompile(`(?m)^\s*image: postgres:(\d+)`).FindSubmatch(b)
	kafka := regexp.MustCompile(`(?m)^\s*image: apache/kafka:(\d+\.\d+)`).FindSubmatch(b)
	if pg == nil || kafka == nil {
		t.Fatal("docker-compose.yml runs no postgres:N or apache/kafka:X.Y image: the pattern is wrong")
	}
	return composeVersion{string(pg[1]), string(kafka[1])}
}

// otherPrograms are programs whose --flags are their own, not walstream's.
var otherPrograms = map[string]bool{
	"docker": true, "kubectl": true, "psql": true, "pg_recvlogical": true, "kcat": true, "curl": true,
	"kafka-configs.sh": true, "kafka-reassign-partitions.sh": true, "kafka-console-consumer.sh": true,
	"kafka-acls.sh": true, "kafka-topics.sh": true, "kafka-transactions.sh": true, "perf": true, "git": true, "aws": true,
	"helm": true, "podman": true, "skopeo": true, "sha256sum": true, "deps.sh": true, "cosign": true, "gh": true,
}

// envOnly are walstream's environment variables without a flag.
var envOnly = []string{config.EnvKafkaSASLPassword, config.EnvKafkaOAuthClientSecret, config.EnvRegistryPassword, config.EnvRegistryToken, "WALSTREAM_CRASH_AT"}

var (
	doubleDash = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]*)`)
	singleDash = regexp.MustCompile(`(?:^|\s)-([a-z][a-z0-9.-]*)`)
	envVar     = regexp.MustCompile(`\bWALSTREAM_[A-Z0-9_]*[A-Z0-9]\b`)
	fence      = regexp.MustCompile("(?ms)^[ \t]*(```|~~~)[^\n]*\n.*?^[ \t]*```[ \t]*$")
	codeSpan   = regexp.MustCompile("`([^`]+)`")
	heading    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`(?m)^\s*\[[^\]]+\]:\s*(\S+)`)
	mdLink     = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// walstreamFlags are the flags every walstream command defines, read from
// their --help, and the environment variables they read.
func walstreamFlags(t *testing.T) (flags, env map[string]bool) {
	flags = map[string]bool{"help": true, "version": true}
	env = make(map[string]bool)
	for _, v := range envOnly {
		env[v] = true
	}
	for _, cmd := range subcommands {
		for _, f := range helpFlags(t, cmd) {
			flags[f.name] = true
			env[config.EnvName(f.name)] = true
		}
	}
	return flags, env
}

// sourceFlags are the flags a command defines with the flag package, read
// from its source: the name of every fs.String("name", ...),
// fs.StringVar(&v, "name", ...) and the like.
func sourceFlags(t *testing.T, dir string) map[string]bool {
	flags := map[string]bool{"h": true, "help": true}
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			arg := -1
			switch sel.Sel.Name {
			case "String", "Int", "Int64", "Uint", "Bool", "Duration", "Float64":
				arg = 0
			case "StringVar", "IntVar", "Int64Var", "UintVar", "BoolVar", "DurationVar", "Float64Var", "Var", "Func":
				arg = 1
			}
			if arg >= 0 && len(call.Args) > arg {
				if lit, ok := call.Args[arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if name, err := strconv.Unquote(lit.Value); err == nil {
						flags[name] = true
					}
				}
			}
			return true
		})
	}
	if len(flags) < 3 {
		t.Fatalf("no flags found in %s", dir)
	}
	return flags
}

// commandContexts are the places a command line may stand: each line of a
// code block and each code span.
func commandContexts(doc string) []string {
	var out []string
	for _, block := range fence.FindAllString(doc, -1) {
		lines := strings.Split(block, "\n")
		out = append(out, lines[1:len(lines)-1]...)
	}
	for _, m := range codeSpan.FindAllStringSubmatch(fence.ReplaceAllString(doc, ""), -1) {
		out = append(out, m[1])
	}
	return out
}

// prose is doc without its code.
func prose(doc string) string {
	return codeSpan.ReplaceAllString(fence.ReplaceAllString(doc, ""), "")
}

// program is the program a command line runs: its first word after any
// VAR=value words, without its directory; walbench for `go run
// ./cmd/walbench`.
func program(line string) string {
	words := strings.Fields(line)
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		words = words[1:]
	}
	if len(words) == 0 {
		return ""
	}
	if words[0] == "go" && len(words) > 2 && words[1] == "run" {
		return filepath.Base(words[2])
	}
	return filepath.Base(words[0])
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// links are the targets of doc's inline and reference links, outside code.
func links(doc string) []string {
	text := prose(doc)
	var out []string
	for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	for _, m := range refLink.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// checkLink resolves a link of the document at path from.
func checkLink(root, from, link string, anchors map[string]map[string]bool) error {
	if regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`).MatchString(link) {
		return nil // a URL
	}
	target, anchor, _ := strings.Cut(link, "#")
	path := from
	if target != "" {
		path = filepath.Join(filepath.Dir(from), target)
		if rel, err := filepath.Rel(root, path); err != nil || strings.HasPrefix(rel, "..") {
			return errors.New("leaves the repository")
		}
		if _, err := os.Stat(path); err != nil {
			return errors.New("no such file or directory")
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(path, ".md") {
		return errors.New("an anchor into a file that is not markdown")
	}
	a, err := anchorsOf(path, anchors)
	if err != nil {
		return err
	}
	if !a[anchor] {
		return fmt.Errorf("no heading of %s has anchor #%s", filepath.Base(path), anchor)
	}
	return nil
}

// anchorsOf are the anchors GitHub gives the headings of a markdown file.
func anchorsOf(path string, cache map[string]map[string]bool) (map[string]bool, error) {
	path = filepath.Clean(path)
	if a, ok := cache[path]; ok {
		return a, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	a := make(map[string]bool)
	seen := make(map[string]int)
	for _, h := range headings(string(b)) {
		slug := slugify(h)
		if n := seen[slug]; n > 0 {
			a[slug+"-"+strconv.Itoa(n)] = true
		} else {
			a[slug] = true
		}
		seen[slug]++
	}
	cache[path] = a
	return a, nil
}

// headings are the text of a markdown document's ATX headings, outside
// code blocks, as rendered: links are their text, code spans their code.
func headings(doc string) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(doc, ""), -1) {
		h := mdLink.ReplaceAllString(m[1], "$1")
		out = append(out, strings.NewReplacer("`", "", "**", "", "*", "").Replace(h))
	}
	return out
}

// slugify is GitHub's anchor of a heading: lower case, every character
// but letters, marks, digits, '_', '-' and ' ' dropped, spaces made '-'.
func slugify(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsMark(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// pointer is a reference to docs/ in code: "docs/postgres.md, Phantom
// events".
var pointer = regexp.MustCompile(`docs/([a-z0-9-]+\.md)(?:,[ ]"?([A-Za-z][^);"\n]*))?`)

// checkPointers checks every pointer into docs/ that the module's code,
// scripts, deploy/ files and ARCHITECTURE.md give.
func checkPointers(t *testing.T, root string, anchors map[string]map[string]bool) {
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "bench" || name == "bin" || name == "docs" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".yml", ".yaml", ".sh":
		default:
			if name != "Makefile" && name != "Dockerfile" && name != "ARCHITECTURE.md" {
				return nil
			}
		}
		if name == "docs_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range pointer.FindAllStringSubmatch(string(b), -1) {
			n++
			doc := filepath.Join(root, "docs", m[1])
			if _, err := os.Stat(doc); err != nil {
				t.Errorf("%s names docs/%s, which does not exist", rel, m[1])
				continue
			}
			if m[2] == "" {
				continue
			}
			if !startsAHeading(t, doc, m[2]) {
				t.Errorf("%s: %q: no heading of docs/%s begins %q, nor is one its beginning", rel, m[0], m[1], strings.TrimSpace(m[2]))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("found no pointer into docs/ in the code: the pattern is wrong")
	}
}

// startsAHeading reports whether words begin a heading of doc, or a
// heading begins them, ignoring case.
func startsAHeading(t *testing.T, doc, words string) bool {
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	w := strings.ToLower(strings.TrimSpace(words))
	return slices.ContainsFunc(headings(string(b)), func(h string) bool {
		h = strings.ToLower(h)
		return strings.HasPrefix(h, w) || strings.HasPrefix(w, h)
	})
}
