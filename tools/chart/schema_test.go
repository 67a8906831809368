package chart

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

const (
	schemaFile = chartDir + "/values.schema.json"
	alertsFile = "../../deploy/prometheus/alerts.yml"
	readmeFile = chartDir + "/README.md"
	// helmDocs generates the chart's README.md from values.yaml's
	// comments and README.md.gotmpl, at a version of its own.
	helmDocs = "github.com/norwoodj/helm-docs/cmd/helm-docs@v1.14.2"
)

// TestSchema: the generated definitions of values.schema.json are
// walstream's settings as the walstream binary lists them (run --help)
// and docs/configuration.md gives their config file keys, and the alerts
// of deploy/prometheus/alerts.yml (make manifests writes them).
func TestSchema(t *testing.T) {
	bin, err := walstreamBin()
	if err != nil {
		t.Fatal(err)
	}
	help, err := exec.Command(bin, "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("walstream run --help: %v\n%s", err, help)
	}
	settings, err := ParseHelp(string(help))
	if err != nil {
		t.Fatal(err)
	}
	if len(settings) < 50 {
		t.Fatalf("ParseHelp read %d settings from walstream run --help:\n%s", len(settings), help)
	}
	configuration, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	debezium, err := os.ReadFile("../../docs/debezium.md")
	if err != nil {
		t.Fatal(err)
	}
	fileKeys, err := FileKeys(string(configuration))
	if err != nil {
		t.Fatal(err)
	}
	routerKeys, err := RouterKeys(string(configuration))
	if err != nil {
		t.Fatal(err)
	}
	defs, err := SettingsDefinitions(settings, fileKeys, routerKeys, OlderRouterKeys(string(debezium)))
	if err != nil {
		t.Fatal(err)
	}
	defs["alerts"] = AlertsDefinition(fileAlerts(t))
	generated(t, schemaFile, func(got []byte) ([]byte, error) { return WithDefinitions(got, defs) })
}

