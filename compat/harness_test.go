package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/walstream/walstream/internal/testenv"
)

var (
	all  = flag.Bool("compat.all", false, "run the whole corpus, not only the cases make test runs")
	mode = flag.String("compat.mode", "standalone", "Kafka Connect worker: standalone or distributed (exactly-once)")
	dump = flag.String("compat.dump", "", "folder to write each case's records to, from both tools")
)

// shared are the systems every case runs on, started once per test
// binary: Kafka Connect takes seconds to start, a connector a moment. The
// schema registry starts with the first case that needs one.
var shared struct {
	once sync.Once
	env  *env
	err  error

	registryOnce sync.Once
	registryErr  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := testenv.Main(m)
	if e := shared.env; e != nil {
		e.close()
	}
	os.Exit(code)
}

// env is one Postgres, one Kafka, one Kafka Connect worker, walstream's
// binary and, for the Avro cases, one Apicurio Registry. The worker starts
// at the first case that needs it: the cutover tests start workers of
// their own, which they stop and kill.
type env struct {
	pg       *testenv.Postgres
	kafka    testenv.Broker
	bin      string
	mode     testenv.ConnectMode
	registry *testenv.Registry

	connectOnce sync.Once
	connect     *testenv.Connect
	connectErr  error
}

// worker is the shared Kafka Connect worker, started at the first call; one
// that cannot start skips the case, or fails it under CI.
func (e *env) worker(t *testing.T) *testenv.Connect {
	t.Helper()
	e.connectOnce.Do(func() {
		e.connect, e.connectErr = testenv.LaunchConnect(context.Background(), testenv.ConnectConfig{Mode: e.mode, Kafka: e.kafka.Addr()})
	})
	if e.connectErr != nil {
		testenv.Unavailable(t, "%v", e.connectErr)
	}
	return e.connect
}

// sharedEnv starts the systems at the first case; one that cannot start
// skips every case, or fails it under CI.
func sharedEnv(t *testing.T) *env {
	t.Helper()
	shared.once.Do(func() { shared.env, shared.err = launch() })
	if shared.err != nil {
		testenv.Unavailable(t, "%v", shared.err)
	}
	return shared.env
}

func launch() (*env, error) {
	ctx := context.Background()
	m := testenv.ConnectStandalone
	switch *mode {
	case "standalone":
	case "distributed":
		m = testenv.ConnectDistributed
	default:
		return nil, fmt.Errorf("-compat.mode=%q is not standalone or distributed", *mode)
	}
	e := &env{mode: m}
	var wg sync.WaitGroup
	var kerr, berr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Time-based retention off: the corpus sets record timestamps
		// from columns in 1999, and Kafka's first retention check, 30 s
		// after it starts, would delete those records, both tools',
		// between writing and reading them.
		k, err := testenv.LaunchKafka(ctx, testenv.KafkaConfig{Props: map[string]string{"log.retention.ms": "-1"}})
		if err == nil {
			e.kafka = k // not a nil *Kafka in the interface
		}
		kerr = err
	}()
	go func() {
		defer wg.Done()
		e.bin, berr = testenv.BuildBinary(testenv.WalstreamBuild(true, false))
	}()
	pg, err := testenv.LaunchPostgres(ctx, testenv.PostgresConfig{})
	wg.Wait()
	e.pg = pg
	if err := errors.Join(err, kerr, berr); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// schemaRegistry starts the registry the Avro cases share: both tools
// register into it, so that equal bytes mean equal schema ids.
func (e *env) schemaRegistry(t *testing.T) *testenv.Registry {
	t.Helper()
	shared.registryOnce.Do(func() { e.registry, shared.registryErr = testenv.LaunchRegistry(context.Background(), nil) })
	if shared.registryErr != nil {
		testenv.Unavailable(t, "%v", shared.registryErr)
	}
	return e.registry
}

func (e *env) close() {
	if e.registry != nil {
		e.registry.Close()
	}
	if e.connect != nil {
		e.connect.Close()
	}
	if e.kafka != nil {
		e.kafka.Close()
	}
	if e.pg != nil {
		_ = e.pg.Close()
	}
}

// Record is one Kafka record as the comparison sees it.
type Record struct {
	Topic     string
	Partition int32
	Key       []byte // nil: no key
	Value     []byte // nil: no value (a tombstone)
	Headers   []kgo.RecordHeader
	Timestamp time.Time
}

