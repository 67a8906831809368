package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/walstream/walstream/internal/testenv"
)

// avroReader is a registry-aware consumer's side: it reads a record's
// schema id, fetches the schema from the registry and decodes the body
// with hamba/avro, a library written apart from walstream's writer.
type avroReader struct {
	t       *testing.T
	cl      *sr.Client
	schemas map[int]avro.Schema
	texts   map[int]string
}

func newAvroReader(t *testing.T, url string) *avroReader {
	cl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	return &avroReader{t: t, cl: cl, schemas: make(map[int]avro.Schema), texts: make(map[int]string)}
}

// decode returns what b holds: the datum, and the schema's id.
func (a *avroReader) decode(b string) (any, int) {
	a.t.Helper()
	var h sr.ConfluentHeader
	id, body, err := h.DecodeID([]byte(b))
	if err != nil {
		a.t.Fatalf("%x: %v", b, err)
	}
	s, ok := a.schemas[id]
	if !ok {
		got, err := a.cl.SchemaByID(context.Background(), id)
		if err != nil {
			a.t.Fatalf("schema %d: %v", id, err)
		}
		if s, err = avro.Parse(got.Schema); err != nil {
			a.t.Fatalf("schema %d %s: %v", id, got.Schema, err)
		}
		a.schemas[id], a.texts[id] = s, got.Schema
	}
	var v any
	if err := avro.Unmarshal(s, body, &v); err != nil {
		a.t.Fatalf("decoding %x with schema %d: %v", body, id, err)
	}
	return v, id
}

// plain turns records whose key and value are Avro strings into what kcat
// would read of the string converter's, so that checkExactlyOnce compares
// them with the rows.
func (a *avroReader) plain(recs []record) []record {
	a.t.Helper()
	out := make([]record, len(recs))
	for i, r := range recs {
		k, _ := a.decode(r.Key)
		v, _ := a.decode(r.Value)
		ks, ok1 := k.(string)
		vs, ok2 := v.(string)
		if !ok1 || !ok2 {
			a.t.Fatalf("record %s/%d@%d: key %#v, value %#v; want strings", r.Topic, r.Partition, r.Offset, k, v)
		}
		r.Key, r.Value = ks, vs
		out[i] = r
	}
	return out
}

// oneVersionEach fails unless every subject holds exactly one version: a
// replay, a restart or an aborted transaction registered nothing new.
func (a *avroReader) oneVersionEach(want ...string) {
	a.t.Helper()
	ctx := context.Background()
	subjects, err := a.cl.Subjects(ctx)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(" "+strings.Join(subjects, " ")+" ", " "+w+" ") {
			a.t.Errorf("subject %s missing from %v", w, subjects)
		}
	}
	for _, s := range subjects {
		if v, err := a.cl.SubjectVersions(ctx, s); err != nil || len(v) != 1 {
			a.t.Errorf("subject %s: versions %v (%v), want one", s, v, err)
		}
	}
}

