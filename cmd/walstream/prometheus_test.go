package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/pipeline"
	"go.yaml.in/yaml/v3"
)

// tool returns the path of a command from Debian's prometheus package
// (scripts/deps.sh installs it). Without it the test skips, or fails
// under CI.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and %s is missing: apt-get install prometheus (scripts/deps.sh)", name)
		}
		t.Skipf("%s is missing: apt-get install prometheus (set CI=1 to make this a failure)", name)
	}
	return path
}

// TestDeployAlertRules runs promtool's syntax check and the unit tests of
// every alert (deploy/prometheus/alerts_test.yml).
func TestDeployAlertRules(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "../../deploy/prometheus/alerts.yml"},
		{"test", "rules", "../../deploy/prometheus/alerts_test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert has a unit test.
	b, err := os.ReadFile("../../deploy/prometheus/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alertRules(t) {
		if !strings.Contains(string(b), "alertname: "+r.Alert+"\n") {
			t.Errorf("alert %s has no test in alerts_test.yml", r.Alert)
		}
	}
}

type alertRule struct{ Alert, Expr, For string }

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var rules struct {
		Groups []struct{ Rules []alertRule }
	}
	b, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	var out []alertRule
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("rule %+v lacks a name or an expression", r)
			}
			out = append(out, r)
		}
	}
	if len(out) < 5 {
		t.Fatalf("%d alert rules: the file did not parse into what it holds", len(out))
	}
	return out
}

// dashboard is the part of the Grafana dashboard the tests read.
type dashboard struct {
	Inputs []struct {
		Name, Type string
		PluginID   string `json:"pluginId"`
	} `json:"__inputs"`
	Templating struct {
		List []struct {
			Name, Type string
			Query      any
		}
	}
	Panels []struct {
		Title      string
		Datasource struct{ UID string }
		Targets    []struct {
			Expr       string
			Datasource struct{ UID string }
		}
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("../../deploy/grafana/walstream-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if len(d.Panels) < 6 {
		t.Fatalf("%d panels: the dashboard did not parse into what it holds", len(d.Panels))
	}
	return d
}

// TestDashboardImportable: a datasource input as published dashboards
// have, every panel on it, and every query filtered by the slot and
// instance variables.
func TestDashboardImportable(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs %+v, want one Prometheus datasource input DS_PROMETHEUS", d.Inputs)
	}
	vars := make(map[string]string)
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	for name, typ := range map[string]string{"slot": "query", "instance": "query", "DS_PROMETHEUS": "datasource"} {
		if vars[name] != typ {
			t.Errorf("template variable %s is %q, want a %s variable", name, vars[name], typ)
		}
	}
	for _, p := range d.Panels {
		if p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: datasource %q, want ${DS_PROMETHEUS}", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("panel %q: query datasource %q, want ${DS_PROMETHEUS}", p.Title, tg.Datasource.UID)
			}
			if !strings.Contains(tg.Expr, `slot=~"$slot"`) || !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: %s does not select $slot and $instance", p.Title, tg.Expr)
			}
		}
	}
}

// threshold is a comparison with a number, which the alert tests strip to
// query the signal an alert compares: a healthy stream must have one.
var threshold = regexp.MustCompile(`\s*(==|!=|>=|<=|>|<)\s*-?[0-9][0-9.e+]*`)

