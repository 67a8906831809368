package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/group"
	"github.com/walstream/walstream/pipeline"
	"github.com/walstream/walstream/publish"
)

// The configuration and metrics references in docs/ are generated, so
// that they cannot drift from the code: the settings from the settings
// table (config.Config.Settings, and the outbox router's flags), the
// metrics from the registry `walstream run` serves. TestReference fails
// when docs/ differs from what the code says; `make docs` rewrites the
// generated parts.

var updateDocs = flag.Bool("update", false, "rewrite the generated parts of docs/ (make docs)")

// regenerate is the command that rewrites the generated parts.
const regenerate = "make docs (go test ./cmd/walstream -run TestReference -update)"

// docsDir is docs/ from this package's directory.
const docsDir = "../../docs"

// generatedPart is one generated part of a document: the text between
// the lines "<!-- generated: NAME; make docs rewrites it -->" and
// "<!-- end of generated: NAME -->".
type generatedPart struct {
	file, name string
	gen        func(*testing.T) string
}

var generatedParts = []generatedPart{
	{"configuration.md", "settings", settingsReference},
	{"configuration.md", "router settings", routerReference},
	{"configuration.md", "command flags", commandsReference},
	{"metrics.md", "labels", labelsReference},
	{"metrics.md", "metrics", metricsReference},
}

func TestReference(t *testing.T) {
	docs := make(map[string]string)
	var order []string
	for _, p := range generatedParts {
		doc, ok := docs[p.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(docsDir, p.file))
			if err != nil {
				t.Fatal(err)
			}
			doc = string(b)
			order = append(order, p.file)
		}
		out, err := replacePart(doc, p.name, p.gen(t))
		if err != nil {
			t.Fatalf("docs/%s: %v", p.file, err)
		}
		docs[p.file] = out
	}
	for _, file := range order {
		path := filepath.Join(docsDir, file)
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(old) == docs[file] {
			continue
		}
		if *updateDocs {
			if err := os.WriteFile(path, []byte(docs[file]), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote docs/%s", file)
			continue
		}
		t.Errorf("docs/%s is stale: the code's settings or metrics changed; run %s", file, regenerate)
	}
}

// replacePart puts body between the markers of the named part.
func replacePart(doc, name, body string) (string, error) {
	begin := "<!-- generated: " + name + "; make docs rewrites it -->\n"
	end := "<!-- end of generated: " + name + " -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no generated part %q: want the lines %q and %q", name, strings.TrimSpace(begin), end)
	}
	return doc[:i+len(begin)] + body + doc[j:], nil
}

// cell is text for a markdown table cell: a | would end the cell, and
// <slot> would be taken for an HTML tag.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;").Replace(s)
}

// code is s as inline code in a table cell, or nothing when s is empty.
func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

// commandFlags defines every flag of `walstream run` on a FlagSet, as
// config.Parse does.
func commandFlags() *flag.FlagSet {
	var c config.Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.Flags(fs)
	return fs
}

// settingsReference lists the settings table: every setting but the
// outbox router's, in its order.
func settingsReference(*testing.T) string {
	fs := commandFlags()
	connect := make(map[string][]string) // flag → the Connect keys a file may use instead
	for key, name := range debezium.ConnectKeys {
		connect[name] = append(connect[name], code(key))
	}
	for key, s := range debezium.RegistrySettings {
		if s.Setting != "" {
			connect[s.Setting] = append(connect[s.Setting], code("{key,value}.converter."+key))
		}
	}
	var b strings.Builder
	b.WriteString("| flag | environment variable | config file key | default | description |\n|---|---|---|---|---|\n")
	for _, s := range new(config.Config).Settings() {
		file := code(s.Name)
		switch {
		case s.Name == "config":
			file = "(none: a file cannot name another)"
		case connect[s.Name] != nil:
			slices.Sort(connect[s.Name])
			file += " or " + strings.Join(connect[s.Name], " or ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n",
			code("--"+s.Name), code(config.EnvName(s.Name)), file, code(fs.Lookup(s.Name).DefValue), cell(s.Usage))
	}
	return b.String()
}

// routerReference lists the outbox router settings, in the order
// Debezium documents them, then walstream's older names.
func routerReference(t *testing.T) string {
	fs := commandFlags()
	settings := make(map[string]bool)
	for _, s := range new(config.Config).Settings() {
		settings[s.Name] = true
	}
	keyOf := make(map[string]string) // flag → Debezium key
	for key, name := range debezium.RouterSettings {
		keyOf[name] = key
	}
	rank := func(name string) int {
		i := slices.IndexFunc(decode.RouterKeys(), func(k decode.RouterKey) bool { return k.Key == keyOf[name] })
		if i < 0 {
			return len(keyOf)
		}
		return i
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !settings[f.Name] {
			names = append(names, f.Name)
		}
	})
	slices.SortStableFunc(names, func(a, b string) int { return rank(a) - rank(b) })
	var b strings.Builder
	b.WriteString("| flag | environment variable | config file key (Debezium's) | default | description |\n|---|---|---|---|---|\n")
	for _, name := range names {
		f, key := fs.Lookup(name), keyOf[name]
		if key == "" {
			t.Fatalf("flag --%s is neither in the settings table nor an outbox router setting", name)
		}
		usage := strings.TrimSuffix(f.Usage, " ($"+config.EnvName(name)+")")
		usage = strings.TrimSuffix(usage, " (Debezium's "+key+")")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", code("--"+name), code(config.EnvName(name)), code(key), code(f.DefValue), cell(usage))
	}
	return b.String()
}

