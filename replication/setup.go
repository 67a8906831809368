package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrSetup marks a server that is not fit to stream from: wrong settings,
// missing privileges or objects, a lost slot. Retrying cannot fix it.
var ErrSetup = errors.New("postgres setup")

// SetupError says what is wrong with which object and how to fix it.
type SetupError struct {
	Object string // e.g. `slot "walstream"`
	Reason string
	Fix    string // SQL or a setting to change, when there is one
}

func (e *SetupError) Error() string {
	s := e.Object + ": " + e.Reason
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	return s
}

func (e *SetupError) Is(target error) bool { return target == ErrSetup }

// slotName is what Postgres accepts as a replication slot name.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// identifier is the subset of SQL identifiers walstream accepts for
// publications, schemas and tables: no quoting surprises in replication
// commands, which take no parameters.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// NameError is a name of Names that Validate refuses. Field is its field
// in Names (Slot, Publication or Tables), so that a caller can name the
// one setting that is wrong.
type NameError struct {
	Field string
	Err   error
}

func (e *NameError) Error() string { return e.Err.Error() }
func (e *NameError) Unwrap() error { return e.Err }

// Validate checks names before they reach SQL or a replication command:
// the first fault of each field, as a *NameError, joined.
func (n Names) Validate() error {
	var errs []error
	if !slotName.MatchString(n.Slot) {
		errs = append(errs, &NameError{"Slot", fmt.Errorf("slot name %q: use 1 to 63 lower-case letters, digits and underscores", n.Slot)})
	}
	if !identifier.MatchString(n.Publication) {
		errs = append(errs, &NameError{"Publication", fmt.Errorf("publication name %q: use a letter or underscore, then letters, digits, underscores or $", n.Publication)})
	}
	if err := validTables(n.Tables); err != nil {
		errs = append(errs, &NameError{"Tables", err})
	}
	return errors.Join(errs...)
}

// validTables checks the outbox tables' names: at least one, each once.
func validTables(tables []Table) error {
	if len(tables) == 0 {
		return errors.New("no outbox table")
	}
	seen := make(map[Table]bool)
	for _, t := range tables {
		for _, part := range []struct{ what, v string }{{"schema", t.Schema}, {"table", t.Name}} {
			if !identifier.MatchString(part.v) {
				return fmt.Errorf("%s name %q: use a letter or underscore, then letters, digits, underscores or $", part.what, part.v)
			}
		}
		if seen[t] {
			return fmt.Errorf("table %s is listed twice", t)
		}
		seen[t] = true
	}
	return nil
}

// Table is an outbox table.
type Table struct{ Schema, Name string }

// ParseTable reads a schema-qualified table name.
func ParseTable(s string) (Table, error) {
	schema, name, ok := strings.Cut(strings.TrimSpace(s), ".")
	if !ok {
		return Table{}, fmt.Errorf("table %q must be schema-qualified, like public.outbox", s)
	}
	return Table{schema, name}, nil
}

// ParseTables reads a comma-separated list of schema-qualified tables.
func ParseTables(s string) ([]Table, error) {
	var out []Table
	for _, name := range strings.Split(s, ",") {
		if strings.TrimSpace(name) == "" {
			continue
		}
		t, err := ParseTable(name)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func (t Table) String() string { return t.Schema + "." + t.Name }

// SQL is the table's quoted name.
func (t Table) SQL() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// Names are the objects walstream streams through: one slot and one
// publication for every outbox table.
type Names struct {
	Slot, Publication string
	Tables            []Table
}

// sqlNames are tables as quoted SQL names.
func sqlNames(tables []Table) []string {
	s := make([]string, len(tables))
	for i, t := range tables {
		s[i] = t.SQL()
	}
	return s
}

// tableList is tables as a list for SQL.
func tableList(tables []Table) string { return strings.Join(sqlNames(tables), ", ") }

// PublicationSQL creates the publication. It publishes updates too so that
// an UPDATE of an outbox row is seen and table.op.invalid.behavior applies.
// When an outbox table is partitioned it publishes the partitions' rows as
// the table's own (publish_via_partition_root, Postgres 13 and later):
// otherwise each row arrives under its partition's name, which no mapping
// names, and a partition attached later would be a table walstream never
// heard of.
func (n Names) PublicationSQL(partitioned bool) string {
	viaRoot := ""
	if partitioned {
		viaRoot = ", publish_via_partition_root = true"
	}
	return fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update'%s)",
		pgx.Identifier{n.Publication}.Sanitize(), tableList(n.Tables), viaRoot)
}

// ViaRootSQL makes the publication publish a partitioned table's rows as
// the table's own.
func (n Names) ViaRootSQL() string {
	return fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true)", pgx.Identifier{n.Publication}.Sanitize())
}

