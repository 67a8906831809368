package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultMajor is the Postgres major tests run on unless they ask for
// another: Debian's.
const DefaultMajor = 15

// debianBin is where Debian's postgresql package puts the server binaries
// of DefaultMajor; its client tools (psql, pg_recvlogical) serve every
// major.
const debianBin = "/usr/lib/postgresql/15/bin"

// majorsDir is where scripts/deps.sh installs the other majors' servers
// (initdb, pg_ctl, postgres), one directory per major. PG_MAJORS_DIR
// overrides it, as it does for the script.
const majorsDir = "/opt/walstream-pg"

// Majors returns the Postgres majors walstream supports and tests.
func Majors() []int { return []int{14, 15, 16, 17, 18} }

// BinDir is the directory of the server binaries of a Postgres major.
func BinDir(major int) string {
	if major == DefaultMajor {
		return debianBin
	}
	dir := majorsDir
	if d := os.Getenv("PG_MAJORS_DIR"); d != "" {
		dir = d
	}
	return filepath.Join(dir, strconv.Itoa(major), "bin")
}

// Unavailable skips the test, or fails it under CI, where every system
// the tests need must start.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set and "+format, args...)
	}
	t.Skipf(format+" (set CI=1 to make this a failure)", args...)
}

// baseSettings go into every cluster's postgresql.conf: logical decoding,
// room for slots and walsenders, and no durability, since the tests are
// about walstream, not the disk.
var baseSettings = [...]string{
	"listen_addresses = '127.0.0.1'",
	"wal_level = logical",
	"max_replication_slots = 10",
	"max_wal_senders = 10",
	"fsync = off",
	"synchronous_commit = off",
	"full_page_writes = off",
	"shared_buffers = 128MB",
}

// PostgresConfig says which cluster LaunchPostgres starts.
type PostgresConfig struct {
	// Major is the Postgres major version; 0 means DefaultMajor.
	Major int
	// BinDir overrides the directory of initdb, pg_ctl and postgres.
	BinDir string
	// Settings are postgresql.conf lines added after the defaults, so
	// they override them.
	Settings []string
}

// Option changes the cluster StartPostgres starts.
type Option func(*PostgresConfig)

// Version starts a cluster of the given Postgres major (see Majors).
func Version(major int) Option { return func(c *PostgresConfig) { c.Major = major } }

// Settings adds postgresql.conf lines, which override the defaults.
func Settings(lines ...string) Option {
	return func(c *PostgresConfig) { c.Settings = append(c.Settings, lines...) }
}

// Postgres is a throwaway cluster with trust auth on 127.0.0.1 and a
// superuser named postgres. The methods that fail a test (Connect, Exec,
// EnableSSL, PrependHBA) need a cluster from StartPostgres or
// StartStandby.
type Postgres struct {
	Dir   string // holds data/, the server log and the socket; owned by postgres
	Port  int
	Major int
	bin   string
	t     testing.TB // nil for a cluster from LaunchPostgres
}

// StartPostgres initdbs and starts a cluster (Postgres DefaultMajor unless
// Version says otherwise), stopped and removed at the end of the test.
//
// Under Main, the first cluster of each major a test starts (a top-level
// test with its subtests) is a copy of one initdb'ed once per test binary,
// which takes a fraction of initdb's time; such copies share their system
// identifier. Every other cluster of the test is initdb'ed, so the
// clusters one test starts are always distinct systems.
func StartPostgres(t testing.TB, opts ...Option) *Postgres {
	t.Helper()
	var cfg PostgresConfig
	for _, o := range opts {
		o(&cfg)
	}
	cfg.defaults()
	pg, err := launchPostgres(context.Background(), cfg, templateFor(t, cfg))
	if err != nil {
		Unavailable(t, "%v", err)
	}
	pg.t = t
	t.Cleanup(func() {
		_ = pg.ctl(context.Background(), "stop", "-m", "immediate", "-w")
		os.RemoveAll(pg.Dir)
	})
	return pg
}

// LaunchPostgres is StartPostgres for callers outside a test (walbench):
// it returns errors, and the caller stops the cluster with Close.
func LaunchPostgres(ctx context.Context, cfg PostgresConfig) (*Postgres, error) {
	cfg.defaults()
	return launchPostgres(ctx, cfg, nil)
}

// defaults fills in the major and its server binaries' directory.
func (cfg *PostgresConfig) defaults() {
	if cfg.Major == 0 {
		cfg.Major = DefaultMajor
	}
	if cfg.BinDir == "" {
		cfg.BinDir = BinDir(cfg.Major)
	}
}

