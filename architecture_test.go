package walstream_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/walstream/walstream"

// architecture is the document whose table of packages says what each
// package is for and which walstream packages it may import: the one
// source of both, which the tests below read.
const (
	architecture = "ARCHITECTURE.md"
	tableHeading = "## Packages and what they may import"
)

// row is one row of the table of packages.
type row struct {
	line int
	// name is the package's path in the module ("." for its root), or,
	// ending in "/", the directory of a module of its own.
	name string
	// library is false when the import column is a note in parentheses:
	// the package is no part of walstream the program (a test suite, the
	// harness, a benchmark, an example) and imports what it needs.
	library bool
	// mayImport are the walstream packages a library package may import,
	// the backquoted names of its import column; none when it says none.
	mayImport []string
}

var (
	// firstName is a row's first column: its name in backquotes, then
	// anything.
	firstName = regexp.MustCompile("^`([^`]+)`")
	// nameList is an import column that lists packages: `a`, `b`, `c`.
	nameList = regexp.MustCompile("^`[^`]+`(, `[^`]+`)*$")
	quoted   = regexp.MustCompile("`([^`]+)`")
)

// parseTable reads the table of packages under tableHeading in doc, and
// says in words what in it cannot be read.
func parseTable(doc string) (rows []row, problems []string) {
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, tableHeading)
	if start < 0 {
		return nil, []string{fmt.Sprintf("%s has no heading %q", architecture, tableHeading)}
	}
	i := start + 1
	for i < len(lines) && !strings.HasPrefix(lines[i], "|") {
		i++
	}
	for i += 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ { // past the header and its rule
		r, err := parseRow(lines[i])
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: %v", architecture, i+1, err))
			continue
		}
		r.line = i + 1
		rows = append(rows, r)
	}
	if len(rows) == 0 && len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("%s: no rows under %q", architecture, tableHeading))
	}
	return rows, problems
}

// parseRow reads one line of the table: | `name` … | job | imports |.
func parseRow(line string) (row, error) {
	cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|"), "|")
	if len(cells) != 3 {
		return row{}, fmt.Errorf("a row of %d columns, want 3 (package, job, may import): %q", len(cells), line)
	}
	first, imports := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[2])
	m := firstName.FindStringSubmatch(first)
	if m == nil {
		return row{}, fmt.Errorf("the first column does not begin with the package's name in backquotes: %q", first)
	}
	r := row{name: m[1], library: true}
	switch {
	case strings.HasPrefix(imports, "("):
		r.library = false
	case imports == "none":
	case nameList.MatchString(imports):
		for _, q := range quoted.FindAllStringSubmatch(imports, -1) {
			r.mayImport = append(r.mayImport, q[1])
		}
	default:
		return row{}, fmt.Errorf("row %s: the import column is neither none, a list of packages (`a`, `b`) nor a note in parentheses: %q", r.name, imports)
	}
	return r, nil
}

// checkTable says in words how rows differ from what exists: the packages
// of the module (as paths in it, "." for its root) and the directories of
// modules of their own (ending in "/"). Each must have exactly one row, no
// row may name anything else, and an import column names packages only.
func checkTable(rows []row, packages, modules []string) []string {
	var problems []string
	lines := make(map[string][]int)
	for _, r := range rows {
		lines[r.name] = append(lines[r.name], r.line)
	}
	for _, name := range slices.Concat(packages, modules) {
		switch n := len(lines[name]); {
		case n == 0:
			problems = append(problems, fmt.Sprintf("%s has no row in %s's table of packages: add one, with the walstream packages it may import", name, architecture))
		case n > 1:
			problems = append(problems, fmt.Sprintf("%s has %d rows in %s's table of packages (lines %v): keep one", name, n, architecture, lines[name]))
		}
	}
	for _, r := range rows {
		if !slices.Contains(packages, r.name) && !slices.Contains(modules, r.name) {
			problems = append(problems, fmt.Sprintf("%s:%d: row %s names no package of the module nor a module of its own: remove it, or name what it is", architecture, r.line, r.name))
		}
		for _, imp := range r.mayImport {
			if !slices.Contains(packages, imp) {
				problems = append(problems, fmt.Sprintf("%s:%d: row %s may import %s, which is no package of the module", architecture, r.line, r.name, imp))
			}
		}
	}
	return problems
}