func httpBody(addr, path string) string {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestAvro runs walstream with Avro keys and values through Apicurio
// Registry's Confluent-compatible API, end to end:
//   - the registry down at start: nothing streams, /readyz and `walstream
//     status` name the registry, nothing is confirmed; it comes back and
//     the stream goes on by itself;
//   - crashes right after Kafka commits: exactly once, and the restarts
//     and replays register no new version;
//   - the registry down mid-stream when a new topic needs a schema: the
//     open transaction is aborted and retried, nothing confirmed past it;
//   - a payload its schema cannot hold (expanded JSON with a name Avro
//     refuses) is dead-lettered, naming the event;
//   - the registry refusing a schema under its compatibility rule stops
//     walstream naming the subject, the level and what to do.
//
// Every record is read back by a registry-aware consumer and compared
// with the rows.
func TestAvro(t *testing.T) {
	t.Parallel()
	reg := testenv.StartRegistry(t)
	e := newSharedEnv(t)
	e.reader = []kgo.Opt{} // Avro is binary: read with franz-go, not kcat's text
	args := []string{"--converter", "avro", "--schema-registry-url", reg.URL(), "--max-batch-events", "500", "--linger", "0s"}
	seq := 0

	phase := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	phase("registry down at start", func(t *testing.T) {
		reg.Cut()
		p := e.start(slices.Concat(args, []string{"--http-addr", "127.0.0.1:0"}))
		addr := p.httpAddr(t)
		p.waitLog(t, "cannot reach the schema registry at 127.0.0.1:", 60*time.Second)
		e.insertTx("Order", 20, 3, &seq, false)
		end := e.currentLSN()
		testenv.Eventually(t, 10*time.Second, "/readyz naming the registry", func() bool {
			return strings.Contains(httpBody(addr, "/readyz"), "schema registry at "+reg.URL())
		})
		var out, errOut bytes.Buffer
		cmd := exec.Command(binary, slices.Concat([]string{"status", "--json", "--pg-url", e.pg.URL("postgres", "postgres")}, e.kafkaArgs(),
			[]string{"--converter", "avro", "--schema-registry-url", reg.URL()})...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err == nil {
			t.Errorf("status with the registry down exited 0:\n%s", out.String())
		}
		var r statusReport
		if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.SchemaRegistry == nil || r.SchemaRegistry.Answers {
			t.Errorf("status --json: schema registry %+v (%v), want it named and not answering:\n%s%s", r.SchemaRegistry, err, out.String(), errOut.String())
		}
		time.Sleep(2 * time.Second)
		if got := e.confirmedLSN("walstream"); got >= end {
			t.Fatalf("confirmed_flush_lsn %s reached %s without a schema registry", got, end)
		}
		if err := reg.Restore(); err != nil {
			t.Fatal(err)
		}
		e.waitConfirmed("walstream", end, 60*time.Second, p)
		testenv.Eventually(t, 10*time.Second, "ready with the registry back", func() bool { return httpStatus(addr, "/readyz") == 200 })
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
	})

	phase("crashes after Kafka commits", func(t *testing.T) {
		for _, n := range []int{300, 1, 450, 1200, 20} {
			e.insertTx("Order", n, 23, &seq, false)
		}
		end := e.currentLSN()
		// Each point of a Kafka commit, and inside a Postgres transaction: every crash leaves
		// schemas registered for records Kafka may not have.
		for _, crash := range []string{"after-produce:1", "before-commit:2", "after-commit:2", "mid-transaction:300"} {
			p := e.start(args, "WALSTREAM_CRASH_AT="+crash)
			if err := p.wait(t, 60*time.Second); !p.KilledBy(syscall.SIGKILL) {
				t.Fatalf("walstream exited with %v, want killed by SIGKILL at %s\n%s", err, crash, p.Log())
			}
		}
		p := e.start(args)
		e.waitConfirmed("walstream", end, 60*time.Second, p)
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
	})

	phase("registry down mid-stream", func(t *testing.T) {
		p := e.start(args).streaming(t)
		reg.Cut()
		e.insertTx("Order", 10, 3, &seq, false)    // known schemas: published
		e.insertTx("Customer", 10, 3, &seq, false) // a new topic, new subjects: stuck
		end := e.currentLSN()
		p.waitLog(t, "schema registry at", 60*time.Second)
		time.Sleep(time.Second)
		if got := e.confirmedLSN("walstream"); got >= end {
			t.Fatalf("confirmed_flush_lsn %s reached %s without the registry", got, end)
		}
		if err := reg.Restore(); err != nil {
			t.Fatal(err)
		}
		e.waitConfirmed("walstream", end, 90*time.Second, p)
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.Log(), "peer=schema_registry") {
			t.Errorf("no session end blamed on the schema registry:\n%s", grepLines(p.Log(), "session ended|cannot reach"))
		}
	})

	avr := newAvroReader(t, reg.URL())
	e.checkExactlyOnce(avr.plain(e.readAll("Order", "Customer")), "outbox.event.")
	order, customer := e.topic("outbox.event.Order"), e.topic("outbox.event.Customer")
	avr.oneVersionEach(order+"-key", order+"-value", customer+"-key", customer+"-value")

	phase("a payload its schema cannot hold", func(t *testing.T) {
		// A slot of its own, from now on, with the payload expanded.
		exp := slices.Concat(args, []string{"--slot", "walstream_exp", "--expand-json-payload", "--on-error", "dead-letter"})
		p := e.start(exp).streaming(t)
		e.pg.Exec("postgres", `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES
			('Exp', 'x-1', 'Created', '{"seq": 1, "agg": "x-1"}'),
			('Exp', 'x-1', 'Created', '{"first-name": "a"}'),
			('Exp', 'x-1', 'Created', '{"seq": 2, "agg": "x-1"}')`)
		e.waitConfirmed("walstream_exp", e.currentLSN(), 60*time.Second, p)
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		recs := e.kcat("outbox.event.Exp")
		if len(recs) != 2 {
			t.Fatalf("%d records in outbox.event.Exp, want the 2 good ones", len(recs))
		}
		for i, r := range recs {
			v, id := avr.decode(r.Value)
			if m, ok := v.(map[string]any); !ok || m["seq"] != int32(i+1) && m["seq"] != i+1 {
				t.Errorf("record %d: %#v (schema %d %s), want seq %d", i, v, id, avr.texts[id], i+1)
			}
		}
		dlq := e.kcat("walstream.dlq")
		if len(dlq) != 1 || !strings.Contains(dlq[0].Header("walstream.error.reason"), `"first-name" is not an Avro name`) ||
			dlq[0].Value != `{"first-name": "a"}` {
			t.Fatalf("dead letters %+v, want the one payload naming first-name", dlq)
		}
	})

	phase("the connector config of docs/debezium.md", func(t *testing.T) {
		// The block as it is; the flags give what a test's servers are
		// (Postgres, Kafka, the registry) and a slot from now on.
		doc := testenv.DocsBlock(t, "debezium.md", "## Avro and a schema registry", "```json")
		cfg := filepath.Join(t.TempDir(), "connector.json")
		if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		p := e.start([]string{"--config", cfg, "--slot", "walstream_doc", "--publication", "walstream_doc", "--schema-registry-url", reg.NativeURL()},
			"DB_PASSWORD=unused").streaming(t)
		e.pg.Exec("postgres", `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('Doc', 'd-1', 'Placed', '{"n": 1}')`)
		e.waitConfirmed("walstream_doc", e.currentLSN(), 60*time.Second, p)
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		recs := e.kcat("outbox.event.Doc")
		if len(recs) != 1 {
			t.Fatalf("%d records in outbox.event.Doc, want 1", len(recs))
		}
		k, _ := avr.decode(recs[0].Key)
		v, id := avr.decode(recs[0].Value)
		want := `{"type":"record","name":"Value","namespace":"dbz.public.outbox.Doc","fields":[{"name":"payload","type":{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}},{"name":"eventType","type":"string"}],"connect.name":"dbz.public.outbox.Doc.Value"}`
		if m, ok := v.(map[string]any); k != "d-1" || !ok || m["payload"] != `{"n": 1}` || m["eventType"] != "Placed" || avr.texts[id] != want {
			t.Errorf("key %#v, value %#v with schema %s; want d-1, the envelope, %s", k, v, avr.texts[id], want)
		}
		// README's excerpt is this config's.
		var connector struct{ Config map[string]string }
		if err := json.Unmarshal([]byte(doc), &connector); err != nil {
			t.Fatal(err)
		}
		readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		_, excerpt, _ := strings.Cut(string(readme), "```properties\n")
		excerpt, _, _ = strings.Cut(excerpt, "```")
		lines := strings.Split(strings.TrimSpace(excerpt), "\n")
		for _, l := range lines {
			k, v, _ := strings.Cut(strings.TrimSpace(l), "=")
			if got, ok := connector.Config[k]; !ok || got != v {
				t.Errorf("README.md's %s=%s is not docs/debezium.md's (%q)", k, v, got)
			}
		}
		if len(lines) < 5 {
			t.Errorf("README.md's converter excerpt has %d lines:\n%s", len(lines), excerpt)
		}
	})

	phase("schema refused by the compatibility rule", func(t *testing.T) {
		ctx := context.Background()
		subject := e.topic("outbox.event.Order") + "-value"
		if res := avr.cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, subject); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		// An envelope value is a record: not readable as the string before.
		p := e.start(slices.Concat(args, []string{"--additional-placement", "type:envelope:eventType", "--topic-prefix", "dbz"}))
		before := e.currentLSN()
		e.insertTx("Order", 1, 1, &seq, false)
		wantAll(t, exitMessage(t, p), "event ", "at LSN 0/", "subject "+subject, "compatibility level BACKWARD", "PUT /config/"+subject)
		if got := e.confirmedLSN("walstream"); got > before {
			t.Errorf("confirmed_flush_lsn %s moved past %s with the schema refused", got, before)
		}
	})
}
