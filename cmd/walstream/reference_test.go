package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/pipeline"
	"github.com/walstream/walstream/publish"
)

// The configuration and metrics references in docs/ are generated, so
// that they cannot drift from the code: the settings from the settings
// table (settings, routerFlags), the metrics from the registry `walstream
// run` serves. TestReference fails when docs/ differs from what the code
// says; `make docs` rewrites the generated parts.

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
// parseCommand does.
func commandFlags() *flag.FlagSet {
	var c Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.flags(fs)
	return fs
}

// settingsReference lists the settings table: every setting but the
// outbox router's, in its order.
func settingsReference(*testing.T) string {
	fs := commandFlags()
	connect := make(map[string][]string) // flag → the Connect keys a file may use instead
	for key, name := range connectKeys {
		connect[name] = append(connect[name], code(key))
	}
	for key, s := range registrySettings {
		if s.flag != "" {
			connect[s.flag] = append(connect[s.flag], code("{key,value}.converter."+key))
		}
	}
	var b strings.Builder
	b.WriteString("| flag | environment variable | config file key | default | description |\n|---|---|---|---|---|\n")
	for _, s := range new(Config).settings() {
		file := code(s.name)
		switch {
		case s.name == "config":
			file = "(none: a file cannot name another)"
		case connect[s.name] != nil:
			slices.Sort(connect[s.name])
			file += " or " + strings.Join(connect[s.name], " or ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n",
			code("--"+s.name), code(envName(s.name)), file, code(fs.Lookup(s.name).DefValue), cell(s.usage))
	}
	return b.String()
}

// routerReference lists the outbox router settings, in the order
// Debezium documents them, then walstream's older names.
func routerReference(t *testing.T) string {
	fs := commandFlags()
	settings := make(map[string]bool)
	for _, s := range new(Config).settings() {
		settings[s.name] = true
	}
	keyOf := make(map[string]string) // flag → Debezium key
	for key, name := range routerFlagNames {
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
		usage := strings.TrimSuffix(f.Usage, " ($"+envName(name)+")")
		usage = strings.TrimSuffix(usage, " (Debezium's "+key+")")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", code("--"+name), code(envName(name)), code(key), code(f.DefValue), cell(usage))
	}
	return b.String()
}

// registrar passes collectors on to a registry and keeps them, so that
// their vectors can be given a child: a vector with none is not
// gathered.
type registrar struct {
	prometheus.Registerer
	collectors []prometheus.Collector
	gather     prometheus.Gatherer // what Registerer registers on
}

func (r *registrar) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *registrar) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

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

// metricsReference lists walstream's metrics as `walstream run` registers
// them: the pipeline's on the registry /metrics serves, and franz-go's
// client metrics (kprom), which a session's producer registers when it
// creates its Kafka client.
func metricsReference(t *testing.T) string {
	log := slog.New(slog.DiscardHandler)
	c, err := parseConfig([]string{"--pg-url", "postgres://walstream@db/app", "--kafka-brokers", "127.0.0.1:9"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// Both record the collectors inside the stream's labels, as
	// pipeline.New adds them, so that vectors get children.
	reg := newRegistry()
	rec := &registrar{Registerer: reg, gather: reg}
	pipeline.New(c.Config, log, rec)

	// The producer's client, created as a session creates it; creating a
	// client connects to nothing.
	kreg := prometheus.NewRegistry()
	krec := &registrar{Registerer: prometheus.WrapRegistererWith(c.MetricLabels(), kreg), gather: kreg}
	prod, err := publish.New(publish.Config{Kafka: c.Kafka, TransactionalID: c.TransactionalID, CheckpointTopic: c.CheckpointTopic,
		CheckpointKey: c.CheckpointKey, Slot: c.Slot, Outboxes: c.Outboxes, MaxBatchEvents: c.MaxBatchEvents, MaxBatchBytes: c.MaxBatchBytes,
		CommitTimeout: c.CommitTimeout, MaxRecordBytes: c.MaxRecordBytes, Encoding: c.Encoding, Compression: c.Compression},
		log, publish.NewMetrics(krec), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	families := make(map[string]*dto.MetricFamily)
	for _, r := range []*registrar{rec, krec} {
		r.withChildren(t)
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
	var b strings.Builder
	b.WriteString("| metric | type | labels | help |\n|---|---|---|---|\n")
	for _, name := range slices.Sorted(maps.Keys(families)) {
		mf := families[name]
		var labels []string
		if len(mf.GetMetric()) > 0 {
			for _, l := range mf.GetMetric()[0].GetLabel() {
				labels = append(labels, code(l.GetName()))
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code(name), strings.ToLower(mf.GetType().String()), strings.Join(labels, ", "), cell(mf.GetHelp()))
	}
	return b.String()
}
