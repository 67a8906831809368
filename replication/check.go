package replication

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// server is what the connected role may do on the server.
type server struct {
	walLevel, user          string
	superuser, canReplicate bool
	// rdsReplication: the role is a member of Amazon RDS's
	// rds_replication, which lets it replicate there.
	rdsReplication bool
	// provider is the managed service the server is, nil for none known,
	// and providerValue its setting's value.
	provider      *provider
	providerValue string
	// named is the privilege model an operator named, "" for none.
	named Provider
}

// logical reports whether the server writes the WAL logical decoding needs.
func (s server) logical() bool { return s.walLevel == "logical" }

// mayStream reports whether the role may open a replication connection.
func (s server) mayStream() bool {
	return s.canReplicate || s.superuser || s.model() == ProviderRDS && s.rdsReplication
}

// lookupServer reads wal_level, the connected role's attributes and the
// settings that tell a managed service: the facts Prepare, Check and
// Preflight start from. named is the privilege model an operator named.
func lookupServer(ctx context.Context, conn *pgx.Conn, named Provider) (server, error) {
	s := server{named: named}
	values := make([]*string, len(providers))
	dst := []any{&s.walLevel, &s.user, &s.superuser, &s.canReplicate, &s.rdsReplication}
	for i := range values {
		dst = append(dst, &values[i])
	}
	err := conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_user, r.rolsuper, r.rolreplication, `+rdsReplicationSQL+`, `+providerSettingsSQL()+`
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(dst...)
	if err != nil {
		return s, fmt.Errorf("checking server settings: %w", err)
	}
	s.recognise(values)
	return s, nil
}

func walLevelError(srv server) error {
	reason := fmt.Sprintf("is %q, logical decoding needs 'logical'", srv.walLevel)
	if p := srv.provider; p != nil {
		reason += fmt.Sprintf(" (the server is %s, %s is %s)", p.Name, p.Setting, srv.providerValue)
	}
	return &SetupError{Object: "wal_level", Reason: reason, Fix: srv.walLevelFix()}
}

// Status is the state of one requirement in a Check.
type Status int

// Statuses of a requirement: met, met in a way to fix, not met.
const (
	OK Status = iota
	Warn
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "WARN"
	}
	return "FAIL"
}

// Finding is one requirement and whether the server meets it.
type Finding struct {
	Status Status
	Text   string
}

// TableColumns is an outbox table and the columns its mapping reads.
type TableColumns struct {
	Table   Table
	Columns []string
}

// Check reports, requirement by requirement, whether the connected role can
// stream n from this server: what Prepare requires, read without changing
// anything, for an operator. It also warns of a superuser, which works but
// is over-privileged. Fixes follow the privilege model p, or, when p is
// "", the server's, recognised by its settings.
func Check(ctx context.Context, conn *pgx.Conn, n Names, tables []TableColumns, p Provider) ([]Finding, error) {
	var out []Finding
	report := func(s Status, format string, a ...any) { out = append(out, Finding{s, fmt.Sprintf(format, a...)}) }
	srv, err := lookupServer(ctx, conn, p)
	if err != nil {
		return nil, err
	}
	if st, text := srv.providerFinding(); text != "" {
		report(st, "%s", text)
	}
	if text := srv.modelFinding(); text != "" {
		report(Fail, "%s", text)
	}
	if srv.logical() {
		report(OK, "wal_level is logical")
	} else {
		report(Fail, "wal_level is %s: %s", srv.walLevel, srv.walLevelFix())
	}
	switch {
	case srv.superuser:
		report(Warn, "role %s is a superuser: over-privileged; walstream needs only to log in, to replicate and SELECT on the outbox tables (walstream init prints it)", srv.user)
	case srv.canReplicate:
		report(OK, "role %s has REPLICATION and is not a superuser", srv.user)
	case srv.mayStream():
		report(OK, "role %s is a member of rds_replication, which lets it replicate on Amazon RDS and Aurora", srv.user)
	default:
		report(Fail, "role %s lacks REPLICATION: %s", srv.user, srv.grantFix())
	}
	described := Names{Publication: n.Publication}
	for _, t := range tables {
		described.Tables = append(described.Tables, t.Table)
	}
	infos, err := DescribeTables(ctx, conn, described)
	if err != nil {
		return nil, err
	}
	for i, t := range tables {
		if err := checkTable(ctx, conn, infos[i], t.Columns, srv.user, report); err != nil {
			return nil, err
		}
	}
	st, err := PollSlot(ctx, conn, n)
	if err != nil {
		return nil, err
	}
	switch {
	case !st.PublicationOK:
		report(Fail, "publication %s does not exist", n.Publication)
	default:
		for _, t := range n.Tables {
			switch {
			case slices.Contains(st.Missing, t):
				report(Fail, "publication %s does not include %s: %s", n.Publication, t, n.addTablesSQL([]Table{t}))
			case slices.Contains(st.PartitionsAsThemselves(), t):
				report(Fail, "publication %s publishes the rows of partitioned table %s under its partitions' names (publish_via_partition_root is off): %s",
					n.Publication, t, n.ViaRootSQL())
			case slices.Contains(st.Partitioned, t):
				report(OK, "publication %s includes partitioned table %s and publishes its partitions' rows as its own", n.Publication, t)
			default:
				report(OK, "publication %s includes %s", n.Publication, t)
			}
		}
	}
	if !st.Exists {
		report(Fail, "slot %s does not exist", n.Slot)
	} else if err := CheckSlot(n.Slot, st.Slot, conn.Config().Database); err != nil {
		report(Fail, "%v", err)
	} else {
		report(OK, "slot %s is a pgoutput slot, wal_status %s", n.Slot, st.WALStatus)
	}
	fo, err := CheckFailover(ctx, conn, n)
	if err != nil {
		return nil, err
	}
	if fo.Exists && fo.Failover {
		report(OK, "slot %s is a failover slot", n.Slot)
	}
	if fo.Supported && len(fo.StandbySlots) > 0 && len(fo.Warnings) == 0 {
		report(OK, "synchronized_standby_slots names %s", strings.Join(fo.StandbySlots, ", "))
	}
	for _, w := range fo.Warnings {
		report(Warn, "%s", w)
	}
	return out, nil
}