// registrar passes collectors on to a registry and keeps them, so that
// their vectors can be given a child: a vector with none is not
// gathered. It keeps what each describes too: a collector may gather
// nothing until the stream has run (the slot's decoding counters).
type registrar struct {
	prometheus.Registerer
	collectors []prometheus.Collector
	described  map[string]*prometheus.Desc // by name
	gather     prometheus.Gatherer         // what Registerer registers on
}

func (r *registrar) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			if r.described == nil {
				r.described = make(map[string]*prometheus.Desc)
			}
			r.described[m[1]] = d
		}
	}
	return r.Registerer.Register(c)
}

func (r *registrar) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// fqName, descHelp and descLabels read a Desc's String(), the only way
// the client library shows its parts.
var (
	fqName     = regexp.MustCompile(`fqName: "([^"]+)"`)
	descHelp   = regexp.MustCompile(`help: "((?:[^"\\]|\\.)*)"`)
	descLabels = regexp.MustCompile(`(?:constLabels|variableLabels): \{([^}]*)\}`)
	labelName  = regexp.MustCompile(`(?:^|,)([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// withChildren gives every vector a child, trying label counts until its
// own fits.
func (r *registrar) withChildren(t *testing.T) {
	for _, c := range r.collectors {
		switch v := c.(type) {
		case *prometheus.CounterVec:
			child(t, v.GetMetricWithLabelValues)
		case *prometheus.GaugeVec:
			child(t, v.GetMetricWithLabelValues)
		case *prometheus.HistogramVec:
			child(t, v.GetMetricWithLabelValues)
		case *prometheus.SummaryVec:
			child(t, v.GetMetricWithLabelValues)
		}
	}
}

func child[M any](t *testing.T, get func(...string) (M, error)) {
	for n := range 10 {
		if _, err := get(slices.Repeat([]string{"x"}, n)...); err == nil {
			return
		}
	}
	t.Fatal("a metric vector with more than 9 labels")
}

// registries are the registries `walstream run` registers its metrics on:
// the pipeline's, which /metrics serves, and the one a session's producer
// registers franz-go's client metrics (kprom) on when it creates its
// Kafka client; nothing is gathered from them yet.
func registries(t *testing.T) (pipe, client *registrar) {
	log := slog.New(slog.DiscardHandler)
	c, err := config.Parse(config.Run, []string{"--pg-url", "postgres://walstream@db/app", "--kafka-brokers", "127.0.0.1:9"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// Both record the collectors inside the stream's labels, as
	// pipeline.New adds them, so that vectors get children.
	reg := newRegistry()
	pipe = &registrar{Registerer: reg, gather: reg}
	pipeline.New(c.Config, log, pipe)
	group.NewMetrics(pipe) // a fleet's process's

	// The producer's client, created as a session creates it; creating a
	// client connects to nothing.
	kreg := prometheus.NewRegistry()
	client = &registrar{Registerer: prometheus.WrapRegistererWith(c.MetricLabels(), kreg), gather: kreg}
	prod, err := publish.New(publish.Config{Kafka: c.Kafka, TransactionalID: c.TransactionalID, CheckpointTopic: c.CheckpointTopic,
		CheckpointKey: c.CheckpointKey, Slot: c.Slot, Outboxes: c.Outboxes, MaxBatchEvents: c.MaxBatchEvents, MaxBatchBytes: c.MaxBatchBytes,
		CommitTimeout: c.CommitTimeout, MaxRecordBytes: c.MaxRecordBytes, Encoding: c.Encoding, Compression: c.Compression},
		log, publish.NewMetrics(client), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return pipe, client
}

// walstreamFamilies gathers the walstream_ metric families of regs.
func walstreamFamilies(t *testing.T, regs ...*registrar) map[string]*dto.MetricFamily {
	families := make(map[string]*dto.MetricFamily)
	for _, r := range regs {
		mfs, err := r.gather.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if _, ok := families[mf.GetName()]; !ok && strings.HasPrefix(mf.GetName(), "walstream_") {
				families[mf.GetName()] = mf
			}
		}
	}
	return families
}

// metric is one row of the metrics reference.
type metricRow struct {
	name, typ, help string
	labels          []string
}

// metricRows are walstream's metrics as `walstream run` registers them,
// with every vector given a child, and the metrics its collectors
// describe but have no value of before the stream runs. Those are
// counters by their name's _total, as Prometheus names them; any other
// would need its type said here, and fails.
func metricRows(t *testing.T) map[string]metricRow {
	pipe, client := registries(t)
	pipe.withChildren(t)
	client.withChildren(t)
	rows := make(map[string]metricRow)
	for name, mf := range walstreamFamilies(t, pipe, client) {
		var labels []string
		if len(mf.GetMetric()) > 0 {
			for _, l := range mf.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		rows[name] = metricRow{name, strings.ToLower(mf.GetType().String()), mf.GetHelp(), labels}
	}
	for _, r := range []*registrar{pipe, client} {
		for name, d := range r.described {
			if _, ok := rows[name]; ok || !strings.HasPrefix(name, "walstream_") {
				continue
			}
			if !strings.HasSuffix(name, "_total") {
				t.Fatalf("metric %s has no value before the stream runs and is not a counter by its name: the reference cannot tell its type", name)
			}
			help, err := strconv.Unquote(`"` + descHelp.FindStringSubmatch(d.String())[1] + `"`)
			if err != nil {
				t.Fatalf("reading the help of %s from %s: %v", name, d, err)
			}
			var labels []string
			for _, m := range descLabels.FindAllStringSubmatch(d.String(), -1) {
				for _, l := range labelName.FindAllStringSubmatch(m[1], -1) {
					labels = append(labels, l[1])
				}
			}
			slices.Sort(labels)
			rows[name] = metricRow{name, "counter", help, labels}
		}
	}
	return rows
}

// metricNames are the names of every metric walstream registers.
func metricNames(t *testing.T) map[string]bool {
	names := make(map[string]bool)
	for name := range metricRows(t) {
		names[name] = true
	}
	return names
}

// metricsReference lists walstream's metrics as `walstream run` registers
// them: the pipeline's on the registry /metrics serves, and franz-go's
// client metrics (kprom), which a session's producer registers when it
// creates its Kafka client.
func metricsReference(t *testing.T) string {
	rows := metricRows(t)
	var b strings.Builder
	b.WriteString("| metric | type | labels | help |\n|---|---|---|---|\n")
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		m := rows[name]
		var labels []string
		for _, l := range m.labels {
			labels = append(labels, code(l))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code(name), m.typ, strings.Join(labels, ", "), cell(m.help))
	}
	return b.String()
}

// streamLabels are the labels every walstream series carries.
var streamLabels = []string{"stream", "slot", "database"}

// labelsReference lists the label values that have a series from the
// start, as /metrics serves them before anything happened: every error
// kind, every peer, both transaction results, every wal_status.
func labelsReference(t *testing.T) string {
	pipe, _ := registries(t)
	families := walstreamFamilies(t, pipe)
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(families)) {
		var label string
		var values []string
		for _, m := range families[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(streamLabels, l.GetName()) {
					label = l.GetName()
					values = append(values, code(l.GetValue()))
				}
			}
		}
		if label != "" {
			fmt.Fprintf(&b, "- `%s{%s}`: %s\n", name, label, strings.Join(values, ", "))
		}
	}
	return b.String()
}

// commandsReference lists each command's own flags, as its --help shows
// them: the flags that are not settings of the settings table or the
// outbox router's.
func commandsReference(t *testing.T) string {
	shared := commandFlags()
	var b strings.Builder
	b.WriteString("| command | flag | default | what |\n|---|---|---|---|\n")
	for _, cmd := range subcommands {
		for _, f := range helpFlags(t, cmd) {
			if shared.Lookup(f.name) != nil {
				continue
			}
			fmt.Fprintf(&b, "| `walstream %s` | %s | %s | %s |\n", cmd, code("--"+f.name), code(f.def), cell(f.usage))
		}
	}
	return b.String()
}

// subcommands are walstream's commands that take flags.
var subcommands = []string{"run", "init", "status", "diff", "reemit", "validate"}

// helpFlag is a flag as a command's --help lists it.
type helpFlag struct{ name, def, usage string }

// helpEntry is one flag of flag.PrintDefaults: its name and type, then its
// usage, indented, with its default last.
var (
	helpEntry   = regexp.MustCompile(`(?m)^  -(\S+)(?: \S+)?\n((?:    \t.*(?:\n|$))+)`)
	helpDefault = regexp.MustCompile(` \(default (.*)\)$`)
)

// helpFlags are the flags `walstream cmd --help` lists.
func helpFlags(t *testing.T, cmd string) []helpFlag {
	var out bytes.Buffer
	if err := run(context.Background(), []string{cmd, "--help"}, &out, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("walstream %s --help: %v\n%s", cmd, err, out.String())
	}
	var flags []helpFlag
	for _, m := range helpEntry.FindAllStringSubmatch(out.String(), -1) {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(m[2], "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(l, "    \t"))
		}
		f := helpFlag{name: m[1], usage: strings.Join(lines, " ")}
		if d := helpDefault.FindStringSubmatch(f.usage); d != nil {
			f.usage = strings.TrimSuffix(f.usage, d[0])
			f.def = d[1]
			if v, err := strconv.Unquote(d[1]); err == nil {
				f.def = v
			}
		}
		flags = append(flags, f)
	}
	if len(flags) == 0 {
		t.Fatalf("walstream %s --help lists no flag:\n%s", cmd, out.String())
	}
	return flags
}