// rules are the import rules the table gives: each library package's
// walstream imports; the others are absent.
type rules map[string][]string

func rulesOf(rows []row) rules {
	rs := make(rules)
	for _, r := range rows {
		if r.library {
			rs[r.name] = r.mayImport
		}
	}
	return rs
}

// readTable reads the table of ARCHITECTURE.md, failing the test when it
// cannot be read.
func readTable(t *testing.T) []row {
	t.Helper()
	b, err := os.ReadFile(architecture)
	if err != nil {
		t.Fatal(err)
	}
	rows, problems := parseTable(string(b))
	for _, p := range problems {
		t.Error(p)
	}
	if t.Failed() {
		t.FailNow()
	}
	return rows
}

// kafkaFacing are the packages that may import franz-go (kgo, kadm, kmsg
// and the rest): the Kafka clients are theirs alone.
var kafkaFacing = []string{"kafka", "publish", "publish/format", "checkpoint/store", "diff", "group"}

// pure are the packages that do no I/O and log nothing: they may import
// no package that reaches the outside world, and of the modules outside
// the standard library only pglogrepl, for LSNs and pgoutput's messages.
var pure = []string{"decode", "checkpoint"}

// worldly are the standard library's packages that reach the outside
// world: files, the network, processes, logs.
var worldly = []string{"os", "net", "syscall", "log", "io/fs", "io/ioutil", "path/filepath", "database", "crypto/tls"}

// listed is what go list says of a package.
type listed struct {
	ImportPath, Dir, Name   string
	GoFiles, IgnoredGoFiles []string
	Imports                 []string
}

// inModule is a package's path in the module, "." for its root.
func inModule(importPath string) string {
	if importPath == module {
		return "."
	}
	return strings.TrimPrefix(importPath, module+"/")
}

// goList lists the module's packages.
func goList(t *testing.T) []listed {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return decodeList(t, out)
}

