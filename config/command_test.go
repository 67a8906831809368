package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every setting a command lists is a flag: a renamed flag would otherwise
// silently drop out of its help.
func TestCommandSettingsExist(t *testing.T) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	var c Config
	c.Flags(fs)
	for _, name := range slices.Concat(InitSettings, StatusSettings, DiffSettings, ReemitSettings) {
		if fs.Lookup(name) == nil {
			t.Errorf("setting %q is not a flag", name)
		}
	}
}

// A web config file that does not parse is a setting error, and the error
// does not quote the file, which may hold password hashes or anything.
func TestHTTPConfigFileRefused(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"not a map": "s3cretHashValue\n",
		"bad field": "basic_auth_users: s3cretHashValue\n",
		"unknown":   "tls_server_config:\n  cert_file: x\nhunter: s3cretHashValue\n",
		"syntax":    "basic_auth_users:\n  admin: [s3cretHashValue\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Parse(Run, []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--http-config-file", path}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--http-config-file") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err %v, want an --http-config-file error naming the file", name, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error quotes the file: %v", name, err)
		}
	}
	ok := filepath.Join(dir, "ok.yml")
	if err := os.WriteFile(ok, []byte("basic_auth_users:\n  admin: $2y$10$abcdefghijklmnopqrstuuJ4u3Xr4m5c5m5c5m5c5m5c5m5c5m5c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(Run, []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--http-config-file", ok}, &bytes.Buffer{}); err != nil {
		t.Fatalf("a valid web config refused: %v", err)
	}
}

// --http-addr is checked as --pprof-addr is, before run would fail to
// listen: host:port with a port from 0 to 65535; empty turns it off.
func TestHTTPAddr(t *testing.T) {
	base := []string{"--pg-url", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	for _, addr := range []string{"", ":0", "127.0.0.1:9187", "0.0.0.0:9187", "[::]:9187", "localhost:65535"} {
		if _, err := Parse(Run, append(base, "--http-addr", addr), &bytes.Buffer{}); err != nil {
			t.Errorf("--http-addr %q: %v", addr, err)
		}
	}
	for _, addr := range []string{"nonsense", ":99999", ":65536", ":-1", "127.0.0.1:port", "127.0.0.1", "[::1:9187"} {
		_, err := Parse(Run, append(base, "--http-addr", addr), &bytes.Buffer{})
		wantRefused(t, err, "--http-addr ($WALSTREAM_HTTP_ADDR)", strconv.Quote(addr))
	}
	_, err := Parse(Run, append(base, "--pprof-addr", "127.0.0.1:99999"), &bytes.Buffer{})
	wantRefused(t, err, "--pprof-addr ($WALSTREAM_PPROF_ADDR)", `"127.0.0.1:99999"`)
}