// viaRootError is the stop for a publication that publishes partitioned
// outbox tables' rows under their partitions' names. Postgres decodes WAL
// with the publication as it was when the WAL was written, so rows
// committed before the fix keep arriving under those names; the decoder
// is told which tables are partitions of an outbox table (DescribeRelation)
// and publishes them as the table's.
func (n Names) viaRootError(partitioned []Table) error {
	return &SetupError{Object: fmt.Sprintf("publication %q", n.Publication),
		Reason: fmt.Sprintf("publishes the rows of partitioned outbox table %s under its partitions' names (publish_via_partition_root is off), which walstream does not read",
			tableList(partitioned)),
		Fix: n.ViaRootSQL()}
}

func (n Names) addTablesSQL(tables []Table) string {
	return fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pgx.Identifier{n.Publication}.Sanitize(), tableList(tables))
}

// missingTables returns the tables whose names are not in present.
func (n Names) missingTables(present []string) []Table {
	var out []Table
	for _, t := range n.Tables {
		if !slices.Contains(present, t.String()) {
			out = append(out, t)
		}
	}
	return out
}

// Create says what Prepare may create when it is missing.
type Create struct {
	Publication bool
	Slot        bool
	// FailoverSlot creates the slot as a failover slot where the server
	// supports them (Postgres 17 and later), so that it follows a
	// promotion of a standby that syncs slots.
	FailoverSlot bool
	// Watch, if not nil, is told what the creation of the slot waits for,
	// from another goroutine, every WatchInterval while it waits: a new
	// slot waits for every transaction running when it began to end, which
	// on a busy primary lasts as long as the longest of them.
	Watch         func(SlotWait)
	WatchInterval time.Duration
	// Queries adds the blocking sessions' query text to what Watch is told.
	Queries bool
}

// Prepare checks that the server can stream the outbox and creates the
// publication and the slot when they are missing and create allows it. The
// publication is created first: a slot must not start decoding before the
// publication exists, or pgoutput fails on changes older than it.
func Prepare(ctx context.Context, conn *pgx.Conn, n Names, create Create) error {
	srv, err := lookupServer(ctx, conn, "")
	if err != nil {
		return err
	}
	if !srv.logical() {
		return walLevelError(srv)
	}
	if !srv.mayStream() {
		return &SetupError{Object: fmt.Sprintf("role %q", srv.user), Reason: "lacks the REPLICATION attribute", Fix: srv.grantFix()}
	}
	var existing []string
	err = conn.QueryRow(ctx, `SELECT ARRAY(SELECT t FROM unnest($1::text[]) t WHERE to_regclass(t) IS NOT NULL)`, sqlNames(n.Tables)).Scan(&existing)
	if err != nil {
		return fmt.Errorf("looking up the outbox tables: %w", err)
	}
	for _, t := range n.Tables {
		if !slices.Contains(existing, t.SQL()) {
			return &SetupError{Object: "table " + t.SQL(), Reason: "does not exist",
				Fix: "create the outbox table (columns id, aggregatetype, aggregateid, type, payload; walstream init prints it) or name the right table; " +
					"if it was dropped, " + n.RecreateAdvice(t)}
		}
	}
	if err := preparePublication(ctx, conn, n, create.Publication); err != nil {
		return err
	}
	return prepareSlot(ctx, conn, n, create)
}