// nestedModules are the directories below the module's root that hold a
// module of their own (tools/), each ending in "/".
func nestedModules(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && path != "go.mod" {
			dirs = append(dirs, filepath.ToSlash(filepath.Dir(path))+"/")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestArchitectureTable keeps ARCHITECTURE.md's table of packages to the
// packages that exist: every package go list finds, and every module of
// its own below the root, has exactly one row, and no row names anything
// else.
func TestArchitectureTable(t *testing.T) {
	rows := readTable(t)
	var packages []string
	for _, p := range goList(t) {
		packages = append(packages, inModule(p.ImportPath))
	}
	for _, p := range checkTable(rows, packages, nestedModules(t)) {
		t.Error(p)
	}
}

// TestImportRules keeps the rules of ARCHITECTURE.md's table of packages:
// each package imports only the walstream packages its row names, only
// the Kafka-facing ones import franz-go, and decode and checkpoint do no
// I/O. go list refuses an import cycle, which fails the test too.
func TestImportRules(t *testing.T) {
	rows := readTable(t)
	rs := rulesOf(rows)
	for _, p := range goList(t) {
		name := inModule(p.ImportPath)
		i := slices.IndexFunc(rows, func(r row) bool { return r.name == name })
		if len(p.GoFiles) == 0 || i >= 0 && !rows[i].library {
			continue // tests only, or no part of walstream the program
		}
		for _, problem := range rs.check(name, p.Imports) {
			t.Error(problem)
		}
	}
}

// check returns, in words, each import of the library package name that
// breaks a rule.
func (rs rules) check(name string, imports []string) []string {
	if _, ok := rs[name]; !ok {
		return []string{name + " has no row in " + architecture + "'s table of packages: add one, with the walstream packages it may import"}
	}
	var problems []string
	for _, imp := range imports {
		imp, _, _ = strings.Cut(imp, " ") // a variant built with a profile: "path [main package]"
		if p := rs.checkImport(name, imp); p != "" {
			problems = append(problems, p)
		}
	}
	return problems
}

// checkImport says how name importing imp breaks a rule, empty when it
// does not.
func (rs rules) checkImport(name, imp string) string {
	standard := !strings.Contains(strings.Split(imp, "/")[0], ".")
	switch {
	case imp == module || strings.HasPrefix(imp, module+"/"):
		if dep := inModule(imp); !slices.Contains(rs[name], dep) {
			return name + " imports " + dep + ", which its row does not name"
		}
	case strings.HasPrefix(imp, "github.com/twmb/franz-go/") && !slices.Contains(kafkaFacing, name):
		return name + " imports " + imp + ": only " + strings.Join(kafkaFacing, ", ") + " talk to Kafka"
	case !slices.Contains(pure, name):
	case standard && slices.ContainsFunc(worldly, func(w string) bool { return imp == w || strings.HasPrefix(imp, w+"/") }):
		return name + " imports " + imp + ": it does no I/O"
	case !standard && imp != "github.com/jackc/pglogrepl":
		return name + " imports " + imp + ": it imports no module but pglogrepl"
	}
	return ""
}

// decodeList reads the JSON objects go list -json writes one after another.
func decodeList(t *testing.T, out []byte) []listed {
	t.Helper()
	var pkgs []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return pkgs
		}
		if err != nil {
			t.Fatalf("reading go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

// Each rule catches what it is for, and passes the imports of today, by
// the rules ARCHITECTURE.md's table gives.
func TestCheckImports(t *testing.T) {
	rs := rulesOf(readTable(t))
	for _, tc := range []struct {
		name    string
		imports []string
		want    string // empty: no problem
	}{
		{"decode", []string{"bytes", "fmt", "github.com/jackc/pglogrepl", "io", "unicode/utf8"}, ""},
		{"decode", []string{"github.com/twmb/franz-go/pkg/kgo"}, "decode imports github.com/twmb/franz-go/pkg/kgo: only kafka"},
		{"decode", []string{module + "/checkpoint"}, "decode imports checkpoint, which its row does not name"},
		{"decode", []string{"log/slog"}, "decode imports log/slog: it does no I/O"},
		{"decode", []string{"net/http"}, "decode imports net/http: it does no I/O"},
		{"decode", []string{"github.com/jackc/pgx/v5"}, "decode imports github.com/jackc/pgx/v5: it imports no module but pglogrepl"},
		{"checkpoint", []string{"os"}, "checkpoint imports os: it does no I/O"},
		{"checkpoint", []string{"github.com/twmb/franz-go/pkg/kadm"}, "talk to Kafka"},
		{"replication", []string{module + "/decode"}, "replication imports decode, which its row does not name"},
		{"replication", []string{"net", "os", "log/slog"}, ""},
		{"pipeline", []string{"github.com/twmb/franz-go/pkg/kmsg"}, "pipeline imports github.com/twmb/franz-go/pkg/kmsg"},
		{"pipeline", []string{module + "/diff"}, "pipeline imports diff, which its row does not name"},
		{"publish", []string{module + "/checkpoint/store", "github.com/twmb/franz-go/pkg/kgo"}, ""},
		{"checkpoint/store", []string{module + "/publish"}, "checkpoint/store imports publish, which its row does not name"},
		{".", []string{module + "/pipeline"}, ". imports pipeline, which its row does not name"},
		{"sink", nil, "sink has no row in ARCHITECTURE.md's table of packages"},
	} {
		problems := rs.check(tc.name, tc.imports)
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s importing %v: %q, want no problem", tc.name, tc.imports, problems)
		case tc.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], tc.want)):
			t.Errorf("%s importing %v: %q, want one problem saying %q", tc.name, tc.imports, problems, tc.want)
		}
	}
}

