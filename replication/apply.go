package replication

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PreflightError is every step of a setup the connected role could not
// run, found before any of them ran.
type PreflightError struct {
	User     string
	Problems []string
}

func (e *PreflightError) Error() string {
	return fmt.Sprintf("role %s cannot run the setup; nothing was changed:\n  - %s", e.User, strings.Join(e.Problems, "\n  - "))
}

func (e *PreflightError) Is(target error) bool { return target == ErrSetup }

// roleGrants says whether a role can be made to replicate by the
// connected role, under a privilege model.
type roleGrants struct {
	exists, replicates bool
	// adminOf: the connected role holds the ADMIN option on it, which
	// Postgres 16 and later require to change its attributes.
	adminOf bool
}

// grantsSQL reads, for the role $1, whether it exists, whether it
// replicates under the model (rds_replication or the REPLICATION
// attribute, $2 true for the first) and whether the connected role is its
// admin.
const grantsSQL = `SELECT count(*) > 0,
	coalesce(bool_or(CASE WHEN $2 THEN EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = 'rds_replication' AND pg_has_role(r.oid, g.oid, 'MEMBER'))
		ELSE r.rolreplication END), false),
	coalesce(bool_or(pg_has_role(r.oid, 'MEMBER WITH ADMIN OPTION')), false)
	FROM pg_roles r WHERE r.rolname = $1`

// Preflight checks, before anything is created, that the connected role
// can run every step of the setup of n (the outbox tables, the
// publication, the slot and, unless role is empty, the role walstream
// runs as and its grant) under the privilege model named, or, when named
// is "", the server's, recognised by its settings. It returns that model,
// or a PreflightError naming each step it could not run and its fix.
// Postgres decides in the end: Apply runs the steps in a transaction.
func Preflight(ctx context.Context, conn *pgx.Conn, n Names, role string, named Provider) (Provider, error) {
	srv, err := lookupServer(ctx, conn, named)
	if err != nil {
		return "", err
	}
	model := srv.model()
	var problems []string
	problem := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if text := srv.modelFinding(); text != "" {
		problem("%s", text)
	}
	if !srv.logical() {
		problem("%v", walLevelError(srv))
	}

	var createRole, createDB, slotExists, pubExists, adminMember bool
	var version, slots, maxSlots int
	err = conn.QueryRow(ctx, `SELECT r.rolcreaterole, current_setting('server_version_num')::int,
		has_database_privilege(current_database(), 'CREATE'),
		(SELECT count(*) FROM pg_replication_slots)::int, current_setting('max_replication_slots')::int,
		EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1), EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2),
		EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = $3 AND pg_has_role(r.oid, g.oid, 'MEMBER'))
		FROM pg_roles r WHERE r.rolname = current_user`, n.Slot, n.Publication, model.adminRole()).
		Scan(&createRole, &version, &createDB, &slots, &maxSlots, &slotExists, &pubExists, &adminMember)
	if err != nil {
		return "", fmt.Errorf("reading what role %s may do: %w", srv.user, err)
	}

	// The outbox tables: each exists, or the role may create it; it owns
	// each that exists, for the publication, and may grant SELECT on it.
	type tableRights struct {
		name                                      string
		exists, schema, mayCreate, owns, mayGrant bool
	}
	var schemas []string
	for _, t := range n.Tables {
		schemas = append(schemas, t.Schema)
	}
	rows, err := conn.Query(ctx, `SELECT t.name, c.oid IS NOT NULL, ns.oid IS NOT NULL,
		coalesce(has_schema_privilege(ns.oid, 'CREATE'), false),
		coalesce(pg_has_role(c.relowner, 'USAGE'), false),
		coalesce(has_table_privilege(c.oid, 'SELECT WITH GRANT OPTION'), false)
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(name, schema, ord)
		LEFT JOIN pg_class c ON c.oid = to_regclass(t.name)
		LEFT JOIN pg_namespace ns ON ns.nspname = t.schema
		ORDER BY t.ord`, sqlNames(n.Tables), schemas)
	if err != nil {
		return "", fmt.Errorf("reading the outbox tables' privileges: %w", err)
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tableRights, error) {
		var t tableRights
		err := r.Scan(&t.name, &t.exists, &t.schema, &t.mayCreate, &t.owns, &t.mayGrant)
		return t, err
	})
	if err != nil {
		return "", fmt.Errorf("reading the outbox tables' privileges: %w", err)
	}
	for _, t := range tables {
		switch {
		case !t.exists && !t.schema:
			problem("table %s: its schema does not exist; create it first (CREATE SCHEMA)", t.name)
		case !t.exists && !t.mayCreate:
			problem("table %s: may not create it: GRANT CREATE ON SCHEMA to %s, or create the table as its owner", t.name, srv.user)
		}
		if t.exists && !pubExists && !t.owns {
			problem("publication %q: only the owner of table %s (or a member of its owner's role) may publish it; run init as the table's owner", n.Publication, t.name)
		}
		if t.exists && role != "" && !t.mayGrant {
			problem("grant SELECT on %s: %s may not grant it (it needs to own the table or hold SELECT WITH GRANT OPTION)", t.name, srv.user)
		}
	}
	if !pubExists && !createDB {
		problem("publication %q: may not create a publication: GRANT CREATE ON DATABASE to %s, or run init as the database's owner", n.Publication, srv.user)
	}
	if !slotExists {
		switch {
		case !srv.superuser && !srv.canReplicate && !(model == ProviderRDS && srv.rdsReplication):
			problem("slot %q: may not create a replication slot: %s", n.Slot, srv.grantFix())
		case slots >= maxSlots:
			problem("slot %q: all %d replication slots (max_replication_slots) are taken: raise max_replication_slots or drop a slot no one uses", n.Slot, maxSlots)
		}
	}
	if role != "" {
		var g roleGrants
		if err := conn.QueryRow(ctx, grantsSQL, role, model == ProviderRDS).Scan(&g.exists, &g.replicates, &g.adminOf); err != nil {
			return "", fmt.Errorf("reading role %q: %w", role, err)
		}
		if text := g.problem(srv, model, role, createRole, version, adminMember); text != "" {
			problem("role %q: %s", role, text)
		}
	}
	if len(problems) > 0 {
		return model, &PreflightError{User: srv.user, Problems: problems}
	}
	return model, nil
}

