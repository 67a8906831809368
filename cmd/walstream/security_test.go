package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/walstream/walstream/config"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/pipeline"
	"golang.org/x/crypto/bcrypt"
)

const (
	pgSecret    = "pg-Sekr1t-0f-walsec"
	kafkaSecret = "kafka-Sekr1t-0f-walstream"
)

// newSecureEnv: Postgres with ssl=on and a least-privilege role that must
// log in with SCRAM over TLS; Apache Kafka whose listener for walstream
// speaks only SASL_SSL with SCRAM; both certificates from a throwaway CA,
// for 127.0.0.1 only.
func newSecureEnv(t *testing.T) (*env, *testenv.CA) {
	registerSecret(pgSecret)
	registerSecret(kafkaSecret)
	ca := testenv.NewCA(t, "walstream-test-ca")
	kafkaCert, kafkaKey := ca.Issue(t, "kafka", "127.0.0.1")
	startKafka := testenv.StartKafkaAsync(t, testenv.KafkaConfig{Security: &testenv.KafkaSecurity{CertFile: kafkaCert, KeyFile: kafkaKey,
		ScramUsers: map[string]string{"walstream": kafkaSecret}}})
	pg := testenv.StartPostgres(t, testenv.Settings("password_encryption = 'scram-sha-256'"))
	certFile, keyFile := ca.Issue(t, "postgres", "127.0.0.1")
	pg.EnableSSL(certFile, keyFile)
	pg.Exec("postgres", outboxDDL)
	// The role has REPLICATION and SELECT on the outbox, nothing more; an
	// administrator created the publication and the slot.
	pg.Exec("postgres", fmt.Sprintf(`CREATE ROLE walsec LOGIN REPLICATION PASSWORD '%s';
		GRANT SELECT ON public.outbox TO walsec;
		CREATE PUBLICATION walstream_outbox FOR TABLE public.outbox %s`, pgSecret, publicationOptions("insert")))
	pg.Exec("postgres", "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')")
	pg.PrependHBA("hostssl all walsec 127.0.0.1/32 scram-sha-256", "host all walsec 127.0.0.1/32 reject")

	k := startKafka()
	// A franz-go consumer reads the records back, over TLS and SCRAM like
	// walstream (Debian's kcat, librdkafka 2.0.2, could not authenticate
	// to the in-process broker these tests once ran on).
	e := &env{t: t, pg: pg, kafka: k, broker: k.SecureAddr(), reader: secureReader(t, ca, "walstream", kafkaSecret)}
	return e, ca
}

// secureReader are a franz-go reader's options for TLS, verified with ca,
// and SCRAM-SHA-256 as user.
func secureReader(t *testing.T, ca *testenv.CA, user, password string) []kgo.Opt {
	tc := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil || !tc.RootCAs.AppendCertsFromPEM(pem) {
		t.Fatalf("CA: %v", err)
	}
	return []kgo.Opt{kgo.DialTLSConfig(tc), kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism())}
}

func secretFile(t *testing.T, secret string) string {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// secureArgs connects as walsec with verify-full, the password from a
// file, and to Kafka with TLS and SCRAM-SHA-256.
func secureArgs(t *testing.T, e *env, ca *testenv.CA, host string) []string {
	return []string{
		"--pg-url", fmt.Sprintf("postgres://walsec@%s:%d/postgres?sslmode=verify-full&sslrootcert=%s", host, e.pg.Port, ca.CertFile),
		"--pg-password-file", secretFile(t, pgSecret),
		"--create=false",
		"--kafka-tls-ca-file", ca.CertFile,
		"--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-user", "walstream",
	}
}

// TestSecureStreaming: verify-full to Postgres as a role with only
// REPLICATION and SELECT on the outbox, TLS and SCRAM to Kafka; every row
// arrives once and no password shows in any output.
func TestSecureStreaming(t *testing.T) {
	t.Parallel()
	e, ca := newSecureEnv(t)
	p := e.start(secureArgs(t, e, ca, "127.0.0.1"), "WALSTREAM_KAFKA_SASL_PASSWORD="+kafkaSecret).streaming(t)
	seq := 0
	e.insertTx("Order", 200, 7, &seq, false)
	e.insertTx("Order", 1, 1, &seq, true)
	e.waitConfirmed("walstream", e.currentLSN(), 30*time.Second, p)
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	if strings.Contains(p.Log(), "not encrypted") {
		t.Error("warned about an unencrypted connection over TLS")
	}
	if !strings.Contains(p.Log(), "pg_sslmode=verify-full") {
		t.Error("the starting line does not say sslmode verify-full")
	}

	var out bytes.Buffer
	cmd := exec.Command(binary, append([]string{"status", "--kafka-brokers", e.broker}, secureArgs(t, e, ca, "127.0.0.1")...)...)
	cmd.Env = append(os.Environ(), "WALSTREAM_KAFKA_SASL_PASSWORD="+kafkaSecret)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "yes, walsender pid") {
		t.Fatalf("status over TLS: %v\n%s", err, out.String())
	}
	if s := leakedSecret(out.String()); s != "" {
		t.Fatalf("status output holds the password %q", s)
	}
}