// Run is what one tool did with a case: its records, in each partition's
// order, when it stopped on the corpus, why, the schemas it registered
// that the registry did not hold before it ran, and, of Debezium, what it
// warned of (a payload it did not expand, say) with the exception's first
// line.
type Run struct {
	Records    []Record
	Stopped    string
	Registered []string
	Warnings   []string
}

// runHeader is the header whose value differs per run of the connector
// (a UUIDv7 each task start), in Debezium as in walstream.
const runHeader = "__debezium.context.runId"

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// names are a case's objects in Postgres, Kafka Connect and Kafka.
type names struct {
	id, schema, table string
}

func caseNames(c Case) names {
	id := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(c.Name, "_"))
	return names{id: id, schema: "c_" + id, table: "c_" + id + ".outbox"}
}

// connector is the case's connector config, as Kafka Connect gets it and
// walstream reads it, with the registry's URL where the case names it.
func (e *env) connector(t *testing.T, c Case, n names) map[string]string {
	cfg := e.worker(t).DebeziumConnector(e.pg, "postgres", n.id, "dbz_"+n.id, "dbz_"+n.id, n.table)
	maps.Copy(cfg, c.Settings)
	if usesRegistry(c) {
		url := e.schemaRegistry(t).NativeURL()
		for k, v := range cfg {
			cfg[k] = strings.ReplaceAll(v, registryURL, url)
		}
	}
	return cfg
}

// schemas are the schema ids a registry holds, each with the subject
// versions that have it.
type schemas map[int][]string

// usesRegistry says whether a case's converters use the registry.
func usesRegistry(c Case) bool {
	for _, v := range c.Settings {
		if strings.Contains(v, registryURL) {
			return true
		}
	}
	return false
}

// registered lists the schemas in the registry; nil when the case uses
// none.
func (e *env) registered(ctx context.Context, c Case) (schemas, error) {
	if !usesRegistry(c) {
		return nil, nil
	}
	cl, err := sr.NewClient(sr.URLs(e.registry.URL()))
	if err != nil {
		return nil, err
	}
	subjects, err := cl.Subjects(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the registry's subjects: %w", err)
	}
	out := make(schemas)
	for _, s := range subjects {
		versions, err := cl.Schemas(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("listing the versions of subject %s: %w", s, err)
		}
		for _, v := range versions {
			out[v.ID] = append(out[v.ID], fmt.Sprintf("%s version %d", v.Subject, v.Version))
		}
	}
	return out, nil
}