// problem says why the connected role cannot create the role or let it
// replicate under the model, "" when it can.
func (g roleGrants) problem(srv server, model Provider, role string, createRole bool, version int, adminMember bool) string {
	if !g.exists && !createRole && !srv.superuser {
		return fmt.Sprintf("may not create it: %s lacks CREATEROLE", srv.user)
	}
	if g.replicates || srv.superuser {
		return ""
	}
	switch model {
	case ProviderRDS:
		// Before Postgres 16 CREATEROLE grants any role but a superuser;
		// RDS lets rds_superuser grant rds_replication.
		if !adminMember && !(version < 160000 && createRole) {
			return fmt.Sprintf("may not grant rds_replication: %s is not a member of rds_superuser (run init as the master user)", srv.user)
		}
	case ProviderCloudSQL, ProviderAzure:
		if !adminMember {
			return fmt.Sprintf("may not give it REPLICATION: %s lets only a member of %s do that, which %s is not", model, model.adminRole(), srv.user)
		}
	default:
		switch {
		case version < 160000:
			return "may not give it REPLICATION: before Postgres 16 only a superuser may; run init as one, or have one run " + model.grantFix(role)
		case !createRole || !srv.canReplicate:
			return fmt.Sprintf("may not give it REPLICATION: a role needs CREATEROLE and REPLICATION itself to do that; %s lacks one", srv.user)
		case g.exists && !g.adminOf:
			return fmt.Sprintf("may not give it REPLICATION: %s does not hold the ADMIN option on it", srv.user)
		}
	}
	return ""
}

// Apply runs the steps of a setup on conn: every step but the slot's in
// one transaction, so that a failure leaves none of them; then the slot's
// (Step.Slot), alone, since Postgres refuses to create a logical slot in a
// transaction that has written, and would not undo it with a rollback.
// The slot comes last so that nothing depends on it. done is told each
// step once it is in effect. create watches the slot's creation, which
// waits for the transactions open when it begins.
func Apply(ctx context.Context, conn *pgx.Conn, steps []Step, slot string, create Create, done func(Step)) error {
	var tx, alone []Step
	for _, s := range steps {
		if s.Slot {
			alone = append(alone, s)
		} else {
			tx = append(tx, s)
		}
	}
	if len(tx) > 0 {
		err := pgx.BeginFunc(ctx, conn, func(t pgx.Tx) error {
			for _, s := range tx {
				if _, err := t.Exec(ctx, s.SQL); err != nil {
					return fmt.Errorf("creating %s: %w", s.Name, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w; nothing was changed: the setup runs in one transaction, which was rolled back", err)
		}
		for _, s := range tx {
			done(s)
		}
	}
	for _, s := range alone {
		if err := ExecWatched(ctx, conn, slot, s.SQL, create); err != nil {
			var made []string
			for _, d := range tx {
				made = append(made, d.Name)
			}
			return &PartialError{Done: made, Failed: s.Name, Err: err}
		}
		done(s)
	}
	return nil
}

// PartialError is a setup that stopped after some steps took effect:
// the transaction of the others committed, and the slot's creation
// failed.
type PartialError struct {
	Done   []string
	Failed string
	Err    error
}

func (e *PartialError) Error() string {
	if len(e.Done) == 0 {
		return fmt.Sprintf("creating %s: %v; nothing else was to be created", e.Failed, e.Err)
	}
	return fmt.Sprintf("creating %s: %v; %s took effect and stay: each step skips what exists, so running the setup again does only the rest",
		e.Failed, e.Err, strings.Join(e.Done, ", "))
}

func (e *PartialError) Unwrap() error { return e.Err }
