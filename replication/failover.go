package replication

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// failoverSlotsVersion is the first server_version_num with failover
// slots: a logical slot created with failover = true is copied to standbys
// that sync slots, so that it exists, at a position the standby has, on
// whichever of them is promoted.
const failoverSlotsVersion = 170000

// SupportsFailoverSlots reports whether a server of server_version_num
// version can create failover slots.
func SupportsFailoverSlots(version int) bool { return version >= failoverSlotsVersion }

// CreateSlotSQL creates the slot, as a failover slot when failover is set;
// the server must then support them.
func (n Names) CreateSlotSQL(failover bool) string {
	if failover {
		// Arguments: name, plugin, temporary, two-phase, failover.
		return fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput', false, false, true)", n.Slot)
	}
	return fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", n.Slot)
}

// AlterFailoverCommand converts an existing slot into a failover slot. It
// is a replication command: it runs on a replication connection
// (replication=database), while no client streams the slot.
func (n Names) AlterFailoverCommand() string {
	return fmt.Sprintf("ALTER_REPLICATION_SLOT %s (FAILOVER true)", n.Slot)
}

// ServerVersion returns the server's server_version_num.
func ServerVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var v int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading server_version_num: %w", err)
	}
	return v, nil
}

// FailoverState is whether the slot survives a promotion of a standby
// without losing or inventing events.
type FailoverState struct {
	Version int
	// Supported: the server has failover slots (Postgres 17 and later).
	Supported bool
	// Exists, Failover and Synced describe the slot: Failover is its
	// failover flag, Synced that it is a standby's copy of a primary's slot.
	Exists, Failover, Synced bool
	// StandbySlots is synchronized_standby_slots: the physical slots whose
	// standbys must have WAL before a logical walsender sends it.
	StandbySlots []string
	// Warnings say what stands between this setup and a safe failover.
	Warnings []string
}

// CheckFailover reads the slot's failover flag and the server's
// synchronized_standby_slots, and says what is missing for the slot to
// follow a promotion safely.
func CheckFailover(ctx context.Context, conn *pgx.Conn, n Names) (FailoverState, error) {
	var st FailoverState
	var standby string
	var exists, failover, synced *bool
	// to_jsonb reads the failover and synced columns without naming them:
	// before Postgres 17 they do not exist and read as NULL.
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int,
			coalesce(current_setting('synchronized_standby_slots', true), ''),
			(SELECT true FROM pg_replication_slots WHERE slot_name = $1),
			(SELECT (to_jsonb(s) ->> 'failover')::bool FROM pg_replication_slots s WHERE slot_name = $1),
			(SELECT (to_jsonb(s) ->> 'synced')::bool FROM pg_replication_slots s WHERE slot_name = $1)`,
		n.Slot).Scan(&st.Version, &standby, &exists, &failover, &synced)
	if err != nil {
		return st, fmt.Errorf("checking failover settings of slot %q: %w", n.Slot, err)
	}
	st.Supported = SupportsFailoverSlots(st.Version)
	st.Exists, st.Failover, st.Synced = exists != nil, failover != nil && *failover, synced != nil && *synced
	if !st.Supported {
		// Nothing to fix short of an upgrade, so not a warning: status
		// says it, and walstream stops after a promotion.
		return st, nil
	}
	if st.Exists && !st.Failover {
		st.Warnings = append(st.Warnings, fmt.Sprintf("slot %q is not a failover slot: it will not exist on a promoted standby; "+
			"convert it while walstream is stopped with the replication command %s (psql \"dbname=... replication=database\")",
			n.Slot, n.AlterFailoverCommand()))
	}
	for _, s := range strings.Split(standby, ",") {
		if s = strings.TrimSpace(s); s != "" {
			st.StandbySlots = append(st.StandbySlots, s)
		}
	}
	if len(st.StandbySlots) == 0 {
		st.Warnings = append(st.Warnings, "synchronized_standby_slots is empty: a standby promoted after an async failover "+
			"may lack transactions walstream already published (phantom events); set it to the standbys' physical slots")
		return st, nil
	}
	rows, err := conn.Query(ctx, `SELECT n, s.slot_type, coalesce(s.active, false)
		FROM unnest($1::text[]) n LEFT JOIN pg_replication_slots s ON s.slot_name = n`, st.StandbySlots)
	if err != nil {
		return st, fmt.Errorf("checking synchronized_standby_slots: %w", err)
	}
	for rows.Next() {
		var name string
		var typ *string
		var active bool
		if err := rows.Scan(&name, &typ, &active); err != nil {
			return st, fmt.Errorf("checking synchronized_standby_slots: %w", err)
		}
		switch {
		case typ == nil:
			st.Warnings = append(st.Warnings, fmt.Sprintf("synchronized_standby_slots names slot %q, which does not exist: "+
				"walstream receives nothing until it does", name))
		case *typ != "physical":
			st.Warnings = append(st.Warnings, fmt.Sprintf("synchronized_standby_slots names slot %q, which is a %s slot, not a standby's physical slot", name, *typ))
		case !active:
			st.Warnings = append(st.Warnings, fmt.Sprintf("synchronized_standby_slots names slot %q, which no standby streams: "+
				"walstream receives nothing newer than that standby has", name))
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("checking synchronized_standby_slots: %w", err)
	}
	return st, nil
}

// FailoverSetup is the configuration a failover slot needs, for a
// primary whose standbys stream through physical slots, to be printed for
// an operator.
func (n Names) FailoverSetup(database string) string {
	return fmt.Sprintf(`-- Failover slots (Postgres 17 and later): slot %[1]s follows a promotion only with
-- these settings. On the primary (postgresql.conf):
--   synchronized_standby_slots = 'standby1_slot'   # each failover candidate's physical slot;
--                                                  # walstream never gets WAL those standbys lack
-- On each standby (postgresql.conf):
--   sync_replication_slots = on
--   hot_standby_feedback = on
--   primary_slot_name = 'standby1_slot'
--   primary_conninfo = '... dbname=%[2]s'        # slot sync connects to a database
-- A slot created before this (or with --failover-slot=false) is converted, while walstream is
-- stopped, on a replication connection:
--   psql "dbname=%[2]s replication=database" -c "%[3]s"
-- Point walstream at every candidate: postgres://host1,host2/%[2]s?target_session_attrs=primary`,
		n.Slot, database, n.AlterFailoverCommand())
}

// MultiHostWarning returns a warning for a connection configuration that
// lists several hosts but does not ask for the primary: after a failover
// walstream could connect to a standby or to the old primary.
func MultiHostWarning(cfg *pgconn.Config) string {
	if cfg.ValidateConnect != nil {
		return ""
	}
	for _, f := range cfg.Fallbacks {
		if f.Host != cfg.Host || f.Port != cfg.Port {
			return "the Postgres URL lists several hosts without target_session_attrs=primary: walstream may connect to a standby " +
				"or an old primary; add target_session_attrs=primary"
		}
	}
	return ""
}

// RemoteHost names the server a connection reached, which for a
// multi-host URL is the one that accepted it.
func RemoteHost(conn *pgconn.PgConn) string {
	if a := conn.Conn().RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}