// launchPostgres starts a cluster whose data directory is a copy of
// template's, or initdb's when template is nil.
func launchPostgres(ctx context.Context, cfg PostgresConfig, template *pgTemplate) (*Postgres, error) {
	if _, err := os.Stat(filepath.Join(cfg.BinDir, "initdb")); err != nil {
		return nil, fmt.Errorf("finding the Postgres %d server binaries in %s (run scripts/deps.sh as root): %w", cfg.Major, cfg.BinDir, err)
	}
	pg, err := newCluster(cfg.Major, cfg.BinDir)
	if err != nil {
		return nil, err
	}
	data := pg.DataDir()
	if template == nil {
		err = initdb(ctx, cfg, data)
	} else {
		err = template.copyTo(ctx, cfg, data)
	}
	if err != nil {
		os.RemoveAll(pg.Dir)
		return nil, err
	}
	conf := append(append(pg.ownSettings(), baseSettings[:]...), cfg.Settings...)
	if err := appendFile(filepath.Join(data, "postgresql.conf"), conf); err != nil {
		os.RemoveAll(pg.Dir)
		return nil, err
	}
	if err := pg.firstStart(ctx); err != nil {
		os.RemoveAll(pg.Dir)
		return nil, err
	}
	return pg, nil
}

// initdb makes a new cluster in data.
func initdb(ctx context.Context, cfg PostgresConfig, data string) error {
	if out, err := asPostgres(ctx, filepath.Join(cfg.BinDir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("running initdb of Postgres %d: %w\n%s", cfg.Major, err, out)
	}
	return nil
}

// templates are the clusters initdb'ed once per test binary (under Main)
// for StartPostgres to copy, by server binaries.
var templates struct {
	sync.Mutex
	dir   string                 // holds them; Main removes it
	byBin map[string]*pgTemplate // by BinDir
	used  map[string]bool        // top-level test and BinDir: a copy was handed out
}

// pgTemplate is a data directory initdb'ed once, made by the first copy.
type pgTemplate struct {
	once sync.Once
	data string
	err  error
}

// templateFor is the template whose copy a test's new cluster of cfg's
// servers may be (see StartPostgres), or nil.
func templateFor(t testing.TB, cfg PostgresConfig) *pgTemplate {
	shared.Lock()
	main := shared.main
	shared.Unlock()
	if !main {
		return nil
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	templates.Lock()
	defer templates.Unlock()
	if templates.used[top+"\x00"+cfg.BinDir] {
		return nil
	}
	if templates.byBin == nil {
		templates.byBin, templates.used = make(map[string]*pgTemplate), make(map[string]bool)
	}
	templates.used[top+"\x00"+cfg.BinDir] = true
	tp := templates.byBin[cfg.BinDir]
	if tp == nil {
		tp = &pgTemplate{}
		templates.byBin[cfg.BinDir] = tp
	}
	return tp
}

// copyTo copies the template into data, initdb'ing it first if it is the
// first copy.
func (tp *pgTemplate) copyTo(ctx context.Context, cfg PostgresConfig, data string) error {
	tp.once.Do(func() {
		templates.Lock()
		if templates.dir == "" {
			templates.dir, tp.err = os.MkdirTemp("", "walstream-pg-templates-")
			if tp.err == nil {
				tp.err = chownToPostgres(templates.dir)
			}
		}
		dir := templates.dir
		templates.Unlock()
		if tp.err != nil {
			tp.err = fmt.Errorf("creating the directory of cluster templates: %w", tp.err)
			return
		}
		sub, err := os.MkdirTemp(dir, fmt.Sprintf("%d-", cfg.Major))
		if err == nil {
			err = chownToPostgres(sub)
		}
		if err != nil {
			tp.err = fmt.Errorf("creating the directory of a cluster template: %w", err)
			return
		}
		tp.data = filepath.Join(sub, "data")
		tp.err = initdb(ctx, cfg, tp.data)
	})
	if tp.err != nil {
		return tp.err
	}
	// cp -a keeps the owner (postgres, when run as root) and the modes
	// Postgres checks.
	if out, err := exec.CommandContext(ctx, "cp", "-a", tp.data, data).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the Postgres %d cluster template: %w\n%s", cfg.Major, err, out)
	}
	return nil
}

// removeTemplates removes the cluster templates, once the tests are done.
func removeTemplates() {
	templates.Lock()
	defer templates.Unlock()
	if templates.dir != "" {
		os.RemoveAll(templates.dir)
	}
	templates.dir, templates.byBin, templates.used = "", nil, nil
}

// newCluster makes the directory of a cluster, owned by the postgres user,
// and picks its port.
func newCluster(major int, bin string) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "walstream-pg-")
	if err != nil {
		return nil, fmt.Errorf("creating the cluster directory: %w", err)
	}
	if err := chownToPostgres(dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("handing %s to the postgres user: %w", dir, err)
	}
	port, err := PickPort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Postgres{Dir: dir, Port: port, Major: major, bin: bin}, nil
}

// ownSettings are the lines that tie a data directory to this cluster: its
// port and socket directory.
func (pg *Postgres) ownSettings() []string {
	return []string{fmt.Sprintf("port = %d", pg.Port), fmt.Sprintf("unix_socket_directories = '%s'", pg.Dir)}
}