// checkTable reports whether an outbox table exists with the columns its
// mapping names, and whether user may read it.
func checkTable(ctx context.Context, conn *pgx.Conn, t TableInfo, columns []string, user string, report func(Status, string, ...any)) error {
	if !t.Exists() {
		report(Fail, "table %s does not exist", t.Table)
		return nil
	}
	report(OK, "table %s exists", t.Table)
	for _, c := range columns {
		if !slices.ContainsFunc(t.Columns, func(col Column) bool { return col.Name == c }) {
			report(Fail, "table %s has no column %s", t.Table, c)
		}
	}
	var canSelect bool
	if err := conn.QueryRow(ctx, `SELECT coalesce(has_table_privilege($1::oid, 'SELECT'), false)`, t.OID).Scan(&canSelect); err != nil {
		return fmt.Errorf("checking table %s: %w", t.Table, err)
	}
	if canSelect {
		report(OK, "role %s may SELECT from %s", user, t.Table)
	} else {
		report(Fail, "role %s may not SELECT from %s: GRANT SELECT ON %s TO %s", user, t.Table, t.Table.SQL(), pgx.Identifier{user}.Sanitize())
	}
	return nil
}

// Step is one idempotent statement of the setup, with why it is there.
// Name says what it makes, e.g. `publication "walstream_outbox"`, so that
// a report of the statements run names each one.
type Step struct {
	Name, Why, SQL string
	// Slot marks the step that creates the replication slot, which
	// Postgres cannot run in a transaction that has written.
	Slot bool
}

// SetupSteps is the idempotent SQL that creates the publication and the
// slot Prepare would create, and, when role is not empty, a role with the
// least walstream needs, let replicate the way the privilege model p does
// it ("" is Postgres's). The publication comes before the slot: pgoutput
// cannot decode changes older than the publication it is asked for.
func (n Names) SetupSteps(role string, failover bool, p Provider) []Step {
	// Whether an outbox table is partitioned is known only where the SQL
	// runs: the block looks, as Prepare does.
	var regclasses []string
	for _, t := range n.Tables {
		regclasses = append(regclasses, "to_regclass("+quoteLiteral(t.SQL())+")")
	}
	steps := []Step{
		{Name: fmt.Sprintf("publication %q", n.Publication), Why: "The publication: inserts into the outbox are decoded and sent to walstream; updates too, so that table.op.invalid.behavior sees them; " +
			"a partitioned outbox table's rows as the table's own (publish_via_partition_root), whichever partition holds them.",
			SQL: fmt.Sprintf(`DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = %s) THEN
        IF EXISTS (SELECT 1 FROM pg_class WHERE oid IN (%s) AND relkind = 'p') THEN
            %s;
        ELSE
            %s;
        END IF;
    END IF;
END $$`, quoteLiteral(n.Publication), strings.Join(regclasses, ", "), n.PublicationSQL(true), n.PublicationSQL(false))},
		n.slotStep(failover),
	}
	if role == "" {
		return steps
	}
	return append(steps, roleStep(role, p),
		Step{Name: fmt.Sprintf("grant SELECT on %s to %q", tableList(n.Tables), role), Why: "It reads the outbox tables and nothing else; run walstream as this role and let it create nothing.",
			SQL: fmt.Sprintf("GRANT SELECT ON %s TO %s", tableList(n.Tables), pgx.Identifier{role}.Sanitize())})
}