// TestDeployPrometheus runs a real Prometheus, configured like the compose
// one, scraping a streaming walstream and a standby, and queries through
// its API every Grafana panel expression and every alert expression: each
// must parse and return a series. Alert expressions are queried as they
// are (they must parse) and without their thresholds (the signal must
// exist), and every rule must evaluate without error.
func TestDeployPrometheus(t *testing.T) {
	t.Parallel()
	promBin := tool(t, "prometheus")
	e := newSharedEnv(t)
	args := []string{"--http-addr", "127.0.0.1:0", "--slot-poll-interval", "200ms"}
	a := e.start(args).streaming(t)
	addrA := a.httpAddr(t)
	b := e.start(args)
	b.waitLog(t, "standby", 30*time.Second)
	addrB := b.httpAddr(t)
	seq := 0
	e.insertTx("Order", 200, 10, &seq, false)
	// A walsender terminated under walstream: a reconnect and an error of
	// kind postgres, which the errors panel and alert show.
	e.pg.Exec("postgres", "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walstream'")

	// Another producer's transaction left open on the checkpoint topic: a
	// hold, which walstream reads past, and which its metric and alert
	// name.
	testenv.OpenTransaction(t, e.broker, e.ns+"frozen", e.topic(pipeline.DefaultCheckpointTopic), "another-stream", []byte(`{}`))

	promAddr := startPrometheus(t, promBin, addrA, addrB)
	e.insertTx("Order", 200, 10, &seq, false)

	// As Grafana expands a multi-value variable: a regex alternation, its
	// backslashes escaped for a PromQL string.
	instances := strings.ReplaceAll(regexp.QuoteMeta(addrA)+"|"+regexp.QuoteMeta(addrB), `\`, `\\`)
	vars := strings.NewReplacer("$slot", "walstream", "$instance", instances, "$__rate_interval", "1m")
	type query struct{ what, expr string }
	var queries []query
	for _, p := range readDashboard(t).Panels {
		for _, tg := range p.Targets {
			queries = append(queries, query{"panel " + p.Title, vars.Replace(tg.Expr)})
		}
	}
	rules := alertRules(t)
	for _, r := range rules {
		queries = append(queries, query{"alert " + r.Alert + " signal", threshold.ReplaceAllString(r.Expr, "")})
	}

	// Alert expressions as written must parse; most return nothing on a
	// healthy stream, which is the point.
	for _, r := range rules {
		if _, err := promQuery(promAddr, r.Expr); err != nil {
			t.Errorf("alert %s: %s: %v", r.Alert, r.Expr, err)
		}
	}
	// The variables' own queries find this stream.
	testenv.Eventually(t, 60*time.Second, "the slot and instance variables list the stream", func() bool {
		slots, err1 := promLabelValues(promAddr, "slot", "walstream_streaming")
		insts, err2 := promLabelValues(promAddr, "instance", `walstream_streaming{slot=~"walstream"}`)
		return err1 == nil && err2 == nil && slices.Equal(slots, []string{"walstream"}) && len(insts) == 2
	})

	deadline := time.Now().Add(90 * time.Second)
	for _, q := range queries {
		for {
			n, err := promQuery(promAddr, q.expr)
			if err == nil && n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: %s: %d series, err %v", q.what, q.expr, n, err)
				break
			}
			time.Sleep(time.Second)
		}
	}
	t.Logf("%d panel and alert expressions returned series", len(queries))

	// The rules loaded from alerts.yml evaluate without error.
	testenv.Eventually(t, 30*time.Second, "every rule evaluated", func() bool {
		health, err := promRuleHealth(promAddr)
		if err != nil || len(health) != len(rules) {
			return false
		}
		for name, h := range health {
			if h != "ok" {
				t.Logf("rule %s: %s", name, h)
				return false
			}
		}
		return true
	})
	// A stream with one instance streaming does not alert that none is.
	if n, err := promQuery(promAddr, `ALERTS{alertname=~"WalstreamNotStreaming|WalstreamDown"}`); err != nil || n != 0 {
		t.Errorf("healthy stream: %d WalstreamNotStreaming/WalstreamDown alerts pending or firing (err %v)", n, err)
	}
}

// startPrometheus runs Prometheus with deploy/prometheus/prometheus.yml,
// its targets replaced by the given ones and its intervals shortened, and
// returns its address.
func startPrometheus(t *testing.T, bin string, targets ...string) string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Abs("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"}
	cfg["rule_files"] = []string{rules}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("prometheus.yml has %d scrape configs, want the walstream one", len(jobs))
	}
	statics, _ := jobs[0].(map[string]any)["static_configs"].([]any)
	if len(statics) != 1 {
		t.Fatalf("prometheus.yml walstream job has %d static configs, want 1", len(statics))
	}
	statics[0].(map[string]any)["targets"] = targets
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cmd := exec.Command(bin, "--config.file", cfgPath, "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", addr, "--log.level", "warn")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	testenv.Eventually(t, 30*time.Second, "prometheus ready", func() bool {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", log.String())
		default:
		}
		return httpStatus(addr, "/-/ready") == 200
	})
	return addr
}

// promQuery runs an instant query and returns the number of series.
func promQuery(addr, expr string) (int, error) {
	var r struct {
		Status, Error string
		Data          struct {
			ResultType string
			Result     json.RawMessage
		}
	}
	if err := promGet(addr, "/api/v1/query?query="+url.QueryEscape(expr), &r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s: %s", r.Status, r.Error)
	}
	if r.Data.ResultType != "vector" && r.Data.ResultType != "matrix" {
		return 1, nil // a scalar or string is one value
	}
	var series []json.RawMessage
	if err := json.Unmarshal(r.Data.Result, &series); err != nil {
		return 0, err
	}
	return len(series), nil
}

func promLabelValues(addr, label, match string) ([]string, error) {
	var r struct {
		Status string
		Data   []string
	}
	err := promGet(addr, "/api/v1/label/"+label+"/values?match[]="+url.QueryEscape(match), &r)
	slices.Sort(r.Data)
	return r.Data, err
}

// promRuleHealth returns each alert rule's health: ok, unknown (not yet
// evaluated) or err with the error.
func promRuleHealth(addr string) (map[string]string, error) {
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct{ Name, Health, LastError string }
			}
		}
	}
	if err := promGet(addr, "/api/v1/rules?type=alert", &r); err != nil {
		return nil, err
	}
	health := make(map[string]string)
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			health[rule.Name] = strings.TrimSpace(rule.Health + " " + rule.LastError)
		}
	}
	return health, nil
}

func promGet(addr, path string, into any) error {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(into)
}