// Close stops a cluster from LaunchPostgres (fast shutdown) and removes it.
func (pg *Postgres) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := pg.ctl(ctx, "stop", "-m", "fast", "-w")
	if rerr := os.RemoveAll(pg.Dir); err == nil && rerr != nil {
		err = fmt.Errorf("removing %s: %w", pg.Dir, rerr)
	}
	return err
}

// DataDir is the cluster's data directory.
func (pg *Postgres) DataDir() string { return filepath.Join(pg.Dir, "data") }

// LogFile is the server log.
func (pg *Postgres) LogFile() string { return filepath.Join(pg.Dir, "log") }

// firstStart starts a new cluster, on another port should its own have
// been taken (startOnFreePort).
func (pg *Postgres) firstStart(ctx context.Context) error {
	return startOnFreePort(func(retry bool) error {
		if retry {
			port, err := PickPort()
			if err != nil {
				return err
			}
			// A later setting wins in postgresql.conf.
			if err := appendFile(filepath.Join(pg.DataDir(), "postgresql.conf"), []string{fmt.Sprintf("port = %d", port)}); err != nil {
				return err
			}
			pg.Port = port
		}
		return pg.start(ctx)
	})
}

func (pg *Postgres) start(ctx context.Context) error {
	if err := pg.ctl(ctx, "start", "-w", "-t", "60", "-l", pg.LogFile()); err != nil {
		log, _ := os.ReadFile(pg.LogFile())
		return fmt.Errorf("starting Postgres %d: %w\n%s", pg.Major, err, log)
	}
	return nil
}

func (pg *Postgres) ctl(ctx context.Context, args ...string) error {
	args = append([]string{"-D", pg.DataDir()}, args...)
	out, err := asPostgres(ctx, filepath.Join(pg.bin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("running pg_ctl %s: %w: %s", strings.Join(args, " "), err, out)
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
		path := filepath.Join(pg.DataDir(), dst)
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
	path := filepath.Join(pg.DataDir(), "pg_hba.conf")
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
	if err := pg.ctl(context.Background(), "reload"); err != nil {
		pg.t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the postmaster applies it asynchronously
}

// Stop stops the server (fast shutdown); Start starts it again.
func (pg *Postgres) Stop() error { return pg.ctl(context.Background(), "stop", "-m", "fast", "-w") }

// StopImmediate stops the server the way a crash would: no shutdown
// checkpoint, connections cut, WAL not sent to standbys.
func (pg *Postgres) StopImmediate() error {
	return pg.ctl(context.Background(), "stop", "-m", "immediate", "-w")
}

// Start starts a stopped server.
func (pg *Postgres) Start() error { return pg.start(context.Background()) }

// Restart restarts the server with pg_ctl's shutdown mode (fast, immediate).
func (pg *Postgres) Restart(mode string) error {
	return pg.ctl(context.Background(), "restart", "-m", mode, "-w", "-t", "60", "-l", pg.LogFile())
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
		pg.t.Fatalf("connecting to test Postgres %d: %v", pg.Major, err)
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
func asPostgres(ctx context.Context, name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

// postgresIDs are the uid and gid of the postgres user; ok is false when
// this process is not root and so runs the servers as itself.
func postgresIDs() (uid, gid int, ok bool, err error) {
	if os.Geteuid() != 0 {
		return 0, 0, false, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, false, fmt.Errorf("looking up the postgres user: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, false, fmt.Errorf("parsing the postgres user's ids: %w", err)
	}
	return uid, gid, true, nil
}

func chownToPostgres(path string) error {
	uid, gid, ok, err := postgresIDs()
	if !ok {
		return err
	}
	return os.Chown(path, uid, gid)
}

func appendFile(path string, lines []string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	_, err = f.WriteString("\n" + strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
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

// portTaken reports whether a server failed to start because a port
// picked for it was taken before it bound it (see PickPort). Nothing knows
// a new server's port yet, so its caller starts it again on another.
func portTaken(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "Address already in use"))
}

// startOnFreePort runs start, and again up to twice while its error says
// a port was taken (portTaken): a port PickPort found free can be taken by
// another process before the server binds it, and nothing knows a new
// server's ports yet, so a retry (retry true) picks others.
func startOnFreePort(start func(retry bool) error) error {
	for attempt := 1; ; attempt++ {
		err := start(attempt > 1)
		if attempt == 3 || !portTaken(err) {
			return err
		}
	}
}

// PickPort is FreePort for harnesses that run outside a test (walbench)
// or report errors their own way (the chaos suite).
//
// The port is drawn below the kernel's ephemeral range: a port from
// listening on port 0 comes from that range, and any outgoing connection on
// the machine (another test package's, run in parallel) can take it as its
// local port between the pick and the server's bind, which is what made a
// standby fail to start with "Address already in use" in CI.
func PickPort() (int, error) {
	const lowest = 10000
	if top := ephemeralLow(); top > lowest+1000 {
		for range 100 {
			port := lowest + rand.IntN(top-lowest)
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			ln.Close()
			return port, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}