// TestReadme: the chart's README.md is what helm-docs makes of
// values.yaml's comments and README.md.gotmpl (make manifests writes it),
// and every value in its table has a description.
func TestReadme(t *testing.T) {
	chart, err := filepath.Abs(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	generated(t, readmeFile, func([]byte) ([]byte, error) {
		cmd := exec.Command("go", "run", helmDocs, "--dry-run", "--sort-values-order", "file", "--chart-search-root", chart, "--log-level", "warning")
		cmd.Dir = t.TempDir() // outside this module: go run takes helm-docs at its own version
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		// helm-docs skips a chart it cannot read with a warning, and exits 0.
		// On a machine new to helm-docs, go run says what it downloads first.
		if said := goRunSaid(stderr.String()); err != nil || said != "" || len(out) == 0 {
			t.Fatalf("helm-docs: %v\n%s", err, said)
		}
		return out, nil
	})
	b, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, l := range strings.Split(string(b), "\n") {
		cells := strings.Split(l, " | ")
		if !strings.HasPrefix(l, "| ") || len(cells) < 4 || cells[0] == "| Key" || strings.HasPrefix(l, "|-") {
			continue
		}
		rows++
		if strings.TrimSpace(strings.TrimSuffix(cells[len(cells)-1], "|")) == "" {
			t.Errorf("%s has no description: write one as a # -- comment above it in values.yaml", strings.TrimPrefix(cells[0], "| "))
		}
	}
	if rows < 50 {
		t.Errorf("README.md's values table has %d rows: not helm-docs's table", rows)
	}
	// Its links into the repository are absolute, to work where the
	// packaged chart's README is shown: each names a file and a heading
	// of it.
	links := repoLink.FindAllStringSubmatch(string(b), -1)
	if len(links) == 0 {
		t.Error("README.md links to nothing in the repository: the pattern is wrong")
	}
	for _, m := range links {
		doc, err := os.ReadFile(filepath.Join("../..", m[1]))
		if err != nil {
			t.Errorf("README.md links to %s: %v", m[0], err)
			continue
		}
		if m[2] != "" && !slices.Contains(slugs(string(doc)), m[2]) {
			t.Errorf("README.md links to %s: no heading of %s has the anchor %s", m[0], m[1], m[2])
		}
	}
}

var (
	repoLink  = regexp.MustCompile(`https://github\.com/walstream/walstream/blob/main/([^)#\s]+)(?:#([^)\s]+))?`)
	mdHeading = regexp.MustCompile("(?m)^#{1,6} +(.+?) *$")
	fence     = regexp.MustCompile("(?ms)^```.*?^```")
)

// slugs are the anchors GitHub gives a Markdown document's headings: in
// lower case, every character but letters, digits, '_', '-' and ' '
// dropped, spaces made '-'.
func slugs(doc string) []string {
	var out []string
	for _, m := range mdHeading.FindAllStringSubmatch(fence.ReplaceAllString(doc, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		out = append(out, b.String())
	}
	return out
}

// generated checks that file is what make returns from its content,
// and with -update writes that.
func generated(t *testing.T, file string, make func(got []byte) ([]byte, error)) {
	t.Helper()
	got, err := os.ReadFile(file)
	if err != nil && !(*update && os.IsNotExist(err)) {
		t.Fatal(err)
	}
	want, err := make(got)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run make manifests", file)
	}
}

// TestSettingsDefinitionsDrift: walstream's help and its docs disagreeing
// is an error naming the setting, as is a kind of flag the schema has no
// type for; the help's Debezium keys and the docs' older names are the
// router keys.
func TestSettingsDefinitionsDrift(t *testing.T) {
	help := "Usage: walstream run [flags]\n\n" +
		"  -linger duration\n    \thow long ($WALSTREAM_LINGER) (default 5ms)\n" +
		"  -payload-column value\n    \tcolumn of the record value (Debezium's table.field.event.payload) ($WALSTREAM_PAYLOAD_COLUMN)\n" +
		"  -topic-prefix string\n    \tthe prefix\n"
	settings, err := ParseHelp(help)
	if err != nil {
		t.Fatal(err)
	}
	settings = slices.Clip(settings) // each case appends its own
	fileKeys := map[string][]string{"linger": {"linger"}, "topic-prefix": {"topic-prefix", "topic.prefix"}}
	router := map[string]string{"payload-column": "table.field.event.payload"}
	defs, err := SettingsDefinitions(settings, fileKeys, router, []string{"table.field.payload"})
	if err != nil {
		t.Fatal(err)
	}
	props := defs["settings"].(map[string]any)["properties"].(map[string]any)
	for _, k := range []string{"linger", "payload-column", "topic-prefix", "topic.prefix", "outbox", "tables", "streams"} {
		if _, ok := props[k]; !ok {
			t.Errorf("settings lack %s: %v", k, slices.Sorted(maps.Keys(props)))
		}
	}
	for _, k := range []string{"table.field.event.payload", "transforms.outbox.table.field.payload", "transforms.outbox.type"} {
		matched := false
		for p := range defs["outbox"].(map[string]any)["patternProperties"].(map[string]any) {
			matched = matched || regexp.MustCompile(p).MatchString(k)
		}
		if !matched {
			t.Errorf("outbox refuses %s", k)
		}
	}
	for _, c := range []struct {
		name     string
		settings []Setting
		fileKeys map[string][]string
		want     string
	}{
		{"a flag the docs lack", append(settings, Setting{Flag: "lingerr", Kind: "duration"}), fileKeys, "--lingerr is in walstream run --help but not in docs/configuration.md's settings"},
		{"a setting the help lacks", settings, map[string][]string{"linger": {"linger"}, "topic-prefix": {"topic-prefix"}, "gone": {"gone"}}, "--gone is in docs/configuration.md's settings but not in walstream run --help"},
		{"a kind without a type", append(settings, Setting{Flag: "ratio", Kind: "float"}), fileKeys, "--ratio takes a float"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := SettingsDefinitions(c.settings, c.fileKeys, router, []string{"table.field.payload"}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want an error containing %q", err, c.want)
			}
		})
	}
}

// goRunSaid is what a command run with go run wrote to stderr, without the
// lines in which go says what it downloads.
func goRunSaid(stderr string) string {
	var kept []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if l != "" && !strings.HasPrefix(l, "go: downloading ") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

// What go run says as it downloads is not helm-docs's warning; anything
// else on stderr is.
func TestGoRunSaid(t *testing.T) {
	for stderr, want := range map[string]string{
		"": "",
		"go: downloading github.com/norwoodj/helm-docs v1.14.2\ngo: downloading helm.sh/helm/v3 v3.15.2\n": "",
		"go: downloading x v1\nlevel=warning msg=\"skipping chart\"\n":                                     `level=warning msg="skipping chart"`,
	} {
		if got := goRunSaid(stderr); got != want {
			t.Errorf("goRunSaid(%q) = %q, want %q", stderr, got, want)
		}
	}
}