// pgConn opens a connection to the harness's Postgres for the rest of the
// test, and exec, which runs a statement on it and fails the test on an
// error.
func (e *env) pgConn(ctx context.Context, t *testing.T) (*pgx.Conn, func(sql string, args ...any)) {
	t.Helper()
	conn, err := pgx.Connect(ctx, e.pg.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// run runs a case through Debezium and walstream and returns what each
// did.
func (e *env) run(t *testing.T, c Case) (dbz, ws Run) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n := caseNames(c)
	conn, err := pgx.Connect(ctx, e.pg.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, strings.NewReplacer("{t}", n.table, "{s}", n.schema).Replace(sql)); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The harness's Postgres commits asynchronously; peeking the slot reads
	// only flushed WAL.
	exec("SET synchronous_commit = on")
	exec("CREATE SCHEMA " + n.schema)
	exec(c.DDL)
	// Both slots exist before the first row: each tool gets every row.
	slots := []string{"dbz_" + n.id, "ws_" + n.id}
	for _, name := range slots {
		exec(fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", name, n.table))
		exec(fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", name))
	}
	defer dropSlots(t, conn, slots)
	for _, sql := range c.SQL {
		exec(sql)
	}
	last, err := lastChange(ctx, conn, "ws_"+n.id)
	if err != nil {
		t.Fatal(err)
	}
	end, err := e.pg.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.connector(t, c, n)

	start, err := e.marks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logged := len(e.worker(t).Log())
	dbz.Stopped = e.runDebezium(ctx, t, n.id, cfg, last)
	dbz.Warnings = warnings(e.worker(t).Log()[logged:], n.id)
	mid, err := e.marks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := e.registered(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	ws.Stopped = e.runWalstream(ctx, t, c, n, cfg, end)
	stop, err := e.marks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, err := e.registered(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for id, versions := range after {
		if _, ok := before[id]; !ok {
			ws.Registered = append(ws.Registered, fmt.Sprintf("id %d (%s)", id, strings.Join(versions, ", ")))
		}
	}
	slices.Sort(ws.Registered)
	if dbz.Records, err = e.read(ctx, start, mid); err != nil {
		t.Fatal(err)
	}
	if ws.Records, err = e.read(ctx, mid, stop); err != nil {
		t.Fatal(err)
	}
	if *dump != "" {
		writeDump(t, filepath.Join(*dump, n.id+".txt"), c, dbz, ws, e.schemaTexts(ctx, c, dbz, ws))
	}
	return dbz, ws
}

// warnings are the WARN and ERROR lines of the worker's log that name the
// connector (Debezium's logical name, or Connect's context of its task),
// each with the line after it: the exception that a warning carries.
func warnings(log, name string) []string {
	var out []string
	lines := strings.Split(log, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "["+name+"]") && !strings.Contains(l, "["+name+"|") {
			continue
		}
		if !strings.Contains(l, "] WARN [") && !strings.Contains(l, "] ERROR [") {
			continue
		}
		if i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "[") {
			l += "\n    " + lines[i+1]
		}
		out = append(out, l)
	}
	return out
}

// dropSlots drops a case's slots once their tools let go of them: the
// server has room for a few.
func dropSlots(t *testing.T, conn *pgx.Conn, slots []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, slot := range slots {
		for {
			_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Errorf("dropping slot %s: %v", slot, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// lastChange is the LSN of the last change or message the slot has to
// send, which Debezium's offset names (its lsn) once it has handled it:
// peeked, so the slot keeps it for walstream.
func lastChange(ctx context.Context, conn *pgx.Conn, slot string) (pglogrepl.LSN, error) {
	rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1::name, NULL, NULL,
		'proto_version', '1', 'publication_names', $1::text, 'messages', 'true')`, slot)
	if err != nil {
		return 0, fmt.Errorf("peeking slot %s: %w", slot, err)
	}
	var last pglogrepl.LSN
	for rows.Next() {
		var text string
		var data []byte
		if err := rows.Scan(&text, &data); err != nil {
			return 0, err
		}
		lsn, err := pglogrepl.ParseLSN(text)
		if err != nil {
			return 0, err
		}
		if len(data) > 0 && bytes.IndexByte([]byte("IUDM"), data[0]) >= 0 && lsn > last {
			last = lsn
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("peeking slot %s: %w", slot, err)
	}
	if last == 0 {
		return 0, fmt.Errorf("slot %s has no change to send: the case writes no row", slot)
	}
	return last, nil
}

// runDebezium creates the case's connector, waits until its committed
// offset has reached last (everything before it is in Kafka) or its task
// failed, and deletes it. It returns the failure's trace, "" when none.
func (e *env) runDebezium(ctx context.Context, t *testing.T, name string, cfg map[string]string, last pglogrepl.LSN) string {
	t.Helper()
	c := e.worker(t)
	if err := c.CreateConnector(ctx, name, cfg); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.DeleteConnector(context.WithoutCancel(ctx), name); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if s, err := c.Status(ctx, name); err == nil {
			if state, trace := s.TaskState(); state == "FAILED" {
				return trace
			}
		}
		if offsets, err := c.Offsets(ctx, name); err == nil && len(offsets) == 1 && offsetLSN(offsets[0]) >= last {
			return ""
		}
		if time.Now().After(deadline) {
			t.Fatalf("Debezium did not reach %s within 2 minutes:\n%s", last, c.LastLines(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// offsetLSN is the lsn of Debezium's offset: its last emitted record's.
func offsetLSN(o testenv.ConnectOffset) pglogrepl.LSN {
	v, ok := o.Offset["lsn"].(json.Number)
	if !ok {
		return 0
	}
	lsn, err := strconv.ParseUint(v.String(), 10, 64)
	if err != nil {
		return 0
	}
	return pglogrepl.LSN(lsn)
}

// runWalstream runs walstream with the connector config, on a slot and a
// publication of its own, until its slot has confirmed end or it stopped.
// It returns its log when it stopped on its own.
func (e *env) runWalstream(ctx context.Context, t *testing.T, c Case, n names, cfg map[string]string, end pglogrepl.LSN) string {
	t.Helper()
	path := writeConnector(t, c.Format, n.id, cfg)
	p := testenv.StartWalstream(t, e.bin, []string{"run", "--config", path,
		"--kafka-brokers", e.kafka.Addr(),
		"--slot", "ws_" + n.id, "--publication", "ws_" + n.id,
		"--http-addr", "",
		"--status-interval", "1s", "--idle-interval", "500ms",
		"--log-level", "debug",
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if p.Exited() {
			// It left the Kafka transaction it was building open: end it,
			// as its next start would, so that readers get past it.
			if err := e.fence(ctx, "walstream-ws_"+n.id); err != nil {
				t.Fatal(err)
			}
			return p.Log()
		}
		if lsn, err := e.pg.SlotConfirmed(ctx, "ws_"+n.id); err == nil && lsn >= end {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("walstream did not confirm %s within 2 minutes:\n%s", end, p.LastLines(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stopping walstream: %v\n%s", err, p.LastLines(40))
	}
	return ""
}

// fence aborts the open transaction of a transactional id by
// initializing a producer id for it, as a new producer does.
func (e *env) fence(ctx context.Context, id string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Addr()))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &id
	req.TransactionTimeoutMillis = 60000
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("fencing transactional id %s: %w", id, err)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond) // CONCURRENT_TRANSACTIONS while the abort completes
	}
}

// writeConnector writes the connector config in the form a Debezium user
// has it: the body of POST /connectors (JSON), a properties file, or a
// Strimzi KafkaConnector resource.
func writeConnector(t *testing.T, format Format, name string, cfg map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	var path string
	var b bytes.Buffer
	switch format {
	case JSON:
		path = filepath.Join(dir, "connector.json")
		body, err := json.MarshalIndent(map[string]any{"name": name, "config": cfg}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		b.Write(body)
	case Properties:
		path = filepath.Join(dir, "connector.properties")
		fmt.Fprintf(&b, "name=%s\n", name)
		for _, k := range slices.Sorted(maps.Keys(cfg)) {
			fmt.Fprintf(&b, "%s=%s\n", k, strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(cfg[k]))
		}
	case Strimzi:
		path = filepath.Join(dir, "connector.yaml")
		fmt.Fprintf(&b, "apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaConnector\nmetadata:\n  name: %s\n  labels:\n    strimzi.io/cluster: connect\nspec:\n", name)
		fmt.Fprintf(&b, "  class: %s\n  tasksMax: 1\n  config:\n", cfg["connector.class"])
		for _, k := range slices.Sorted(maps.Keys(cfg)) {
			if k == "connector.class" || k == "tasks.max" {
				continue
			}
			v, _ := json.Marshal(cfg[k])
			fmt.Fprintf(&b, "    %s: %s\n", k, v)
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// internal tells the topics of Kafka Connect and walstream from the
// outbox topics the cases write.
func internal(topic string) bool {
	return strings.HasPrefix(topic, "__") || strings.HasPrefix(topic, "walstream")
}

// marks waits until no outbox topic has a transaction open and returns
// every partition's end.
func (e *env) marks(ctx context.Context) (map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Addr()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(time.Minute)
	for {
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing topics: %w", err)
		}
		var names []string
		for _, name := range topics.Names() {
			if !internal(name) {
				names = append(names, name)
			}
		}
		out := make(map[string]map[int32]int64)
		if len(names) == 0 {
			return out, nil
		}
		stable, err1 := adm.ListCommittedOffsets(ctx, names...)
		hw, err2 := adm.ListEndOffsets(ctx, names...)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("listing offsets: %w", err)
		}
		open := false
		hw.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				open = true // a topic being created
				return
			}
			if s, ok := stable.Lookup(o.Topic, o.Partition); !ok || s.Err != nil || s.Offset < o.Offset {
				open = true
			}
			if out[o.Topic] == nil {
				out[o.Topic] = make(map[int32]int64)
			}
			out[o.Topic][o.Partition] = o.Offset
		})
		if !open {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.New("outbox topics kept a transaction open for a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// read returns the records written between two marks, read_committed, by
// topic and partition in offset order.
func (e *env) read(ctx context.Context, from, to map[string]map[int32]int64) ([]Record, error) {
	start := make(map[string]map[int32]kgo.Offset)
	left := 0
	for topic, parts := range to {
		for p, end := range parts {
			if end > from[topic][p] {
				if start[topic] == nil {
					start[topic] = make(map[int32]kgo.Offset)
				}
				start[topic][p] = kgo.NewOffset().At(from[topic][p])
				left++
			}
		}
	}
	if left == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Addr()), kgo.ConsumePartitions(start),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	byPart := make(map[string][]Record)
	done := make(map[string]bool)
	for len(done) < left {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			var short []string
			for topic, parts := range start {
				for p := range parts {
					if key := fmt.Sprintf("%s/%d", topic, p); !done[key] {
						short = append(short, fmt.Sprintf("%s to offset %d", key, to[topic][p]))
					}
				}
			}
			slices.Sort(short)
			return nil, fmt.Errorf("reading records, not read yet: %s: %w", strings.Join(short, ", "), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			key := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			if r.Offset >= to[r.Topic][r.Partition] {
				return
			}
			if r.Offset+1 >= to[r.Topic][r.Partition] {
				done[key] = true
			}
			if !r.Attrs.IsControl() {
				byPart[key] = append(byPart[key], Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value,
					Headers: r.Headers, Timestamp: r.Timestamp})
			}
		})
	}
	var out []Record
	for _, k := range slices.Sorted(maps.Keys(byPart)) {
		out = append(out, byPart[k]...)
	}
	return out, nil
}

// compare reports every difference between Debezium's records and
// walstream's: per topic, keyed records by partition in order, records
// without a key (whose partition the producer picks freely) by id header
// and value.
func compare(c Case, dbz, ws Run) []string {
	var diffs []string
	dbzStops, wsStops := c.Stops != "" || c.DebeziumStops, c.Stops+c.WalstreamStops
	if (dbz.Stopped != "") != dbzStops {
		diffs = append(diffs, fmt.Sprintf("Debezium stopped: %v, the case says %v:\n%s", dbz.Stopped != "", dbzStops, firstLines(dbz.Stopped, 5)))
	}
	if (ws.Stopped != "") != (wsStops != "") || !strings.Contains(ws.Stopped, wsStops) {
		diffs = append(diffs, fmt.Sprintf("walstream stopped: %v, the case says it stops naming %q:\n%s", ws.Stopped != "", wsStops, lastLines(ws.Stopped, 5)))
	}
	group := func(recs []Record) map[string][]Record {
		m := make(map[string][]Record)
		for _, r := range recs {
			k := r.Topic
			if r.Key == nil {
				k += " (no key)"
			} else {
				k += fmt.Sprintf(" partition %d", r.Partition)
			}
			m[k] = append(m[k], r)
		}
		for k, rs := range m {
			if strings.HasSuffix(k, "(no key)") {
				slices.SortStableFunc(rs, func(a, b Record) int {
					if c := bytes.Compare(header(a, "id"), header(b, "id")); c != 0 {
						return c
					}
					return bytes.Compare(a.Value, b.Value)
				})
			}
		}
		return m
	}
	if len(ws.Registered) > 0 {
		// Debezium ran first: a schema text of walstream's that differs
		// from the converter's in any byte is a new id.
		diffs = append(diffs, fmt.Sprintf("walstream registered schemas Debezium's converter did not: %s", strings.Join(ws.Registered, "; ")))
	}
	d, w := group(dbz.Records), group(ws.Records)
	keys := slices.Sorted(maps.Keys(d))
	for k := range w {
		if _, ok := d[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		dr, wr := d[k], w[k]
		switch {
		case wsStops != "" && len(wr) <= len(dr):
			// Debezium published, at least once, what it read before the
			// row walstream stops on; walstream the Kafka transactions it
			// committed before it, so perhaps fewer.
			dr = dr[:len(wr)]
		case c.DebeziumStops && len(dr) <= len(wr):
			wr = wr[:len(dr)]
		}
		if len(dr) != len(wr) {
			diffs = append(diffs, fmt.Sprintf("%s: Debezium wrote %d records, walstream %d\nDebezium:\n%s\nwalstream:\n%s", k, len(dr), len(wr), show(dr), show(wr)))
			continue
		}
		for i := range dr {
			if diff := compareRecord(c, dr[i], wr[i]); diff != "" {
				diffs = append(diffs, fmt.Sprintf("%s, record %d: %s\nDebezium:  %s\nwalstream: %s", k, i, diff, dr[i], wr[i]))
			}
		}
	}
	return diffs
}

// known rewrites the value and header bytes where the case's known
// differences are.
func known(c Case, d, w Record) (Record, Record) {
	// Only where it matches: ReplaceAll makes nil of an empty value.
	replace := func(re *regexp.Regexp, b []byte) []byte {
		if !re.Match(b) {
			return b
		}
		return re.ReplaceAll(b, []byte("<known>"))
	}
	rewrite := func(re *regexp.Regexp, r *Record) {
		r.Value = replace(re, r.Value)
		r.Headers = slices.Clone(r.Headers)
		for i := range r.Headers {
			r.Headers[i].Value = replace(re, r.Headers[i].Value)
		}
	}
	for _, k := range c.Known {
		if k.Debezium != nil {
			rewrite(k.Debezium, &d)
			rewrite(k.Walstream, &w)
		}
		w.Headers = slices.DeleteFunc(slices.Clone(w.Headers), func(h kgo.RecordHeader) bool { return slices.Contains(k.WalstreamHeaders, h.Key) })
	}
	return d, w
}

func compareRecord(c Case, d, w Record) string {
	d, w = known(c, d, w)
	var diffs []string
	if !sameBytes(d.Key, w.Key) {
		diffs = append(diffs, "key")
	}
	if !sameBytes(d.Value, w.Value) {
		diffs = append(diffs, "value")
	}
	if len(d.Headers) != len(w.Headers) {
		diffs = append(diffs, "headers")
	} else {
		for i, h := range d.Headers {
			g := w.Headers[i]
			switch {
			case h.Key != g.Key:
				diffs = append(diffs, fmt.Sprintf("header %d name", i))
			case h.Key == runHeader:
				if !uuidV7.Match(h.Value) || !uuidV7.Match(g.Value) {
					diffs = append(diffs, "header "+runHeader+" is not a UUIDv7")
				}
			case !sameBytes(h.Value, g.Value):
				diffs = append(diffs, "header "+h.Key)
			}
		}
	}
	if c.Timestamps && !d.Timestamp.Equal(w.Timestamp) {
		diffs = append(diffs, "timestamp")
	}
	return strings.Join(diffs, ", ")
}

// sameBytes tells no bytes (null) from zero bytes.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func header(r Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

func quote(b []byte) string {
	if b == nil {
		return "<null>"
	}
	return strconv.Quote(string(b))
}

func (r Record) String() string {
	var hs []string
	for _, h := range r.Headers {
		hs = append(hs, h.Key+"="+quote(h.Value))
	}
	return fmt.Sprintf("%s/%d ts=%d key=%s value=%s headers=[%s]", r.Topic, r.Partition, r.Timestamp.UnixMilli(), quote(r.Key), quote(r.Value), strings.Join(hs, " "))
}

func show(rs []Record) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %s\n", r)
	}
	return b.String()
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// schemaTexts are the texts of the schemas the records' keys and values
// name in the Confluent wire format, for the dump.
func (e *env) schemaTexts(ctx context.Context, c Case, runs ...Run) []string {
	if !usesRegistry(c) {
		return nil
	}
	cl, err := sr.NewClient(sr.URLs(e.registry.URL()))
	if err != nil {
		return []string{err.Error()}
	}
	ids := make(map[int]bool)
	for _, r := range runs {
		for _, rec := range r.Records {
			for _, b := range [][]byte{rec.Key, rec.Value} {
				var h sr.ConfluentHeader
				if id, _, err := h.DecodeID(b); err == nil {
					ids[id] = true
				}
			}
		}
	}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		s, err := cl.SchemaByID(ctx, id)
		if err != nil {
			out = append(out, fmt.Sprintf("schema %d: %v", id, err))
			continue
		}
		out = append(out, fmt.Sprintf("schema %d: %s", id, s.Schema))
	}
	return out
}

// writeDump writes a case's records from both tools, each field quoted and
// in hex, and the schemas they name.
func writeDump(t *testing.T, path string, c Case, dbz, ws Run, schemas []string) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n", c.Name)
	for _, s := range schemas {
		fmt.Fprintln(&b, s)
	}
	for _, side := range []struct {
		name string
		run  Run
	}{{"debezium", dbz}, {"walstream", ws}} {
		fmt.Fprintf(&b, "== %s (%d records)\n", side.name, len(side.run.Records))
		if side.run.Stopped != "" {
			fmt.Fprintf(&b, "stopped: %s\n", firstLines(side.run.Stopped, 2))
		}
		for _, w := range side.run.Warnings {
			fmt.Fprintf(&b, "warned: %s\n", w)
		}
		for _, r := range side.run.Records {
			fmt.Fprintf(&b, "%s\n  key hex=%x\n  value hex=%x\n", r, r.Key, r.Value)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