func preparePublication(ctx context.Context, conn *pgx.Conn, n Names, create bool) error {
	var exists, inserts, viaRoot bool
	var included []string
	err := conn.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_or(pubinsert), false), coalesce(bool_or(pubviaroot), false),
		ARRAY(SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1)
		FROM pg_publication WHERE pubname = $1`, n.Publication).Scan(&exists, &inserts, &viaRoot, &included)
	if err != nil {
		return fmt.Errorf("looking up publication %q: %w", n.Publication, err)
	}
	partitioned, err := partitionedTables(ctx, conn, n)
	if err != nil {
		return err
	}
	obj := fmt.Sprintf("publication %q", n.Publication)
	missing := n.missingTables(included)
	switch {
	case !exists && !create:
		return &SetupError{Object: obj, Reason: "does not exist and creating it is off", Fix: "create it with: " + n.PublicationSQL(len(partitioned) > 0)}
	case !exists:
		if _, err := conn.Exec(ctx, n.PublicationSQL(len(partitioned) > 0)); err != nil {
			return fmt.Errorf("creating %s: %w", obj, err)
		}
	case len(partitioned) > 0 && !viaRoot:
		// Before the missing tables: pg_publication_tables then lists the
		// partitions, not the table, which would read as a table missing.
		return n.viaRootError(partitioned)
	case len(missing) > 0:
		return &SetupError{Object: obj, Reason: "does not include table " + tableList(missing),
			Fix: n.addTablesSQL(missing) + "; rows committed to it before that are never sent: " + n.RecreateAdvice(missing[0])}
	case !inserts:
		return &SetupError{Object: obj, Reason: "does not publish inserts",
			Fix: fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert, update')", pgx.Identifier{n.Publication}.Sanitize())}
	}
	return nil
}

// partitionedTables returns the outbox tables that are partitioned tables.
func partitionedTables(ctx context.Context, conn *pgx.Conn, n Names) ([]Table, error) {
	var ords []int64
	err := conn.QueryRow(ctx, `SELECT ARRAY(SELECT t.ord FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord)
		JOIN pg_class c ON c.oid = to_regclass(t.name) WHERE c.relkind = 'p' ORDER BY t.ord)`, sqlNames(n.Tables)).Scan(&ords)
	if err != nil {
		return nil, fmt.Errorf("looking up which outbox tables are partitioned: %w", err)
	}
	return n.byOrdinal(ords), nil
}

// byOrdinal returns the tables at the given 1-based positions of n.Tables,
// as SQL's WITH ORDINALITY numbers them.
func (n Names) byOrdinal(ords []int64) []Table {
	var out []Table
	for _, o := range ords {
		if o >= 1 && int(o) <= len(n.Tables) {
			out = append(out, n.Tables[o-1])
		}
	}
	return out
}

// Slot is the state of the replication slot as pg_replication_slots shows it.
type Slot struct {
	Plugin, Type, Database, WALStatus string
	Active                            bool
	ActivePID                         *int32
	ConfirmedFlush                    pglogrepl.LSN
	// HasConfirmed says confirmed_flush_lsn is not NULL: a logical slot
	// has none while it is being created, until it is consistent.
	HasConfirmed bool
}

// Creating reports whether the slot is a logical slot still being created:
// held, with no confirmed_flush_lsn yet. It cannot be streamed before.
func (s Slot) Creating() bool { return s.Type == "logical" && s.Active && !s.HasConfirmed }

// LookupSlot reads the slot's row from pg_replication_slots; ok is false
// when there is none.
func LookupSlot(ctx context.Context, conn *pgx.Conn, name string) (s Slot, ok bool, err error) {
	var plugin, database, walStatus *string
	var confirmed *string
	err = conn.QueryRow(ctx, `SELECT plugin, slot_type, database, wal_status, active, active_pid, confirmed_flush_lsn::text
		FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&plugin, &s.Type, &database, &walStatus, &s.Active, &s.ActivePID, &confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("looking up slot %q: %w", name, err)
	}
	s.Plugin, s.Database, s.WALStatus = deref(plugin), deref(database), deref(walStatus)
	if s.HasConfirmed = confirmed != nil; s.HasConfirmed {
		if s.ConfirmedFlush, err = pglogrepl.ParseLSN(*confirmed); err != nil {
			return s, false, fmt.Errorf("slot %q confirmed_flush_lsn %q: %w", name, *confirmed, err)
		}
	}
	return s, true, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func prepareSlot(ctx context.Context, conn *pgx.Conn, n Names, create Create) error {
	s, ok, err := LookupSlot(ctx, conn, n.Slot)
	if err != nil {
		return err
	}
	if ok {
		return CheckSlot(n.Slot, s, conn.Config().Database)
	}
	version, err := ServerVersion(ctx, conn)
	if err != nil {
		return err
	}
	failover := create.FailoverSlot && SupportsFailoverSlots(version)
	obj := fmt.Sprintf("slot %q", n.Slot)
	if !create.Slot {
		return &SetupError{Object: obj, Reason: "does not exist and creating it is off",
			Fix: "if walstream never streamed from it, create it with: " + n.CreateSlotSQL(failover) +
				"; if it did, rows may be lost: see docs/postgres.md, The slot is missing"}
	}
	if err := ExecWatched(ctx, conn, n.Slot, n.CreateSlotSQL(failover), create); err != nil {
		return fmt.Errorf("creating %s: %w", obj, err)
	}
	return nil
}

