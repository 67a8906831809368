package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
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
