// Package testenv starts the outside systems integration tests need: a
// throwaway Postgres cluster and a Kafka-protocol broker, on loopback. When
// CI is set, a system that cannot start fails the test instead of skipping.
package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PGBin is where Debian's postgresql package puts the server binaries.
const PGBin = "/usr/lib/postgresql/15/bin"

// unavailable skips the test, or fails it under CI, where every system
// the tests need must start.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set and "+format, args...)
	}
	t.Skipf(format+" (set CI=1 to make this a failure)", args...)
}

// Postgres is a throwaway cluster with wal_level=logical, trust auth on
// 127.0.0.1 and a superuser named postgres.
type Postgres struct {
	Dir  string
	Port int
	t    testing.TB
}

// StartPostgres initdbs and starts a cluster, stopped at the end of the test.
// Extra settings go into postgresql.conf.
func StartPostgres(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	if _, err := os.Stat(filepath.Join(PGBin, "initdb")); err != nil {
		unavailable(t, "Postgres 15 server binaries are missing in %s (apt-get install postgresql)", PGBin)
	}
	dir, err := os.MkdirTemp("", "walstream-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := chownToPostgres(dir); err != nil {
		unavailable(t, "cannot hand %s to the postgres user: %v", dir, err)
	}
	pg := &Postgres{Dir: dir, Port: FreePort(t), t: t}
	data := filepath.Join(dir, "data")
	if out, err := asPostgres(PGBin+"/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		unavailable(t, "initdb failed: %v\n%s", err, out)
	}
	conf := append([]string{
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", pg.Port),
		fmt.Sprintf("unix_socket_directories = '%s'", dir),
		"wal_level = logical",
		"max_replication_slots = 10",
		"max_wal_senders = 10",
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
		"shared_buffers = 128MB",
	}, settings...)
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("\n" + strings.Join(conf, "\n") + "\n")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.ctl("start", "-w", "-t", "60", "-l", filepath.Join(dir, "log")); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		unavailable(t, "pg_ctl start failed: %v\n%s", err, log)
	}
	t.Cleanup(func() { _ = pg.ctl("stop", "-m", "immediate", "-w") })
	return pg
}

func (pg *Postgres) ctl(args ...string) error {
	args = append([]string{"-D", filepath.Join(pg.Dir, "data")}, args...)
	out, err := asPostgres(PGBin+"/pg_ctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// EnableSSL turns on TLS with the given PEM certificate and key, which are
// copied where the server can read them.
func (pg *Postgres) EnableSSL(certFile, keyFile string) {
	pg.t.Helper()
	for src, dst := range map[string]string{certFile: "server.crt", keyFile: "server.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			pg.t.Fatal(err)
		}
		path := filepath.Join(pg.Dir, "data", dst)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			pg.t.Fatal(err)
		}
		if err := chownToPostgres(path); err != nil {
			pg.t.Fatal(err)
		}
	}
	pg.Exec("postgres", "ALTER SYSTEM SET ssl = on")
	pg.reload()
}

// PrependHBA puts lines at the top of pg_hba.conf and reloads.
func (pg *Postgres) PrependHBA(lines ...string) {
	pg.t.Helper()
	path := filepath.Join(pg.Dir, "data", "pg_hba.conf")
	old, err := os.ReadFile(path)
	if err != nil {
		pg.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"+string(old)), 0o600); err != nil {
		pg.t.Fatal(err)
	}
	pg.reload()
}

func (pg *Postgres) reload() {
	pg.t.Helper()
	if err := pg.ctl("reload"); err != nil {
		pg.t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the postmaster applies it asynchronously
}

// Stop stops the server (fast shutdown); Start starts it again.
func (pg *Postgres) Stop() error { return pg.ctl("stop", "-m", "fast", "-w") }

// Start starts a stopped server.
func (pg *Postgres) Start() error {
	return pg.ctl("start", "-w", "-t", "60", "-l", filepath.Join(pg.Dir, "log"))
}

// Restart restarts the server with pg_ctl's shutdown mode (fast, immediate).
func (pg *Postgres) Restart(mode string) error {
	return pg.ctl("restart", "-m", mode, "-w", "-t", "60", "-l", filepath.Join(pg.Dir, "log"))
}

// URL is a connection URL for the given database as the given role.
func (pg *Postgres) URL(role, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, pg.Port, db)
}

// Connect opens a connection as postgres to db, closed at test end.
func (pg *Postgres) Connect(db string) *pgx.Conn {
	pg.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL("postgres", db))
	if err != nil {
		pg.t.Fatalf("connecting to test Postgres: %v", err)
	}
	pg.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Exec runs SQL as postgres in db and fails the test on error.
func (pg *Postgres) Exec(db, sql string, args ...any) {
	pg.t.Helper()
	conn := pg.Connect(db)
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		pg.t.Fatalf("exec %q: %v", sql, err)
	}
	conn.Close(context.Background())
}

// asPostgres runs a server binary as the postgres user when this process
// is root, since Postgres refuses to run as root.
func asPostgres(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func chownToPostgres(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := PickPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// PickPort is FreePort for harnesses that run outside a test (walbench)
// or report errors their own way (the chaos suite).
func PickPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
