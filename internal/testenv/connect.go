package testenv

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ConnectMode is how Kafka Connect runs Debezium.
type ConnectMode int

// The two ways Debezium users deploy the connector.
const (
	// ConnectStandalone is ConnectStandalone: one worker, source offsets
	// in a local file, the producer idempotent with acks=all (both set by
	// the harness; Connect's default producer is neither). Records reach
	// Kafka at least once.
	ConnectStandalone ConnectMode = iota
	// ConnectDistributed is ConnectDistributed with one worker and
	// exactly.once.source.support=enabled: offsets in a topic, written in
	// the Kafka transaction of the records they follow. Connectors meant
	// for it ask for exactly.once.support=required (DebeziumConnector does).
	ConnectDistributed
)

func (m ConnectMode) String() string {
	if m == ConnectDistributed {
		return "distributed, exactly-once"
	}
	return "standalone"
}

// ConnectConfig says which Kafka Connect worker LaunchConnect starts.
type ConnectConfig struct {
	Mode ConnectMode
	// Kafka is the bootstrap address list of the cluster the worker
	// writes to.
	Kafka string
	// Props are worker properties that override the harness's, e.g.
	// "offset.flush.interval.ms": "60000" (Connect's default; the harness
	// flushes every second so that tests see offsets soon).
	Props map[string]string
	// Heap is the JVM's -Xmx; 512m when empty.
	Heap string
	// JVM are the JVM's flags besides the heap; when nil the serial
	// collector and only the quick first JIT tier (C1), which start the
	// worker two to three times faster on a busy two-core machine and keep
	// it near 200 MB, and the worker's class data archive (classArchive).
	// A benchmark passes what connect-distributed.sh uses.
	JVM []string
	// Output, when set, gets the worker's log.
	Output io.Writer
	// port is the REST listener's port to try first, one picked when
	// zero: the harness's own test takes one that is in use.
	port int
}

// connectJVM are a worker's JVM flags by default: the serial collector
// and only the quick first JIT tier (C1), which start the worker two to
// three times faster on a busy two-core machine and keep it near 200 MB.
var connectJVM = []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}

// trainConnect starts a standalone worker writing to kafka with the JVM
// flag dump and stops it cleanly, so that its JVM writes the class data
// archive (classArchive) of the worker and its plugins.
func trainConnect(ctx context.Context, kafka, dump string) error {
	c, err := LaunchConnect(ctx, ConnectConfig{Kafka: kafka, JVM: append(slices.Clip(connectJVM), dump)})
	if err != nil {
		return err
	}
	defer c.Close()
	c.Stop(syscall.SIGTERM)
	return nil
}

// Connect is a Kafka Connect worker with Debezium's Postgres connector
// and Apicurio's AvroConverter installed, as a JVM child process on
// loopback, installed by scripts/deps.sh at the versions of
// scripts/java/versions.env. Its data (the offsets file, its configs) stay
// in Dir across Stop and Start.
type Connect struct {
	Version  string // Kafka Connect's release
	Debezium string // Debezium's release
	Apicurio string // the AvroConverter's release
	Dir      string
	Port     int // the REST listener's
	Mode     ConnectMode
	java     []string // the command line, less the worker properties
	out      io.Writer
	http     *http.Client

	mu         sync.Mutex
	p          *Process
	connectors map[string]map[string]string // created by this harness, by name
}

// StartConnect starts a Kafka Connect worker, killed and removed at the
// end of the test. A worker that cannot start skips the test, or fails it
// under CI.
func StartConnect(t testing.TB, cfg ConnectConfig) *Connect {
	t.Helper()
	c, err := LaunchConnect(context.Background(), cfg)
	if err != nil {
		Unavailable(t, "%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafka connect log (last 60 lines):\n%s", c.LastLines(60))
		}
		c.Close()
	})
	return c
}