// ExecWatched runs sql, which creates slot (a setup step does), on conn,
// while another connection tells create.Watch what it waits for, every
// create.WatchInterval; without a Watch it only runs sql.
// A creation ctx cuts short is over when it returns: see cutShort.
func ExecWatched(ctx context.Context, conn *pgx.Conn, slot, sql string, create Create) error {
	pid := conn.PgConn().PID()
	if create.Watch == nil || create.WatchInterval <= 0 {
		_, err := conn.Exec(ctx, sql)
		return cutShort(ctx, conn.Config(), slot, pid, err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchCreation(wctx, conn.Config(), slot, int32(pid), create)
	}()
	_, err := conn.Exec(ctx, sql)
	stop()
	<-done
	return cutShort(ctx, conn.Config(), slot, pid, err)
}

// cutShortWait bounds how long cutShort waits for the backend to stop.
const cutShortWait = 10 * time.Second

// busyBackend asks whether backend $1 runs a query: a backend whose query
// was cancelled is idle until it reads that its connection was closed.
const busyBackend = `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state IS DISTINCT FROM 'idle')`

// cutShort makes sure a slot's creation that ctx ended (err) is over. pgx
// closes a connection whose query a context cut short and asks Postgres
// to cancel the query in the background; a process that exits at once (an
// interrupted init) may never ask, and the backend, not reading its
// connection while it waits for the transactions open before it, would
// go on and create the slot once they end, pinning WAL unseen. So the
// backend is cancelled from another connection until its query is over;
// if the slot exists then, its creation finished after all and nil is
// returned.
func cutShort(ctx context.Context, cfg *pgx.ConnConfig, slot string, pid uint32, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	failed := func(cerr error) error {
		return fmt.Errorf("%w; the backend (pid %d) creating slot %q may still create it: cancelling it: %w", err, pid, slot, cerr)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cutShortWait)
	defer cancel()
	conn, cerr := Connect(cctx, cfg)
	if cerr != nil {
		return failed(cerr)
	}
	defer conn.Close(cctx)
	for {
		var busy, exists bool
		cerr := conn.QueryRow(cctx, busyBackend, int32(pid)).Scan(&busy)
		if cerr == nil && busy {
			_, cerr = conn.Exec(cctx, `SELECT pg_cancel_backend($1)`, int32(pid))
		}
		if cerr == nil && !busy {
			_, exists, cerr = LookupSlot(cctx, conn, slot)
		}
		switch {
		case cerr != nil:
			return failed(cerr)
		case !busy && exists:
			return nil
		case !busy:
			return err
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("%w; the backend (pid %d) creating slot %q did not stop within %s and may still create it: "+
				"stop it with SELECT pg_cancel_backend(%d), then drop the slot if it exists", err, pid, slot, cutShortWait, pid)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// watchCreation tells create.Watch what the creation of slot by backend
// pid waits for, every create.WatchInterval until ctx ends. The first look
// is after one interval, so a creation that does not wait says nothing.
// It is best effort: a look that fails is skipped.
func watchCreation(ctx context.Context, cfg *pgx.ConnConfig, slot string, pid int32, create Create) {
	t := time.NewTicker(create.WatchInterval)
	defer t.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn == nil {
			c, err := Connect(ctx, cfg)
			if err != nil {
				continue
			}
			conn = c
		}
		w, err := SlotCreationWait(ctx, conn, slot, pid, create.Queries)
		if err != nil {
			if conn.IsClosed() {
				conn = nil
			}
			continue
		}
		if ctx.Err() == nil {
			create.Watch(w)
		}
	}
}

// CheckSlot reports a slot walstream cannot stream from.
func CheckSlot(name string, s Slot, database string) error {
	obj := fmt.Sprintf("slot %q", name)
	switch {
	case s.Type != "logical":
		return &SetupError{Object: obj, Reason: fmt.Sprintf("is a %s slot, walstream needs a logical one", s.Type)}
	case s.Plugin != "pgoutput":
		return &SetupError{Object: obj, Reason: fmt.Sprintf("uses output plugin %q, walstream needs pgoutput", s.Plugin),
			Fix: "choose another slot name, or drop this slot if nothing else uses it"}
	case s.Database != database:
		return &SetupError{Object: obj, Reason: fmt.Sprintf("belongs to database %q, not %q", s.Database, database)}
	case s.WALStatus == "lost":
		return &SetupError{Object: obj, Reason: "is invalidated (wal_status = lost): the WAL it needed was removed, events may be missing",
			Fix: "recreate the slot deliberately and reconcile the outbox, then restart allowing the slot to be ahead of the checkpoint (see docs/postgres.md, A slot invalidated or dropped)"}
	}
	return nil
}

// ApplicationName is the application_name walstream's connections give
// when the connection string sets none, so that pg_stat_activity, and an
// operator looking for what holds a slot or a lock, can tell them.
const ApplicationName = "walstream"

func named(params map[string]string) {
	if params["application_name"] == "" {
		params["application_name"] = ApplicationName
	}
}

// AppName is the application_name walstream's connections of cfg give:
// the connection string's, else ApplicationName. Another instance of the
// same stream holding a slot shows it in pg_stat_activity.
func AppName(cfg *pgconn.Config) string {
	if name := cfg.RuntimeParams["application_name"]; name != "" {
		return name
	}
	return ApplicationName
}

// Connect opens a regular connection, for setup, checks and slot polling.
func Connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	cfg = cfg.Copy()
	named(cfg.RuntimeParams)
	ctx, u := withUse(ctx)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, connectError("connecting to", &cfg.Config, u, err)
	}
	return conn, nil
}

// ConnectError is a failed connection attempt to Postgres. Its message is
// the last attempt's reason: with sslmode=prefer pgx first tries TLS, and a
// server without TLS refuses that before the real failure (a wrong
// password, a refused connection) comes from the plain attempt.
type ConnectError struct {
	Host     string
	Port     uint16
	Database string
	// Used says what the attempt authenticated with (the password file's
	// content and when it was read, or the IAM token's region and signing
	// time) when Credentials were installed; the error names it when the
	// server refused the authentication.
	Used string
	what string
	last error // the last attempt's error that is not the TLS fallback
	err  error // pgx's error, with every attempt
}

func (e *ConnectError) Error() string {
	var pgErr *pgconn.PgError
	if e.Used != "" && errors.As(e.last, &pgErr) && strings.HasPrefix(pgErr.Code, "28") { // invalid authorization specification
		return fmt.Sprintf("%s %s database %s: %v (%s)", e.what, e.Addr(), e.Database, e.last, e.Used)
	}
	return fmt.Sprintf("%s %s database %s: %v", e.what, e.Addr(), e.Database, e.last)
}

// Unwrap gives both the last real reason and pgx's whole error, so that
// errors.As finds the *pgconn.PgError and *pgconn.ConnectError it holds.
func (e *ConnectError) Unwrap() []error { return []error{e.last, e.err} }

// Addr is host:port, or the socket directory and port.
func (e *ConnectError) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))) }

func connectError(what string, cfg *pgconn.Config, u *use, err error) error {
	last := err
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		last = ce.Unwrap()
		if j, ok := last.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
			attempts := j.Unwrap()
			last = attempts[len(attempts)-1]
			for i := len(attempts) - 1; i >= 0; i-- {
				if !strings.Contains(attempts[i].Error(), "server refused TLS connection") {
					last = attempts[i]
					break
				}
			}
		}
	}
	return &ConnectError{Host: cfg.Host, Port: cfg.Port, Database: cfg.Database, Used: u.what, what: what, last: last, err: err}
}

// Loopback reports whether host names this machine, where an unencrypted
// connection crosses no network.
func Loopback(host string) bool {
	if host == "localhost" || strings.HasPrefix(host, "/") { // a Unix socket directory
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
