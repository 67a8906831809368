package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the command line in-process and returns what it printed.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		out, errOut, err := runCLI(t, args...)
		if err != nil || out != "walstream "+version+"\n" || errOut != "" {
			t.Errorf("%v: stdout %q, stderr %q, err %v; want the version on stdout", args, out, errOut, err)
		}
	}
}

// --help of every command goes to stdout, as the top-level help does.
func TestHelpGoesToStdout(t *testing.T) {
	for _, cmd := range []string{"run", "init", "status"} {
		out, errOut, err := runCLI(t, cmd, "--help")
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s --help: err %v, want flag.ErrHelp (exit 0)", cmd, err)
		}
		if !strings.HasPrefix(out, "Usage: walstream "+cmd) || errOut != "" {
			t.Errorf("%s --help: stdout %q..., stderr %q", cmd, firstLine(out), errOut)
		}
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// init and status list the settings they read, and not the others.
func TestHelpListsOnlyUsedFlags(t *testing.T) {
	for _, tc := range []struct {
		cmd      string
		want     []string
		dontWant []string
	}{
		{"init", []string{"-pg-url", "-apply", "-check", "-role", "-slot", "-table", "-event-id-column", "-additional-placement",
			"-kafka-acls", "-kafka-principal", "-kafka-brokers", "-stream", "-topic-creation"},
			[]string{"-kafka-tls-ca-file", "-max-batch-events", "-linger", "-http-addr", "-json", "-compression"}},
		{"status", []string{"-pg-url", "-kafka-brokers", "-kafka-tls-ca-file", "-kafka-sasl-user", "-checkpoint-topic", "-json"},
			[]string{"-max-batch-events", "-linger", "-http-addr", "-apply", "-role", "-event-id-column", "-compression"}},
		{"run", []string{"-pg-url", "-kafka-brokers", "-max-batch-events", "-http-addr", "-event-id-column"}, []string{"-apply", "-json"}},
	} {
		out, _, _ := runCLI(t, tc.cmd, "--help")
		for _, w := range tc.want {
			if !strings.Contains(out, "  "+w+" ") && !strings.Contains(out, "  "+w+"\n") {
				t.Errorf("%s --help lacks %s", tc.cmd, w)
			}
		}
		for _, w := range tc.dontWant {
			if strings.Contains(out, "  "+w+" ") || strings.Contains(out, "  "+w+"\n") {
				t.Errorf("%s --help lists %s, which it does not use", tc.cmd, w)
			}
		}
	}
}

// A bad flag is one line on the error, naming what the flag expects and
// where the help is; nothing else is printed.
func TestFlagErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--linger", "5"}, []string{`--linger "5"`, "a duration like 5ms", "walstream run --help"}},
		{[]string{"run", "--no-such-flag"}, []string{"unknown flag --no-such-flag", "walstream run --help"}},
		{[]string{"run", "--create=perhaps"}, []string{`--create "perhaps"`, "true or false"}},
		{[]string{"run", "--max-batch-events", "many"}, []string{`--max-batch-events "many"`, "a whole number"}},
		{[]string{"run", "--max-batch-events", "99999999999999999999"}, []string{"a whole number", "out of range"}},
		{[]string{"status", "--pg-url"}, []string{"--pg-url needs a value", "walstream status --help"}},
		{[]string{"init", "--apply=x"}, []string{`--apply "x"`, "true or false", "walstream init --help"}},
		{[]string{"run", "extra"}, []string{`unexpected argument "extra"`}},
		{[]string{"nonsense"}, []string{`unknown command "nonsense"`, "walstream --help"}},
	} {
		out, errOut, err := runCLI(t, tc.args...)
		if err == nil {
			t.Errorf("%v: accepted", tc.args)
			continue
		}
		if out != "" || errOut != "" {
			t.Errorf("%v printed usage: stdout %q stderr %q", tc.args, out, errOut)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error is more than one line: %q", tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not mention %q", tc.args, err, w)
			}
		}
	}
}

// Plain init only prints SQL: it needs no Postgres URL; --apply and
// --check do.
func TestInitWithoutPGURL(t *testing.T) {
	t.Setenv("WALSTREAM_PG_URL", "")
	os.Unsetenv("WALSTREAM_PG_URL")
	out, _, err := runCLI(t, "init")
	if err != nil || !strings.Contains(out, "CREATE PUBLICATION") {
		t.Fatalf("init without --pg-url: %v\n%s", err, out)
	}
	for _, mode := range []string{"--apply", "--check"} {
		if _, _, err := runCLI(t, "init", mode); err == nil || !strings.Contains(err.Error(), "--pg-url ($WALSTREAM_PG_URL): is required") {
			t.Errorf("init %s without --pg-url: %v, want --pg-url required", mode, err)
		}
	}
}