// TestSecureRefusals: a wrong CA, a wrong host name and a wrong password,
// for Postgres and for Kafka, each stop walstream with an error that says so.
func TestSecureRefusals(t *testing.T) {
	t.Parallel()
	e, ca := newSecureEnv(t)
	otherCA := testenv.NewCA(t, "someone-elses-ca")
	kafkaEnv := []string{"WALSTREAM_KAFKA_SASL_PASSWORD=" + kafkaSecret}
	replace := func(args []string, flag, value string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = value
			}
		}
		return out
	}
	good := secureArgs(t, e, ca, "127.0.0.1")
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"postgres wrong CA", replace(good, "--pg-url", fmt.Sprintf("postgres://walsec@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s", e.pg.Port, otherCA.CertFile)),
			kafkaEnv, []string{"connecting to 127.0.0.1", "certificate signed by unknown authority"}},
		{"postgres wrong host name", secureArgs(t, e, ca, "localhost"), kafkaEnv,
			[]string{"connecting to localhost", "x509: certificate is not valid for any names, but wanted to match localhost"}},
		{"postgres wrong password", replace(good, "--pg-password-file", secretFile(t, "not-the-password")), kafkaEnv,
			[]string{"password authentication failed for user \"walsec\""}},
		{"kafka wrong CA", replace(good, "--kafka-tls-ca-file", otherCA.CertFile), kafkaEnv,
			[]string{"checkpoint of stream postgres/walstream", "certificate signed by unknown authority"}},
		{"kafka wrong host name", append(append([]string(nil), good...), "--kafka-tls-server-name", "kafka.example.com"), kafkaEnv,
			[]string{"x509: certificate is not valid for any names, but wanted to match kafka.example.com"}},
		{"kafka wrong password", good, []string{"WALSTREAM_KAFKA_SASL_PASSWORD=wrong-password"},
			[]string{"not authorized by the Kafka cluster", "SASL_AUTHENTICATION_FAILED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := e.start(tc.args, tc.env...)
			wantAll(t, exitMessage(t, p), tc.want...)
		})
	}
}

// TestMetricsTLSAndAuth: with an exporter-toolkit web config, /metrics
// needs TLS and basic auth; pprof serves only when asked, on loopback.
func TestMetricsTLSAndAuth(t *testing.T) {
	t.Parallel()
	e := newSharedEnv(t)
	ca := testenv.NewCA(t, "metrics-ca")
	certFile, keyFile := ca.Issue(t, "metrics", "127.0.0.1")
	hash, err := bcrypt.GenerateFromPassword([]byte("scrape-Sekr1t"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	registerSecret("scrape-Sekr1t")
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	os.WriteFile(webConfig, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n",
		certFile, keyFile, hash)), 0o600)
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	p := e.start([]string{"--http-addr", "127.0.0.1:0", "--http-config-file", webConfig, "--pprof-addr", pprofAddr}).streaming(t)
	addr := p.httpAddr(t)

	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.CertFile)
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	get := func(user, pass string) int {
		req, _ := http.NewRequest("GET", "https://"+addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("", ""); c != http.StatusUnauthorized {
		t.Errorf("/metrics without credentials: %d, want 401", c)
	}
	if c := get("prometheus", "wrong"); c != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong password: %d, want 401", c)
	}
	if c := get("prometheus", "scrape-Sekr1t"); c != http.StatusOK {
		t.Errorf("/metrics with credentials: %d, want 200", c)
	}
	if c := httpStatus(addr, "/metrics"); c == http.StatusOK {
		t.Error("/metrics served plain HTTP")
	}
	if c := httpStatus(pprofAddr, "/debug/pprof/"); c != http.StatusOK {
		t.Errorf("pprof on %s: %d, want 200", pprofAddr, c)
	}
	_, err = config.Parse(config.Run, []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--pprof-addr", "0.0.0.0:6060"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "must listen on loopback") {
		t.Errorf("pprof on 0.0.0.0: %v, want refused", err)
	}
}

// TestPprofWithoutMetrics: --pprof-addr serves with the metrics listener
// off; it once served only beside /metrics and was silently ignored.
func TestPprofWithoutMetrics(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg, err := config.Parse(config.Run, []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--http-addr", "", "--pprof-addr", addr}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	stop, err := serveHTTP(reg, pipeline.New(cfg.Config, log, reg), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if c := httpStatus(addr, "/debug/pprof/"); c != http.StatusOK {
		t.Errorf("pprof on %s with --http-addr empty: %d, want 200", addr, c)
	}
}

// A web config with no HTTP listener protects nothing: walstream says so
// instead of leaving an operator to believe the endpoints are guarded.
func TestWebConfigWithoutListener(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("unused"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, fmt.Appendf(nil, "basic_auth_users:\n  prometheus: %s\n", hash), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(config.Run, []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--http-addr", "", "--http-config-file", webConfig}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	stop, err := serveHTTP(reg, pipeline.New(cfg.Config, log, reg), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "--http-config-file is not used") {
		t.Errorf("no warning that the web config is unused; logs:\n%s", logs.String())
	}
}