// The table's reader and checker find what they are for: a row missing,
// a stale one, one twice, an import of no package, and a column that is
// none of the forms.
func TestCheckTable(t *testing.T) {
	doc := tableHeading + "\n\nIntro.\n\n" +
		"| package | job | may import (walstream packages) |\n" +
		"|---|---|---|\n" +
		"| `decode` | pure | none |\n" +
		"| `publish` (the producer) | Kafka | `decode`, `sink` |\n" +
		"| `publish` | again | `decode` |\n" +
		"| `chaos` | tests | (tests only) |\n" +
		"| `gone` | a package since removed | none |\n" +
		"| `tools/` (a module of its own) | releases | (none: it runs `go build`) |\n" +
		"\nAfter the table.\n"
	rows, problems := parseTable(doc)
	if len(problems) > 0 {
		t.Fatalf("parseTable: %q", problems)
	}
	if got, want := len(rows), 6; got != want {
		t.Fatalf("parseTable read %d rows, want %d", got, want)
	}
	if r := rows[1]; r.name != "publish" || !r.library || !slices.Equal(r.mayImport, []string{"decode", "sink"}) || r.line != 8 {
		t.Errorf("row %+v, want publish, a library, may import decode and sink, at line 8", r)
	}
	if r := rows[3]; r.name != "chaos" || r.library {
		t.Errorf("row %+v, want chaos, no library", r)
	}
	got := checkTable(rows, []string{"decode", "publish", "chaos", "checkpoint"}, []string{"tools/"})
	want := []string{
		"publish has 2 rows in ARCHITECTURE.md's table of packages (lines [8 9]): keep one",
		"checkpoint has no row in ARCHITECTURE.md's table of packages",
		"row publish may import sink, which is no package of the module",
		"row gone names no package of the module nor a module of its own",
	}
	if len(got) != len(want) {
		t.Errorf("checkTable: %q, want %d problems", got, len(want))
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
			t.Errorf("checkTable: %q, want one saying %q", got, w)
		}
	}

	for _, bad := range []string{
		"| `decode` | pure |\n",                              // a column missing
		"| decode | pure | none |\n",                         // no name in backquotes
		"| `config` | settings | `pipeline`, the others |\n", // an import column of prose
	} {
		_, problems := parseTable(tableHeading + "\n\n| package | job | may import |\n|---|---|---|\n" + bad)
		if len(problems) != 1 {
			t.Errorf("parseTable(%q): %q, want one problem", bad, problems)
		}
	}
}

// declarations are the names the module's packages declare, outside
// their tests.
type declarations struct {
	// top are each package's top-level names, by package name.
	top map[string]map[string]bool
	// members are the fields and methods of each type name, whatever the
	// package that declares it.
	members map[string]map[string]bool
	// dirs are the packages' directories.
	dirs []string
}