// LaunchConnect is StartConnect for callers outside a test (walbench): it
// returns errors, and the caller ends the worker with Close.
func LaunchConnect(ctx context.Context, cfg ConnectConfig) (*Connect, error) {
	versions, err := JavaVersions()
	if err != nil {
		return nil, err
	}
	c := &Connect{Version: versions["CONNECT_VERSION"], Debezium: versions["DEBEZIUM_VERSION"], Apicurio: versions["APICURIO_VERSION"],
		Mode: cfg.Mode, Port: cfg.port, out: cfg.Output, http: &http.Client{Timeout: 30 * time.Second}, connectors: make(map[string]map[string]string)}
	libs := filepath.Join(JavaDir(), "connect-"+c.Version)
	plugins := filepath.Join(JavaDir(), "debezium-postgres-"+c.Debezium)
	converter := filepath.Join(JavaDir(), "apicurio-converter-"+c.Apicurio)
	for _, d := range []string{libs, plugins, converter} {
		if _, err := os.Stat(filepath.Join(d, "installed")); err != nil {
			return nil, fmt.Errorf("finding Kafka Connect %s with Debezium %s and Apicurio's AvroConverter %s in %s (run scripts/deps.sh): %w",
				c.Version, c.Debezium, c.Apicurio, d, err)
		}
	}
	java, err := javaBinary()
	if err != nil {
		return nil, err
	}
	if c.Dir, err = os.MkdirTemp("", "walstream-connect-"); err != nil {
		return nil, fmt.Errorf("creating the Kafka Connect directory: %w", err)
	}
	heap := cfg.Heap
	if heap == "" {
		heap = "512m"
	}
	jvm := cfg.JVM
	cp := filepath.Join(libs, "libs") + "/*"
	if jvm == nil {
		jvm = connectJVM
		archive := classArchive("connect-"+c.Version+"-debezium-"+c.Debezium, java, []string{filepath.Join(libs, "libs")}, []string{"-cp", cp},
			func(dump string) error { return trainConnect(ctx, cfg.Kafka, dump) })
		if archive != "" {
			jvm = append(slices.Clip(jvm), archive)
		}
	}
	own := filepath.Join(c.Dir, "plugins")
	log4j := filepath.Join(c.Dir, "log4j2.properties")
	props := filepath.Join(c.Dir, "worker.properties")
	err = errors.Join(converterPlugin(filepath.Join(own, "apicurio-converter"), filepath.Join(converter, "libs")),
		os.WriteFile(log4j, []byte(connectLog4j), 0o644))
	if err != nil {
		os.RemoveAll(c.Dir)
		return nil, fmt.Errorf("writing Kafka Connect's configuration: %w", err)
	}
	main := "org.apache.kafka.connect.cli.ConnectStandalone"
	if cfg.Mode == ConnectDistributed {
		main = "org.apache.kafka.connect.cli.ConnectDistributed"
	}
	c.java = append(append([]string{java, "-Xms" + heap, "-Xmx" + heap}, jvm...),
		"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", "-Dlog4j2.configurationFile=file:"+log4j,
		"-cp", cp, main, props)
	// Should the REST listener's port have been taken, the worker moves
	// to another (startOnFreePort).
	err = startOnFreePort(func(retry bool) error {
		if c.Port == 0 || retry {
			port, err := PickPort()
			if err != nil {
				return err
			}
			c.Port = port
		}
		if err := os.WriteFile(props, []byte(c.workerProps(cfg, plugins+","+own)), 0o644); err != nil {
			return fmt.Errorf("writing Kafka Connect's configuration: %w", err)
		}
		return c.Start(ctx)
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// converterPlugin makes dir a Kafka Connect plugin of Apicurio's
// AvroConverter: links to the jars in libs, and a jar holding the
// ServiceLoader manifest the converter's 2.6 jar lacks, without which a
// worker that finds plugins by their manifests does not see it (the
// manifest Kafka's connect-plugin-path.sh sync-manifests would add).
func converterPlugin(dir, libs string) error {
	jars, err := filepath.Glob(filepath.Join(libs, "*.jar"))
	if err != nil || len(jars) == 0 {
		return fmt.Errorf("finding Apicurio's AvroConverter in %s (run scripts/deps.sh): %v", libs, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making the AvroConverter plugin: %w", err)
	}
	for _, j := range jars {
		if err := os.Symlink(j, filepath.Join(dir, filepath.Base(j))); err != nil {
			return fmt.Errorf("making the AvroConverter plugin: %w", err)
		}
	}
	f, err := os.Create(filepath.Join(dir, "walstream-converter-manifest.jar"))
	if err != nil {
		return fmt.Errorf("making the AvroConverter plugin: %w", err)
	}
	z := zip.NewWriter(f)
	w, err := z.Create("META-INF/services/org.apache.kafka.connect.storage.Converter")
	if err == nil {
		_, err = io.WriteString(w, "io.apicurio.registry.utils.converter.AvroConverter\n")
	}
	if err = errors.Join(err, z.Close(), f.Close()); err != nil {
		return fmt.Errorf("writing the AvroConverter's manifest: %w", err)
	}
	return nil
}

// workerProps is the worker's configuration: REST on loopback, the plugin
// path plugins (Debezium's folder, whose libs/ is the plugin, and the
// AvroConverter's), plugins found by their ServiceLoader manifests
// (scanning every class instead takes seconds and doubles the worker's
// memory), JsonConverter as in Kafka's sample configs, offsets flushed
// every second.
func (c *Connect) workerProps(cfg ConnectConfig, plugins string) string {
	props := map[string]string{
		"bootstrap.servers":        cfg.Kafka,
		"listeners":                fmt.Sprintf("http://127.0.0.1:%d", c.Port),
		"plugin.path":              plugins,
		"plugin.discovery":         "service_load",
		"key.converter":            "org.apache.kafka.connect.json.JsonConverter",
		"value.converter":          "org.apache.kafka.connect.json.JsonConverter",
		"offset.flush.interval.ms": "1000",
	}
	switch cfg.Mode {
	case ConnectStandalone:
		props["offset.storage.file.filename"] = filepath.Join(c.Dir, "connect.offsets")
		props["producer.enable.idempotence"] = "true"
		props["producer.acks"] = "all"
	case ConnectDistributed:
		maps.Copy(props, map[string]string{
			"group.id":                          "walstream-connect",
			"config.storage.topic":              "walstream-connect-configs",
			"offset.storage.topic":              "walstream-connect-offsets",
			"status.storage.topic":              "walstream-connect-status",
			"config.storage.replication.factor": "1",
			"offset.storage.replication.factor": "1",
			"status.storage.replication.factor": "1",
			"offset.storage.partitions":         "1",
			"status.storage.partitions":         "1",
			"exactly.once.source.support":       "enabled",
		})
	}
	maps.Copy(props, cfg.Props)
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&b, "%s=%s\n", k, props[k])
	}
	return b.String()
}

// connectLog4j logs at INFO, which the readiness lines need, with
// Debezium's logical name (topic.prefix) on each line of its threads, so
// that one connector's lines can be told from another's; the worker's
// config dumps and the REST access log are left out.
const connectLog4j = `appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p [%X{dbz.connectorLogicalName}] %X{connector.context}%m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.out.ref=OUT
logger.cfg.name=org.apache.kafka.common.config.AbstractConfig
logger.cfg.level=WARN
logger.pcfg.name=org.apache.kafka.clients.producer.ProducerConfig
logger.pcfg.level=WARN
logger.ccfg.name=org.apache.kafka.clients.consumer.ConsumerConfig
logger.ccfg.level=WARN
logger.acfg.name=org.apache.kafka.clients.admin.AdminClientConfig
logger.acfg.level=WARN
logger.rest.name=org.apache.kafka.connect.runtime.rest.RestServer
logger.rest.level=WARN
`

// Lines Kafka Connect and Debezium log (Connect 4.3, Debezium 3.6).
const (
	// connectStarted: the REST server is up (Connect.start).
	connectStarted = "Kafka Connect started"
	// connectJoined: a distributed worker joined its group and can take
	// connectors.
	connectJoined = "Joined group at generation"
	// debeziumStreaming: Debezium's task reads the replication stream
	// (PostgresStreamingChangeEventSource); task RUNNING in the status
	// comes a little earlier.
	debeziumStreaming = "Processing messages"
)

func (c *Connect) proc() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p
}

// Running reports whether the worker's process runs.
func (c *Connect) Running() bool {
	p := c.proc()
	return p != nil && !p.Exited()
}

// Start starts the worker, if it is not running, with the connectors and
// offsets it had, and waits up to two minutes until its REST server
// answers and, distributed, it joined its group. Its connectors start
// then; WaitStreaming waits for them.
func (c *Connect) Start(ctx context.Context) error {
	if c.Running() {
		return nil
	}
	p, err := StartProcess(ProcessConfig{Name: "kafka-connect", Path: c.java[0], Args: c.java[1:], Output: c.out})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.p = p
	c.mu.Unlock()
	wait := []string{connectStarted}
	if c.Mode == ConnectDistributed {
		wait = append(wait, connectJoined)
	}
	for _, line := range wait {
		if err := p.WaitLog(ctx, line, 2*time.Minute); err != nil {
			p.Kill()
			return fmt.Errorf("starting Kafka Connect %s (%s): %w", c.Version, c.Mode, err)
		}
	}
	if c.Mode == ConnectDistributed {
		return nil // its connectors are in its config topic
	}
	// A standalone worker keeps the connectors created over REST in memory
	// only; its offsets file keeps their positions. They are created again,
	// as the connector files on its command line would be.
	c.mu.Lock()
	connectors := maps.Clone(c.connectors)
	c.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(connectors)) {
		if err := c.CreateConnector(ctx, name, connectors[name]); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends the worker with sig and waits for it to exit: up to 60 s after
// SIGTERM (a clean stop commits the tasks' offsets), then it is killed.
func (c *Connect) Stop(sig syscall.Signal) {
	if p := c.proc(); p != nil {
		_ = p.Stop(sig, 60*time.Second)
	}
}

// Restart stops the worker with sig and starts it again with its data.
func (c *Connect) Restart(ctx context.Context, sig syscall.Signal) error {
	c.Stop(sig)
	return c.Start(ctx)
}

// Close kills the worker and removes its data.
func (c *Connect) Close() {
	c.Stop(syscall.SIGKILL)
	os.RemoveAll(c.Dir)
}

// String names the worker, its release and Debezium's.
func (c *Connect) String() string {
	return fmt.Sprintf("Kafka Connect %s (%s) with Debezium %s", c.Version, c.Mode, c.Debezium)
}

// URL is the REST API's base URL.
func (c *Connect) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", c.Port) }

// Process is the worker's current process; nil before the first start.
func (c *Connect) Process() *Process { return c.proc() }

// Log is everything the worker's current process logged.
func (c *Connect) Log() string {
	if p := c.proc(); p != nil {
		return p.Log()
	}
	return ""
}

// LastLines is the end of the worker's log.
func (c *Connect) LastLines(n int) string {
	if p := c.proc(); p != nil {
		return p.LastLines(n)
	}
	return ""
}

// DebeziumConnector is a config of Debezium's Postgres connector with the
// outbox event router, on a harness Postgres as its superuser, capturing
// table (schema.table) through its own slot and publication, from their
// creation on (snapshot.mode=no_data), as the connector's documentation
// sets it up for an outbox. prefix is its topic.prefix, which names its
// offsets and the schemas of its records. Callers add the router's and the
// converters' settings; in a distributed worker the connector asks for
// exactly-once delivery.
func (c *Connect) DebeziumConnector(pg *Postgres, db, prefix, slot, publication, table string) map[string]string {
	cfg := map[string]string{
		"connector.class":             "io.debezium.connector.postgresql.PostgresConnector",
		"tasks.max":                   "1",
		"database.hostname":           "127.0.0.1",
		"database.port":               fmt.Sprint(pg.Port),
		"database.user":               "postgres",
		"database.dbname":             db,
		"topic.prefix":                prefix,
		"plugin.name":                 "pgoutput",
		"slot.name":                   slot,
		"publication.name":            publication,
		"publication.autocreate.mode": "filtered",
		"table.include.list":          table,
		"snapshot.mode":               "no_data",
		"tombstones.on.delete":        "false",
		"transforms":                  "outbox",
		"transforms.outbox.type":      "io.debezium.transforms.outbox.EventRouter",
	}
	if c.Mode == ConnectDistributed {
		cfg["exactly.once.support"] = "required"
	}
	return cfg
}

// ConnectorStatus is GET /connectors/<name>/status.
type ConnectorStatus struct {
	Name      string `json:"name"`
	Connector struct {
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID    int    `json:"id"`
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"tasks"`
}

// TaskState is the state of the connector's first task ("" when it has
// none) and its stack trace when it failed.
func (s ConnectorStatus) TaskState() (state, trace string) {
	if len(s.Tasks) == 0 {
		return "", ""
	}
	return s.Tasks[0].State, s.Tasks[0].Trace
}

// ConnectOffset is one source partition's offset as Connect's offsets
// endpoint (KIP-875) returns it; numbers are json.Number.
type ConnectOffset struct {
	Partition map[string]any `json:"partition"`
	Offset    map[string]any `json:"offset"`
}

// do sends a REST request and decodes a JSON answer into out (when not
// nil); an answer outside 2xx is an error with its body.
func (c *Connect) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL()+path, rd)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil && len(b) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decoding %q: %w", method, path, b, err)
		}
	}
	return resp.StatusCode, nil
}

// retry calls f until it succeeds, fails with an answer that is not 409
// (a distributed worker rebalancing) or 5xx, or d passes.
func retry(ctx context.Context, d time.Duration, f func() (int, error)) error {
	deadline := time.Now().Add(d)
	for {
		code, err := f()
		if err == nil || code != 0 && code != http.StatusConflict && code < 500 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CreateConnector creates (or updates) connector name with config, through
// PUT /connectors/<name>/config, retried while a distributed worker
// rebalances.
func (c *Connect) CreateConnector(ctx context.Context, name string, config map[string]string) error {
	err := retry(ctx, time.Minute, func() (int, error) {
		return c.do(ctx, http.MethodPut, "/connectors/"+name+"/config", config, nil)
	})
	if err != nil {
		return fmt.Errorf("creating connector %s on %s: %w", name, c, err)
	}
	c.mu.Lock()
	c.connectors[name] = maps.Clone(config)
	c.mu.Unlock()
	return nil
}

// DeleteConnector deletes connector name; its offsets stay with the
// worker.
func (c *Connect) DeleteConnector(ctx context.Context, name string) error {
	err := retry(ctx, time.Minute, func() (int, error) {
		return c.do(ctx, http.MethodDelete, "/connectors/"+name, nil, nil)
	})
	if err != nil {
		return fmt.Errorf("deleting connector %s: %w", name, err)
	}
	c.mu.Lock()
	delete(c.connectors, name)
	c.mu.Unlock()
	return nil
}

// StopConnector stops connector name and its tasks, keeping its config and
// offsets (PUT /connectors/<name>/stop, KIP-875), and waits until it has no
// task left, so that its offsets can be read and changed.
func (c *Connect) StopConnector(ctx context.Context, name string, d time.Duration) error {
	err := retry(ctx, time.Minute, func() (int, error) {
		return c.do(ctx, http.MethodPut, "/connectors/"+name+"/stop", nil, nil)
	})
	if err != nil {
		return fmt.Errorf("stopping connector %s: %w", name, err)
	}
	return c.waitStatus(ctx, name, d, "stopped", func(s ConnectorStatus) bool {
		return s.Connector.State == "STOPPED" && len(s.Tasks) == 0
	})
}

// ResumeConnector starts a stopped or paused connector again.
func (c *Connect) ResumeConnector(ctx context.Context, name string) error {
	err := retry(ctx, time.Minute, func() (int, error) {
		return c.do(ctx, http.MethodPut, "/connectors/"+name+"/resume", nil, nil)
	})
	if err != nil {
		return fmt.Errorf("resuming connector %s: %w", name, err)
	}
	return nil
}

// AlterOffsets sets the stopped connector's source offsets (PATCH
// /connectors/<name>/offsets, KIP-875), as an operator moves a connector
// to where another reader of its slot stopped.
func (c *Connect) AlterOffsets(ctx context.Context, name string, offsets []ConnectOffset) error {
	err := retry(ctx, time.Minute, func() (int, error) {
		return c.do(ctx, http.MethodPatch, "/connectors/"+name+"/offsets", map[string]any{"offsets": offsets}, nil)
	})
	if err != nil {
		return fmt.Errorf("altering the offsets of connector %s: %w", name, err)
	}
	return nil
}

// Status is the connector's status.
func (c *Connect) Status(ctx context.Context, name string) (ConnectorStatus, error) {
	var s ConnectorStatus
	if _, err := c.do(ctx, http.MethodGet, "/connectors/"+name+"/status", nil, &s); err != nil {
		return s, fmt.Errorf("reading the status of connector %s: %w", name, err)
	}
	return s, nil
}

// Offsets are the connector's committed source offsets (GET
// /connectors/<name>/offsets), for Debezium one partition
// {"server":<topic.prefix>} with its lsn, lsn_commit, lsn_proc, txId,
// ts_usec and messageType.
func (c *Connect) Offsets(ctx context.Context, name string) ([]ConnectOffset, error) {
	var out struct {
		Offsets []ConnectOffset `json:"offsets"`
	}
	err := retry(ctx, 30*time.Second, func() (int, error) {
		return c.do(ctx, http.MethodGet, "/connectors/"+name+"/offsets", nil, &out)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the offsets of connector %s: %w", name, err)
	}
	return out.Offsets, nil
}

// waitStatus polls the connector's status until ok, the task fails, or d
// passes.
func (c *Connect) waitStatus(ctx context.Context, name string, d time.Duration, what string, ok func(ConnectorStatus) bool) error {
	deadline := time.Now().Add(d)
	var last ConnectorStatus
	var lastErr error
	for {
		s, err := c.Status(ctx, name)
		if err == nil && ok(s) {
			return nil
		}
		last, lastErr = s, err
		if state, trace := s.TaskState(); state == "FAILED" {
			return fmt.Errorf("connector %s: task failed before it was %s:\n%s", name, what, trace)
		}
		if !c.Running() {
			return fmt.Errorf("connector %s: Kafka Connect exited before the connector was %s:\n%s", name, what, c.LastLines(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connector %s not %s within %s (status %+v, %v)", name, what, d, last, lastErr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitRunning waits until the connector's task runs.
func (c *Connect) WaitRunning(ctx context.Context, name string, d time.Duration) error {
	return c.waitStatus(ctx, name, d, "running", func(s ConnectorStatus) bool {
		state, _ := s.TaskState()
		return s.Connector.State == "RUNNING" && state == "RUNNING"
	})
}

// WaitStreaming waits until the connector's task reads the replication
// stream: rows committed from then on are captured. It counts the lines
// Debezium logs under the connector's topic.prefix since the worker's
// current process started, and waits for one more than there were before
// (after passes how many there were; Streamed tells).
func (c *Connect) WaitStreaming(ctx context.Context, name string, after int, d time.Duration) error {
	if err := c.WaitRunning(ctx, name, d); err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	for c.Streamed(name) <= after {
		if state, trace := c.taskState(ctx, name); state == "FAILED" {
			return fmt.Errorf("connector %s: task failed before it streamed:\n%s", name, trace)
		}
		if !c.Running() {
			return fmt.Errorf("connector %s: Kafka Connect exited before the connector streamed:\n%s", name, c.LastLines(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connector %s did not log %q within %s:\n%s", name, debeziumStreaming, d, c.LastLines(30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (c *Connect) taskState(ctx context.Context, name string) (string, string) {
	s, err := c.Status(ctx, name)
	if err != nil {
		return "", ""
	}
	return s.TaskState()
}

// Streamed counts the times connector name started streaming in the
// worker's current process.
func (c *Connect) Streamed(name string) int {
	c.mu.Lock()
	prefix := c.connectors[name]["topic.prefix"]
	c.mu.Unlock()
	n := 0
	for _, line := range strings.Split(c.Log(), "\n") {
		if strings.Contains(line, debeziumStreaming) && strings.Contains(line, "["+prefix+"]") {
			n++
		}
	}
	return n
}
