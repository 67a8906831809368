package replication

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Provider is how a Postgres service lets a role replicate: the privilege
// model init's setup follows and its checks explain.
type Provider string

// The privilege models walstream knows.
const (
	// ProviderPostgres is Postgres as released: a superuser (or, from
	// Postgres 16, a role with CREATEROLE and REPLICATION) gives a role
	// the REPLICATION attribute.
	ProviderPostgres Provider = "postgres"
	// ProviderRDS is Amazon RDS and Aurora: no role may be given the
	// REPLICATION attribute; a member of rds_replication replicates, and
	// the master user (rds_superuser) grants it.
	ProviderRDS Provider = "rds"
	// ProviderCloudSQL is Google Cloud SQL: a member of cloudsqlsuperuser
	// (the postgres user) runs ALTER ROLE ... WITH REPLICATION.
	ProviderCloudSQL Provider = "cloudsql"
	// ProviderAzure is Azure Database for PostgreSQL: its administrator,
	// a member of azure_pg_admin, runs ALTER ROLE ... WITH REPLICATION.
	ProviderAzure Provider = "azure"
)

// Providers are the privilege models, in the order they are listed.
func Providers() []Provider {
	return []Provider{ProviderPostgres, ProviderRDS, ProviderCloudSQL, ProviderAzure}
}

// ParseProvider reads a privilege model's name; "" is none named, which
// leaves it to the server's settings (Recognise).
func ParseProvider(s string) (Provider, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" || slices.Contains(Providers(), Provider(s)) {
		return Provider(s), nil
	}
	return "", fmt.Errorf("%q is not a provider walstream knows: postgres, rds (Amazon RDS and Aurora), cloudsql (Google Cloud SQL) or azure (Azure Database for PostgreSQL)", s)
}

// String names the service of the model.
func (p Provider) String() string {
	switch p {
	case ProviderRDS:
		return "Amazon RDS or Aurora"
	case ProviderCloudSQL:
		return "Google Cloud SQL"
	case ProviderAzure:
		return "Azure Database for PostgreSQL"
	case ProviderPostgres:
		return "Postgres"
	}
	return "no provider named"
}

// adminRole is the role the service makes its administrators members of,
// through which it lets them give a role the right to replicate; "" for
// Postgres as released.
func (p Provider) adminRole() string {
	switch p {
	case ProviderRDS:
		return "rds_superuser"
	case ProviderCloudSQL:
		return "cloudsqlsuperuser"
	case ProviderAzure:
		return "azure_pg_admin"
	}
	return ""
}

// grantFix is how to let role replicate under the model, and as whom.
func (p Provider) grantFix(role string) string {
	r := pgx.Identifier{role}.Sanitize()
	switch p {
	case ProviderRDS:
		return fmt.Sprintf("GRANT rds_replication TO %s (as the master user, a member of rds_superuser)", r)
	case ProviderCloudSQL, ProviderAzure:
		return fmt.Sprintf("ALTER ROLE %s WITH REPLICATION (as a member of %s)", r, p.adminRole())
	}
	return fmt.Sprintf("ALTER ROLE %s WITH REPLICATION", r)
}

// provider is a managed Postgres service walstream recognises by a setting
// only it has, with where logical decoding is turned on there: such a
// service refuses ALTER SYSTEM, so the fix for wal_level is the service's.
type provider struct {
	// Name is the service; Setting is the setting that tells it, whose
	// value the server shows.
	Name, Setting string
	// model is how the service lets a role replicate.
	model Provider
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
	{Name: "Amazon RDS or Aurora", Setting: "rds.logical_replication", model: ProviderRDS, logical: on,
		fix: "set rds.logical_replication = 1 in the instance's DB parameter group (Aurora: the DB cluster parameter group) and reboot; it sets wal_level = logical"},
	{Name: "Google Cloud SQL", Setting: "cloudsql.logical_decoding", model: ProviderCloudSQL, logical: on,
		fix: "set the database flag cloudsql.logical_decoding = on (the instance restarts); it sets wal_level = logical"},
	{Name: "Azure Database for PostgreSQL single server", Setting: "azure.replication_support", model: ProviderAzure,
		logical: func(v string) bool { return strings.EqualFold(v, "logical") },
		fix:     "set the server parameter azure.replication_support = LOGICAL and restart the server"},
	{Name: "Azure Database for PostgreSQL flexible server", Setting: "azure.extensions", model: ProviderAzure,
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

// model is the server's privilege model: the one named, else the
// recognised service's, else Postgres's.
func (s server) model() Provider {
	switch {
	case s.named != "":
		return s.named
	case s.provider != nil:
		return s.provider.model
	}
	return ProviderPostgres
}

// modelFinding says when the privilege model named is not the one the
// server's settings tell.
func (s server) modelFinding() string {
	if s.named == "" || s.provider == nil || s.provider.model == s.named {
		return ""
	}
	return fmt.Sprintf("the server is %s (%s is set), but %s was named as its provider", s.provider.Name, s.provider.Setting, s.named)
}

// grantFix is how to let user replicate here.
func (s server) grantFix() string { return s.model().grantFix(s.user) }
