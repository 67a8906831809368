package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walstream/walstream/internal/testenv"
)

// TestRotation: secrets and certificates rotated while walstream streams
// are used from the next connection on, without a restart, and no row is
// lost or duplicated. Apache Kafka's listener takes SCRAM over mutual TLS
// and has clients re-authenticate every few seconds
// (connections.max.reauth.ms), as a cluster does that is meant to notice
// a changed password; Postgres takes the role's password with SCRAM.
//
//   - The SCRAM password changed on the broker and in the file: the next
//     re-authentication, and every connection after the broker's restart,
//     uses the file's new content.
//   - The client certificate reissued by another CA, which the broker
//     alone trusts from its restart on: new connections present the new
//     certificate.
//   - The Postgres password changed for the role and in the file, the
//     role's connections terminated: the next session logs in with it.
func TestRotation(t *testing.T) {
	t.Parallel()
	const pg1, pg2, kafka1, kafka2 = "pg-rot-Sekr1t-1", "pg-rot-Sekr1t-2", "kafka-rot-Sekr1t-1", "kafka-rot-Sekr1t-2"
	for _, s := range []string{pg1, pg2, kafka1, kafka2} {
		registerSecret(s)
	}
	ca := testenv.NewCA(t, "rotation-server-ca")
	clientCA1, clientCA2 := testenv.NewCA(t, "rotation-client-ca-1"), testenv.NewCA(t, "rotation-client-ca-2")
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	write := func(name string, content string) {
		t.Helper()
		// As a mounted Secret changes: a new file renamed into place.
		if err := os.WriteFile(path(name)+".new", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path(name)+".new", path(name)); err != nil {
			t.Fatal(err)
		}
	}
	copyTo := func(name, from string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		write(name, string(b))
	}
	copyTo("trusted-clients.pem", clientCA1.CertFile)
	kafkaCert, kafkaKey := ca.Issue(t, "kafka", "127.0.0.1")
	startKafka := testenv.StartKafkaAsync(t, testenv.KafkaConfig{
		Security: &testenv.KafkaSecurity{CertFile: kafkaCert, KeyFile: kafkaKey, ClientCAFile: path("trusted-clients.pem"),
			ScramUsers: map[string]string{"walstream": kafka1}},
		Props: map[string]string{"connections.max.reauth.ms": "3000"}})
	pg := testenv.StartPostgres(t, testenv.Settings("password_encryption = 'scram-sha-256'"))
	pg.Exec("postgres", outboxDDL)
	pg.Exec("postgres", fmt.Sprintf(`CREATE ROLE walsec LOGIN REPLICATION PASSWORD '%s';
		GRANT SELECT ON public.outbox TO walsec;
		CREATE PUBLICATION walstream_outbox FOR TABLE public.outbox %s`, pg1, publicationOptions("insert")))
	pg.Exec("postgres", "SELECT pg_create_logical_replication_slot('walstream', 'pgoutput')")
	pg.PrependHBA("host all walsec 127.0.0.1/32 scram-sha-256")
	write("pg-password", pg1+"\n")
	write("kafka-password", kafka1+"\n")
	cert1, key1 := clientCA1.Issue(t, "walstream-1")
	copyTo("tls.crt", cert1)
	copyTo("tls.key", key1)

	k := startKafka()
	// The test reads back on the plaintext listener, which asks nothing.
	e := &env{t: t, pg: pg, kafka: k, broker: k.Addr(), reader: []kgo.Opt{}}
	adm := adminOn(t, k)
	p := e.start([]string{
		"--pg-url", fmt.Sprintf("postgres://walsec@127.0.0.1:%d/postgres", pg.Port), "--pg-password-file", path("pg-password"), "--create=false",
		"--kafka-brokers", k.SecureAddr(), "--kafka-tls-ca-file", ca.CertFile,
		"--kafka-tls-cert-file", path("tls.crt"), "--kafka-tls-key-file", path("tls.key"),
		"--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-user", "walstream", "--kafka-sasl-password-file", path("kafka-password"),
	}).streaming(t)
	seq := 0
	rows := func(step string, within time.Duration) {
		t.Helper()
		e.insertTx("Order", 20, 4, &seq, false)
		e.waitConfirmed("walstream", e.currentLSN(), within, p)
		t.Logf("%s: rows confirmed", step)
	}
	rows("before any rotation", 30*time.Second)

	ctx := context.Background()
	write("kafka-password", kafka2+"\n")
	if _, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "walstream", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: kafka2}}); err != nil {
		t.Fatal(err)
	}
	rows("SCRAM password rotated", 30*time.Second)
	time.Sleep(7 * time.Second) // two re-authentications at least
	rows("SCRAM password rotated, re-authenticated", 30*time.Second)

	cert2, key2 := clientCA2.Issue(t, "walstream-2")
	copyTo("tls.key", key2)
	copyTo("tls.crt", cert2)
	copyTo("trusted-clients.pem", clientCA2.CertFile)
	if err := k.Restart(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rows("client certificate reissued, broker restarted", 120*time.Second)

	write("pg-password", pg2+"\n")
	pg.Exec("postgres", fmt.Sprintf("ALTER ROLE walsec PASSWORD '%s'", pg2))
	pg.Exec("postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'walsec'")
	rows("Postgres password rotated, connections terminated", 60*time.Second)

	p.stop()
	e.checkExactlyOnce(e.readAll("Order"), "outbox.event.")
	if log := p.Log(); strings.Contains(log, "SASL_AUTHENTICATION_FAILED") || strings.Contains(log, "password authentication failed") {
		t.Errorf("an authentication failed during the rotations:\n%s", log)
	}
}