// roleStep creates role, able to log in, and lets it replicate as the
// privilege model p does; a role that exists keeps its attributes but is
// let replicate.
func roleStep(role string, p Provider) Step {
	r, lit := pgx.Identifier{role}.Sanitize(), quoteLiteral(role)
	why := "A role for walstream with the least it needs: to log in and replicate (set its password with ALTER ROLE ... PASSWORD, or use a client certificate)."
	replicate := fmt.Sprintf(`    IF NOT (SELECT rolreplication FROM pg_roles WHERE rolname = %s) THEN
        ALTER ROLE %s WITH REPLICATION;
    END IF;`, lit, r)
	switch p {
	case ProviderRDS:
		why += " Amazon RDS and Aurora let no role have the REPLICATION attribute: a member of rds_replication replicates."
		replicate = fmt.Sprintf(`    IF NOT pg_has_role(%s, 'rds_replication', 'MEMBER') THEN
        GRANT rds_replication TO %s;
    END IF;`, lit, r)
	case ProviderCloudSQL, ProviderAzure:
		why += fmt.Sprintf(" %s lets a member of %s give a role the REPLICATION attribute with ALTER ROLE.", p, p.adminRole())
	default:
		return Step{Name: fmt.Sprintf("role %q", role), Why: why, SQL: fmt.Sprintf(`DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) THEN
        CREATE ROLE %s LOGIN REPLICATION;
    END IF;
%s
END $$`, lit, r, replicate)}
	}
	return Step{Name: fmt.Sprintf("role %q", role), Why: why, SQL: fmt.Sprintf(`DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) THEN
        CREATE ROLE %s LOGIN;
    END IF;
%s
END $$`, lit, r, replicate)}
}

// OutboxTableStep creates an outbox table in Debezium's layout, with the
// columns its mapping reads: the event id, the route-by value, the key and
// the payload. Applications insert a row into it in the transaction that
// changes their data.
func OutboxTableStep(t Table, id, routeBy, key, payload string) Step {
	col := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	return Step{Name: "table " + t.SQL(), Why: "The outbox table " + t.String() + ", in Debezium's layout: applications insert a row here in the transaction that changes their data.",
		SQL: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    %-13s uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    %-13s text        NOT NULL,
    %-13s text        NOT NULL,
    type          text        NOT NULL,
    %-13s jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
)`, t.SQL(), col(id), col(routeBy), col(key), col(payload))}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// slotStep creates the slot, as a failover slot on servers that have them
// when failover is set.
func (n Names) slotStep(failover bool) Step {
	if !failover {
		return Step{Name: fmt.Sprintf("slot %q", n.Slot), Slot: true, Why: "The replication slot: Postgres keeps the WAL walstream has not confirmed. Created after the publication.",
			SQL: fmt.Sprintf("%s\nWHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %s)", n.CreateSlotSQL(false), quoteLiteral(n.Slot))}
	}
	return Step{Name: fmt.Sprintf("slot %q", n.Slot), Slot: true, Why: "The replication slot: Postgres keeps the WAL walstream has not confirmed. Created after the publication; " +
		"on Postgres 17 and later as a failover slot, which standbys that sync slots keep a copy of (see the failover settings below).",
		SQL: fmt.Sprintf(`DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %s) THEN
        IF current_setting('server_version_num')::int >= %d THEN
            PERFORM %s;
        ELSE
            PERFORM %s;
        END IF;
    END IF;
END $$`, quoteLiteral(n.Slot), failoverSlotsVersion, strings.TrimPrefix(n.CreateSlotSQL(true), "SELECT "), strings.TrimPrefix(n.CreateSlotSQL(false), "SELECT "))}
}

// RouteValues returns up to limit distinct values of column in table, as
// text, the NULL value left out: the route-by values of the rows an outbox
// holds, from which their topics follow. It gives up after two seconds:
// an outbox is usually small, but this is only a check.
func RouteValues(ctx context.Context, conn *pgx.Conn, t Table, column string, limit int) ([]string, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '2s'"); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, fmt.Sprintf("SELECT DISTINCT %[1]s::text FROM %[2]s WHERE %[1]s IS NOT NULL LIMIT %[3]d",
		pgx.Identifier{column}.Sanitize(), t.SQL(), limit))
	if err != nil {
		return nil, fmt.Errorf("reading the route-by values of %s: %w", t, err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading the route-by values of %s: %w", t, err)
	}
	return values, nil
}