func TestEveryInterface(t *testing.T) {
	for addr, want := range map[string]bool{":19387": true, "0.0.0.0:9187": true, "[::]:9187": true,
		"127.0.0.1:9187": false, "localhost:9187": false, "10.0.0.5:9187": false, "": false} {
		if got := everyInterface(addr); got != want {
			t.Errorf("everyInterface(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestSSLMode: the startup line's pg_sslmode is the sslmode the URL or the
// DSN asks for, in either form, quoted or not (a connector config's DSN
// quotes every value), else $PGSSLMODE's, else libpq's prefer; text inside
// another value is no sslmode.
func TestSSLMode(t *testing.T) {
	for _, tc := range []struct{ conn, env, want string }{
		{"postgres://u@h/db", "", "prefer"},
		{"postgres://u@h/db?sslmode=verify-full", "", "verify-full"},
		{"postgresql://u@h1,h2/db?target_session_attrs=primary&sslmode=require", "", "require"},
		{"postgresql://u@h1,h2/db?sslmode=prefer", "", "prefer"},
		{"postgres://u@h/db?sslmode=%76erify-ca", "", "verify-ca"},
		{"postgres://u@h/db?application_name=sslmode%3Ddisable", "", "prefer"},
		{"dbname='app' host='db' port='5432' sslmode='verify-full' user='walstream'", "", "verify-full"},
		{"host=db sslmode=require", "", "require"},
		{"host = db sslmode = verify-ca", "", "verify-ca"},
		{"host=db application_name='x sslmode=disable'", "", "prefer"},
		{`host=db password='it\'s sslmode=disable' user=u`, "", "prefer"},
		{"host=db sslmode=allow", "", "allow"},
		{"host=db sslmode=disable", "", "disable"},
		{"host=db", "require", "require"},
		{"postgres://u@h/db?sslmode=disable", "require", "disable"},
	} {
		t.Run(tc.conn, func(t *testing.T) {
			t.Setenv("PGSSLMODE", tc.env)
			if got := sslMode(tc.conn); got != tc.want {
				t.Errorf("sslMode(%q) with PGSSLMODE=%q = %q, want %q", tc.conn, tc.env, got, tc.want)
			}
		})
	}
}

// TestValidate: validate accepts what run accepts and names what it does
// not, without connecting, and reports the memory limit run would set.
func TestValidate(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	out, _, err := runCLI(t, "validate", "--pg-url", "postgres://walstream@db.example:5433/app", "--kafka-brokers", "k1:9092,k2:9092", "--stream", "orders")
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	want := `settings valid: stream "orders", slot "walstream", Postgres db.example:5433 database "app" as "walstream", 2 Kafka brokers` + "\n" +
		"memory limit 67108864 bytes (the streams' queues and batches)\n"
	if out != want {
		t.Errorf("validate printed %q, want %q", out, want)
	}
	_, _, err = runCLI(t, "validate", "--pg-url", "postgres://db.example/app", "--kafka-brokers", "k1:9092", "--linger", "5")
	if err == nil || !strings.Contains(err.Error(), "--linger") {
		t.Errorf("validate --linger 5: %v, want an error naming --linger", err)
	}
	if _, _, err := runCLI(t, "validate", "--kafka-brokers", "k1:9092"); err == nil || !strings.Contains(err.Error(), "--pg-url") {
		t.Errorf("validate without --pg-url: %v, want it required", err)
	}
}

// TestValidateSecrets: validate checks a connector config whose secrets
// are in the Kubernetes API and AWS Secrets Manager offline, as a CI
// pipeline runs it, naming each reference it did not read; with
// --resolve-secrets it reads them as run does, and fails naming each
// store. Neither the Kubernetes API (no pod) nor AWS (its endpoint a
// closed port on loopback) can be reached.
func TestValidateSecrets(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "AKIDWALSTREAMTEST", "AWS_SECRET_ACCESS_KEY": "walstream-test-secret", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "1",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none")} {
		t.Setenv(k, v)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	path := filepath.Join(t.TempDir(), "connector.properties")
	connector := strings.Join([]string{"name=orders", "connector.class=io.debezium.connector.postgresql.PostgresConnector",
		"database.hostname=db.example", "database.dbname=app", "database.user=${secrets:app/db-creds:user}", "database.password=${secrets:app/db-creds:password}",
		"topic.prefix=app", "table.include.list=public.outbox", "transforms=outbox", "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter",
		"key.converter=org.apache.kafka.connect.storage.StringConverter", "value.converter=io.confluent.connect.avro.AvroConverter",
		"value.converter.schema.registry.url=http://registry:8081", "value.converter.basic.auth.credentials.source=USER_INFO",
		"value.converter.basic.auth.user.info=${secretsmanager:registry:userinfo}",
		"config.providers=secretsmanager", "config.providers.secretsmanager.class=com.amazonaws.kafka.config.providers.SecretsManagerConfigProvider",
		"config.providers.secretsmanager.param.region=eu-west-1", "config.providers.secretsmanager.param.endpoint=" + closed}, "\n")
	if err := os.WriteFile(path, []byte(connector), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "validate", "--config", path, "--kafka-brokers", "k1:9092")
	if err != nil {
		t.Fatalf("validate offline: %v", err)
	}
	for _, want := range []string{`settings valid: stream "app/debezium"`, "3 config provider references not read",
		path + ", line 5: database.user: ${secrets:app/db-creds:user}, key user of Secret db-creds (app) in the Kubernetes API",
		path + ", line 6: database.password: ${secrets:app/db-creds:password}, key password of Secret db-creds (app) in the Kubernetes API",
		path + ", line 15: value.converter.basic.auth.user.info: ${secretsmanager:registry:userinfo}, field userinfo of secret registry in AWS Secrets Manager"} {
		if !strings.Contains(out, want) {
			t.Errorf("validate printed:\n%s\nwant it to say %q", out, want)
		}
	}

	out, _, err = runCLI(t, "validate", "--config", path, "--kafka-brokers", "k1:9092", "--resolve-secrets")
	if err == nil {
		t.Fatalf("validate --resolve-secrets without the Kubernetes API or AWS passed:\n%s", out)
	}
	for _, want := range []string{"line 6: database.password: ${secrets:app/db-creds:password} (key password of Secret db-creds (app) in the Kubernetes API",
		"it does not run in a pod (KUBERNETES_SERVICE_HOST is not set)",
		"line 15: value.converter.basic.auth.user.info: ${secretsmanager:registry:userinfo} (field userinfo of secret registry in AWS Secrets Manager",
		"reading secret registry from AWS Secrets Manager (region eu-west-1)", ln.Addr().String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("validate --resolve-secrets: %v\nwant it to say %q", err, want)
		}
	}
}