// declare reads the declarations of pkgs, but for commands' and the
// root's, which no document names as package.Name.
func declare(t *testing.T, pkgs []listed) declarations {
	t.Helper()
	d := declarations{top: make(map[string]map[string]bool), members: make(map[string]map[string]bool)}
	member := func(typ, name string) {
		if d.members[typ] == nil {
			d.members[typ] = make(map[string]bool)
		}
		d.members[typ][name] = true
	}
	fset := token.NewFileSet()
	for _, p := range pkgs {
		d.dirs = append(d.dirs, p.Dir)
		top := make(map[string]bool)
		if p.Name != "main" && p.ImportPath != module {
			d.top[p.Name] = top
		}
		for _, name := range slices.Concat(p.GoFiles, p.IgnoredGoFiles) {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range f.Decls {
				switch decl := decl.(type) {
				case *ast.FuncDecl:
					if decl.Recv == nil {
						top[decl.Name.Name] = true
						continue
					}
					recv := decl.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					if index, ok := recv.(*ast.IndexExpr); ok {
						recv = index.X
					}
					if id, ok := recv.(*ast.Ident); ok {
						member(id.Name, decl.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range decl.Specs {
						switch spec := spec.(type) {
						case *ast.ValueSpec:
							for _, n := range spec.Names {
								top[n.Name] = true
							}
						case *ast.TypeSpec:
							top[spec.Name.Name] = true
							var fields *ast.FieldList
							switch typ := spec.Type.(type) {
							case *ast.StructType:
								fields = typ.Fields
							case *ast.InterfaceType:
								fields = typ.Methods
							}
							for _, field := range fieldsOf(fields) {
								for _, n := range field.Names {
									member(spec.Name.Name, n.Name)
								}
								if len(field.Names) == 0 { // embedded: its name is its type's
									typ := field.Type
									if star, ok := typ.(*ast.StarExpr); ok {
										typ = star.X
									}
									switch typ := typ.(type) {
									case *ast.Ident:
										member(spec.Name.Name, typ.Name)
									case *ast.SelectorExpr:
										member(spec.Name.Name, typ.Sel.Name)
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return d
}

func fieldsOf(l *ast.FieldList) []*ast.Field {
	if l == nil {
		return nil
	}
	return l.List
}

var (
	// goFile is a Go file's path in backquotes: its directory, or only
	// its name when the text says the package.
	goFile = regexp.MustCompile(`^[A-Za-z0-9_./-]+\.go$`)
	// dotted is a name in backquotes such as pkg.Name, Type.Member or
	// pkg.Type.Member.
	dotted = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$`)
)

// check says what code, a text in backquotes, names that does not exist:
// a Go file, a package's declaration (pkg.Name), a field or method of a
// type (Type.Member, pkg.Type.Member); empty when it exists, or when code
// is none of those (a flag, a setting, a header's name).
func (d declarations) check(code string) string {
	switch {
	case goFile.MatchString(code) && strings.Contains(code, "/"):
		if _, err := os.Stat(code); err != nil {
			return fmt.Sprintf("names %s, which does not exist", code)
		}
	case goFile.MatchString(code):
		if !slices.ContainsFunc(d.dirs, func(dir string) bool { _, err := os.Stat(filepath.Join(dir, code)); return err == nil }) {
			return fmt.Sprintf("names %s, which no package has", code)
		}
	case dotted.MatchString(code):
		parts := strings.Split(code, ".")
		if top, ok := d.top[parts[0]]; ok {
			if !top[parts[1]] {
				return fmt.Sprintf("names %s, which package %s does not declare", code, parts[0])
			}
			parts = parts[1:]
		} else if d.members[parts[0]] == nil {
			return "" // neither a package nor a type: a header's name, a file's
		}
		if len(parts) > 1 && !d.members[parts[0]][parts[1]] {
			return fmt.Sprintf("names %s: %s has no field or method %s", code, parts[0], parts[1])
		}
	}
	return ""
}

// TestArchitectureNames keeps the files and the declarations
// ARCHITECTURE.md names in backquotes to those that exist, so that the
// walks through the packages stay traceable.
func TestArchitectureNames(t *testing.T) {
	b, err := os.ReadFile(architecture)
	if err != nil {
		t.Fatal(err)
	}
	d := declare(t, goList(t))
	for i, line := range strings.Split(string(b), "\n") {
		for _, m := range quoted.FindAllStringSubmatch(line, -1) {
			if p := d.check(m[1]); p != "" {
				t.Errorf("%s:%d: %s", architecture, i+1, p)
			}
		}
	}
}

// The checker of names finds what it is for: a declaration, a member and
// a file that do not exist, and passes what does or is no name.
func TestCheckNames(t *testing.T) {
	d := declarations{
		top:     map[string]map[string]bool{"decode": {"Decoder": true, "Config": true, "New": true}},
		members: map[string]map[string]bool{"Decoder": {"Decode": true}, "Config": {"Skip": true}},
		dirs:    []string{"decode"},
	}
	for _, tc := range []struct {
		code, want string // want empty: no problem
	}{
		{"decode.Decoder", ""},
		{"decode.Config.Skip", ""},
		{"Decoder.Decode", ""},
		{"decode/decode.go", ""},
		{"decode.go", ""},
		{"walstream.reemit", ""},
		{"--fleet", ""},
		{"decode.Gone", "which package decode does not declare"},
		{"decode.Config.Gone", "Config has no field or method Gone"},
		{"decode.New.Field", "New has no field or method Field"},
		{"Decoder.decode", "Decoder has no field or method decode"},
		{"decode/gone.go", "decode/gone.go, which does not exist"},
		{"gone.go", "gone.go, which no package has"},
	} {
		if got := d.check(tc.code); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("check(%q) = %q, want %q", tc.code, got, tc.want)
		}
	}
}
