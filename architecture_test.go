package walstream_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/walstream/walstream/"

// mayImport is the import column of ARCHITECTURE.md's table of packages:
// the walstream packages each library package may import. A package not
// named here nor in notLibrary fails TestImportRules until it has its row
// in both.
var mayImport = map[string][]string{
	"checkpoint":       nil,
	"decode":           nil,
	"internal/secret":  nil,
	"replication":      {"internal/secret"},
	"debezium":         {"decode"},
	"publish/format":   {"decode", "internal/secret"},
	"kafka":            {"decode", "internal/secret", "publish/format"},
	"group":            {"kafka"},
	"checkpoint/store": {"checkpoint", "kafka", "publish/format"},
	"diff":             {"kafka", "publish/format"},
	"publish":          {"checkpoint", "checkpoint/store", "decode", "kafka", "publish/format"},
	"pipeline": {"checkpoint", "checkpoint/store", "debezium", "decode", "group", "kafka", "publish", "publish/format",
		"replication"},
	"config": {"debezium", "decode", "group", "internal/secret", "kafka", "pipeline", "publish", "publish/format", "replication"},
	"cmd/walstream": {"checkpoint", "checkpoint/store", "config", "debezium", "decode", "diff", "group", "kafka", "pipeline", "publish",
		"publish/format", "replication"},
}

// notLibrary are the packages that are no part of walstream the program:
// test harnesses and suites, benchmarks, the local broker, examples. They
// import what they need.
var notLibrary = []string{"internal/testenv", "chaos", "compat", "cmd/walbench", "cmd/devbroker", "examples/"}

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
	ImportPath string
	GoFiles    []string
	Imports    []string
}

// TestImportRules keeps the rules of ARCHITECTURE.md's table of packages:
// each package imports only the walstream packages its row names, only
// the Kafka-facing ones import franz-go, and decode and checkpoint do no
// I/O. go list refuses an import cycle, which fails the test too.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := decodeList(t, out)
	for _, p := range pkgs {
		name := strings.TrimPrefix(p.ImportPath, module)
		if len(p.GoFiles) == 0 || slices.ContainsFunc(notLibrary, func(n string) bool { return name == n || strings.HasPrefix(name, n) }) {
			continue // tests only, or no library
		}
		for _, problem := range checkImports(name, p.Imports) {
			t.Error(problem)
		}
	}
}

// checkImports returns, in words, each import of the library package name
// that breaks a rule.
func checkImports(name string, imports []string) []string {
	if _, ok := mayImport[name]; !ok {
		return []string{name + " has no row in mayImport: add one, and the package's row to ARCHITECTURE.md"}
	}
	var problems []string
	for _, imp := range imports {
		imp, _, _ = strings.Cut(imp, " ") // a variant built with a profile: "path [main package]"
		if p := checkImport(name, imp); p != "" {
			problems = append(problems, p)
		}
	}
	return problems
}

// checkImport says how name importing imp breaks a rule, empty when it
// does not.
func checkImport(name, imp string) string {
	standard := !strings.Contains(strings.Split(imp, "/")[0], ".")
	switch {
	case strings.HasPrefix(imp, module):
		if dep := strings.TrimPrefix(imp, module); !slices.Contains(mayImport[name], dep) {
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

// Each rule catches what it is for, and passes the imports of today.
func TestCheckImports(t *testing.T) {
	for _, tc := range []struct {
		name    string
		imports []string
		want    string // empty: no problem
	}{
		{"decode", []string{"bytes", "fmt", "github.com/jackc/pglogrepl", "io", "unicode/utf8"}, ""},
		{"decode", []string{"github.com/twmb/franz-go/pkg/kgo"}, "decode imports github.com/twmb/franz-go/pkg/kgo: only kafka"},
		{"decode", []string{module + "checkpoint"}, "decode imports checkpoint, which its row does not name"},
		{"decode", []string{"log/slog"}, "decode imports log/slog: it does no I/O"},
		{"decode", []string{"net/http"}, "decode imports net/http: it does no I/O"},
		{"decode", []string{"github.com/jackc/pgx/v5"}, "decode imports github.com/jackc/pgx/v5: it imports no module but pglogrepl"},
		{"checkpoint", []string{"os"}, "checkpoint imports os: it does no I/O"},
		{"checkpoint", []string{"github.com/twmb/franz-go/pkg/kadm"}, "talk to Kafka"},
		{"replication", []string{module + "decode"}, "replication imports decode, which its row does not name"},
		{"replication", []string{"net", "os", "log/slog"}, ""},
		{"pipeline", []string{"github.com/twmb/franz-go/pkg/kmsg"}, "pipeline imports github.com/twmb/franz-go/pkg/kmsg"},
		{"publish", []string{module + "checkpoint/store", "github.com/twmb/franz-go/pkg/kgo"}, ""},
		{"checkpoint/store", []string{module + "publish"}, "checkpoint/store imports publish, which its row does not name"},
		{"sink", nil, "sink has no row in mayImport"},
	} {
		problems := checkImports(tc.name, tc.imports)
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s importing %v: %q, want no problem", tc.name, tc.imports, problems)
		case tc.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], tc.want)):
			t.Errorf("%s importing %v: %q, want one problem saying %q", tc.name, tc.imports, problems, tc.want)
		}
	}
}
