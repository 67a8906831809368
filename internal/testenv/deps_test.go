package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// depsPlan is what scripts/deps.sh --plan says it would install.
type depsPlan struct {
	apt      []string // Debian packages
	postgres []string // Postgres majors, from npm
	java     []string // Java servers, by folder name
}

// TestDepsPlan: scripts/deps.sh installs for each target what it runs and
// nothing more. On a bare machine (no Debian Postgres, an empty PATH,
// empty server folders) the demo plans Postgres 15, its client and kcat
// only: no Java, npm or Kafka, which took most of a first make demo. On a
// machine with everything it plans nothing, and npm and Maven come only
// with what they install.
func TestDepsPlan(t *testing.T) {
	versions, err := JavaVersions()
	if err != nil {
		t.Fatal(err)
	}
	kafka := "kafka-" + versions["KAFKA_VERSION"]
	classic := "kafka-" + versions["KAFKA_CLASSIC_VERSION"]
	debezium := []string{"connect-" + versions["CONNECT_VERSION"], "debezium-postgres-" + versions["DEBEZIUM_VERSION"], "apicurio-converter-" + versions["APICURIO_VERSION"]}
	registry := "apicurio-registry-" + versions["APICURIO_VERSION"]
	pg := []string{"postgresql", "postgresql-client"}
	java := []string{"default-jre-headless", "maven"}
	cc := []string{"gcc", "libc6-dev"}

	bare := map[string]depsPlan{
		"demo":       {apt: slices.Concat(pg, []string{"kcat"})},
		"demo-kafka": {apt: slices.Concat(pg, []string{"kcat"}, java), java: []string{kafka}},
		"chaos":      {apt: slices.Concat(pg, []string{"kcat"}, cc, java), java: []string{kafka}},
		"compat":     {apt: slices.Concat(pg, []string{"kcat"}, cc, java), java: slices.Concat([]string{kafka, registry}, debezium)},
		"bench":      {apt: slices.Concat(pg, java), java: slices.Concat([]string{kafka, registry}, debezium)},
		"test": {
			apt:      slices.Concat(pg, []string{"kcat", "prometheus", "busybox", "npm", "nodejs"}, cc, java),
			postgres: []string{"14", "16", "17", "18"},
			java:     slices.Concat([]string{kafka, classic, registry}, debezium),
		},
	}
	m := newMachine(t)
	for target, want := range bare {
		m.check(target, want)
	}

	// The demo's tools there: the demo needs nothing, Kafka's demo a Java
	// runtime and Kafka, the tests no Postgres client or kcat.
	m.command("psql", "kcat")
	m.file(filepath.Join("pg15", "initdb"))
	m.check("demo", depsPlan{})
	m.check("demo-kafka", bare["demo-kafka"].without(pg...).without("kcat"))
	m.check("test", bare["test"].without(pg...).without("kcat"))

	// node without npm, as Debian's nodejs comes; then a Java runtime and
	// Kafka: Maven comes only with a server to install.
	m.command("node")
	m.check("test", bare["test"].without(pg...).without("kcat", "nodejs"))
	m.command("java")
	m.file(filepath.Join("java", kafka, "installed"))
	m.check("demo-kafka", depsPlan{})
	m.check("chaos", depsPlan{apt: cc})

	// Everything there, the majors' servers but not npm: nothing to do.
	m.command("gcc", "prometheus", "promtool", "busybox", "mvn")
	for _, major := range []string{"14", "16", "17", "18"} {
		m.file(filepath.Join("pg", major, "bin", "postgres"))
	}
	for _, name := range slices.Concat([]string{classic, registry}, debezium) {
		m.file(filepath.Join("java", name, "installed"))
	}
	for target := range bare {
		m.check(target, depsPlan{})
	}
}

// machine is a simulated machine for scripts/deps.sh: the folders it
// looks in for Postgres 15, the other majors and the Java servers, and a
// PATH of one folder, all empty until the test adds to them.
type machine struct {
	t                  *testing.T
	root, bash, script string
}

func newMachine(t *testing.T) *machine {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("scripts/deps.sh needs bash: %v", err)
	}
	mod, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	m := &machine{t: t, root: t.TempDir(), bash: bash, script: filepath.Join(mod, "scripts", "deps.sh")}
	if err := os.Mkdir(filepath.Join(m.root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	return m
}

// file makes an executable file at path under the machine's root.
func (m *machine) file(path string) {
	m.t.Helper()
	path = filepath.Join(m.root, path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		m.t.Fatal(err)
	}
}

// command puts commands on the machine's PATH.
func (m *machine) command(names ...string) {
	m.t.Helper()
	for _, n := range names {
		m.file(filepath.Join("bin", n))
	}
}

// check runs scripts/deps.sh --plan target on the machine and compares its
// plan with want, each list as a set.
func (m *machine) check(target string, want depsPlan) {
	t := m.t
	t.Helper()
	cmd := exec.Command(m.bash, m.script, "--plan", target)
	// Nothing of this machine's environment: the script's PATH holds only
	// the simulated commands, so it must plan with bash's builtins alone.
	cmd.Env = []string{
		"PATH=" + filepath.Join(m.root, "bin"),
		"PGBIN=" + filepath.Join(m.root, "pg15"),
		"PG_MAJORS_DIR=" + filepath.Join(m.root, "pg"),
		"WALSTREAM_JAVA_DIR=" + filepath.Join(m.root, "java"),
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/deps.sh --plan %s: %v: %s", target, err, out)
	}
	var got depsPlan
	for line := range strings.Lines(string(out)) {
		key, val, _ := strings.Cut(line, ":")
		list := map[string]*[]string{"apt": &got.apt, "postgres": &got.postgres, "java": &got.java}[key]
		if list == nil {
			t.Fatalf("scripts/deps.sh --plan %s: unexpected line %q in:\n%s", target, line, out)
		}
		*list = strings.Fields(val)
	}
	for _, l := range []struct {
		what      string
		got, want []string
	}{{"apt packages", got.apt, want.apt}, {"Postgres majors", got.postgres, want.postgres}, {"Java servers", got.java, want.java}} {
		g, w := slices.Sorted(slices.Values(l.got)), slices.Sorted(slices.Values(l.want))
		if !slices.Equal(g, w) {
			t.Errorf("scripts/deps.sh --plan %s: %s %q, want %q", target, l.what, g, w)
		}
	}
}

// without is the plan less the named apt packages.
func (p depsPlan) without(apt ...string) depsPlan {
	p.apt = slices.DeleteFunc(slices.Clone(p.apt), func(s string) bool { return slices.Contains(apt, s) })
	return p
}
