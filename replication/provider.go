package replication

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// provider is a managed Postgres service walstream recognises by a setting
// only it has, with where logical decoding is turned on there: such a
// service refuses ALTER SYSTEM, so the fix for wal_level is the service's.
type provider struct {
	// Name is the service; Setting is the setting that tells it, whose
	// value the server shows.
	Name, Setting string
	// logical reports whether the setting's value turns logical decoding
	// on; nil when the setting says only which service this is.
	logical func(value string) bool
	// fix turns logical decoding on.
	fix string
}

// providers are the services recognised, from their public documentation:
// Amazon RDS and Aurora turn logical decoding on with the parameter
// rds.logical_replication (1, shown as on), Google Cloud SQL with the
// database flag cloudsql.logical_decoding, Azure's single server with
// azure.replication_support = LOGICAL, and its flexible server with
// wal_level itself (recognised by azure.extensions, a parameter only
// Azure has). Each takes a restart.
var providers = []provider{
	{Name: "Amazon RDS or Aurora", Setting: "rds.logical_replication", logical: on,
		fix: "set rds.logical_replication = 1 in the instance's DB parameter group (Aurora: the DB cluster parameter group) and reboot; it sets wal_level = logical"},
	{Name: "Google Cloud SQL", Setting: "cloudsql.logical_decoding", logical: on,
		fix: "set the database flag cloudsql.logical_decoding = on (the instance restarts); it sets wal_level = logical"},
	{Name: "Azure Database for PostgreSQL single server", Setting: "azure.replication_support",
		logical: func(v string) bool { return strings.EqualFold(v, "logical") },
		fix:     "set the server parameter azure.replication_support = LOGICAL and restart the server"},
	{Name: "Azure Database for PostgreSQL flexible server", Setting: "azure.extensions",
		fix: "set the server parameter wal_level = logical and restart the server"},
}

func on(v string) bool { return v == "on" || v == "1" || strings.EqualFold(v, "true") }

// providerSettingsSQL reads each provider's setting, NULL where the server
// has none.
func providerSettingsSQL() string {
	cols := make([]string, len(providers))
	for i, p := range providers {
		cols[i] = fmt.Sprintf("current_setting(%s, true)", quoteLiteral(p.Setting))
	}
	return strings.Join(cols, ", ")
}

// rdsReplicationSQL says whether the role is a member of rds_replication,
// the role through which Amazon RDS and Aurora let a role replicate: they
// do not let anyone set the REPLICATION attribute.
const rdsReplicationSQL = `EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = 'rds_replication' AND pg_has_role(current_user, g.oid, 'MEMBER'))`

// recognise sets the server's provider from the settings read, in the
// order of providers; the first one found wins.
func (s *server) recognise(values []*string) {
	for i, v := range values {
		if v != nil && i < len(providers) {
			s.provider, s.providerValue = &providers[i], *v
			return
		}
	}
}

// walLevelFix is how to turn logical decoding on here.
func (s server) walLevelFix() string {
	if s.provider != nil {
		return s.provider.fix
	}
	return "set wal_level = logical in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart Postgres"
}

// providerFinding says which service this is, and whether its switch for
// logical decoding is on; empty for a server of no known service.
func (s server) providerFinding() (Status, string) {
	p := s.provider
	switch {
	case p == nil:
		return OK, ""
	case p.logical == nil:
		return OK, fmt.Sprintf("server is %s (%s is set)", p.Name, p.Setting)
	case p.logical(s.providerValue):
		return OK, fmt.Sprintf("server is %s: %s is %s", p.Name, p.Setting, s.providerValue)
	}
	return Fail, fmt.Sprintf("server is %s: %s is %s, logical decoding is off: %s", p.Name, p.Setting, s.providerValue, p.fix)
}

// grantFix is how to let user replicate here.
func (s server) grantFix() string {
	if s.provider != nil && s.provider.Setting == "rds.logical_replication" {
		return fmt.Sprintf("GRANT rds_replication TO %s", pgx.Identifier{s.user}.Sanitize())
	}
	return fmt.Sprintf("ALTER ROLE %s WITH REPLICATION", pgx.Identifier{s.user}.Sanitize())
}
