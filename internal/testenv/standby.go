package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// StandbyConfig says how StartStandby builds a standby.
type StandbyConfig struct {
	// Slot is the physical replication slot on the primary the standby
	// streams from (primary_slot_name); "" means "standby".
	Slot string
	// SyncSlots sets sync_replication_slots = on (Postgres 17 and later),
	// so that the standby keeps copies of the primary's failover slots.
	SyncSlots bool
	// Settings are further postgresql.conf lines for the standby.
	Settings []string
}

// StartStandby builds a streaming physical standby of primary, a running
// cluster of any supported major, and starts it; it is stopped and removed
// at the end of the test. It needs no pg_basebackup of the primary's major:
// it takes a base backup with the low-level API (pg_backup_start, a copy of
// the data directory, pg_backup_stop; pg_start_backup and pg_stop_backup
// before Postgres 15), writes backup_label and standby.signal, and streams
// from a physical slot created first, so that the primary keeps every WAL
// segment the standby needs from the backup's start on.
func StartStandby(t testing.TB, primary *Postgres, cfg StandbyConfig) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := LaunchStandby(ctx, primary, cfg)
	if err != nil {
		t.Fatalf("building a standby of Postgres %d: %v", primary.Major, err)
	}
	sb.t = t
	t.Cleanup(func() {
		_ = sb.ctl(context.Background(), "stop", "-m", "immediate", "-w")
		os.RemoveAll(sb.Dir)
	})
	return sb
}

// LaunchStandby is StartStandby for callers outside a test; the caller
// stops the standby with Close.
func LaunchStandby(ctx context.Context, primary *Postgres, cfg StandbyConfig) (*Postgres, error) {
	if cfg.Slot == "" {
		cfg.Slot = "standby"
	}
	if cfg.SyncSlots && primary.Major < 17 {
		return nil, fmt.Errorf("sync_replication_slots needs Postgres 17 or later, the primary is %d", primary.Major)
	}
	conn, err := pgx.Connect(ctx, primary.URL("postgres", "postgres"))
	if err != nil {
		return nil, fmt.Errorf("connecting to the primary: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", cfg.Slot); err != nil {
		return nil, fmt.Errorf("creating physical slot %s on the primary: %w", cfg.Slot, err)
	}
	sb, err := newCluster(primary.Major, primary.bin)
	if err == nil {
		err = sb.baseBackup(ctx, conn, primary)
		if err != nil {
			os.RemoveAll(sb.Dir)
		}
	}
	if err != nil {
		// The slot would hold the primary's WAL for a standby that
		// never comes.
		_, _ = conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", cfg.Slot)
		return nil, err
	}
	conf := append(sb.ownSettings(),
		fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=postgres dbname=postgres application_name=%s'", primary.Port, cfg.Slot),
		fmt.Sprintf("primary_slot_name = '%s'", cfg.Slot),
		"hot_standby = on",
		"hot_standby_feedback = on",
	)
	if cfg.SyncSlots {
		conf = append(conf, "sync_replication_slots = on")
	}
	conf = append(conf, cfg.Settings...)
	if err := appendFile(filepath.Join(sb.DataDir(), "postgresql.conf"), conf); err != nil {
		os.RemoveAll(sb.Dir)
		return nil, err
	}
	if err := writeOwned(filepath.Join(sb.DataDir(), "standby.signal"), ""); err != nil {
		os.RemoveAll(sb.Dir)
		return nil, err
	}
	if err := sb.firstStart(ctx); err != nil {
		os.RemoveAll(sb.Dir)
		return nil, fmt.Errorf("starting the standby: %w", err)
	}
	return sb, nil
}

// baseBackup copies the primary's data directory into sb's between the
// start and the stop of a non-exclusive backup on conn, and writes the
// backup_label the stop returns.
func (sb *Postgres) baseBackup(ctx context.Context, conn *pgx.Conn, primary *Postgres) error {
	start, stop := "SELECT pg_backup_start('walstream-testenv', true)", "SELECT labelfile, spcmapfile FROM pg_backup_stop(false)"
	if primary.Major < 15 {
		start, stop = "SELECT pg_start_backup('walstream-testenv', true, false)", "SELECT labelfile, spcmapfile FROM pg_stop_backup(false, false)"
	}
	if _, err := conn.Exec(ctx, start); err != nil {
		return fmt.Errorf("starting the base backup: %w", err)
	}
	copyErr := copyDataDir(primary.DataDir(), sb.DataDir())
	var label, spcmap *string
	if err := conn.QueryRow(ctx, stop).Scan(&label, &spcmap); err != nil {
		return errors.Join(copyErr, fmt.Errorf("stopping the base backup: %w", err))
	}
	if copyErr != nil {
		return copyErr
	}
	if label == nil {
		return errors.New("stopping the base backup: no backup_label returned")
	}
	if err := writeOwned(filepath.Join(sb.DataDir(), "backup_label"), *label); err != nil {
		return err
	}
	if spcmap != nil && *spcmap != "" {
		return writeOwned(filepath.Join(sb.DataDir(), "tablespace_map"), *spcmap)
	}
	return nil
}

// copyDataDir copies a running cluster's data directory, leaving out what
// a base backup leaves out: WAL (the standby streams it), the postmaster's
// files, replication slots, and runtime state. Files that vanish during the
// copy are skipped: WAL replay recreates what they held.
func copyDataDir(src, dst string) error {
	skip := map[string]bool{"postmaster.pid": true, "postmaster.opts": true, "backup_label": true, "tablespace_map": true}
	emptied := map[string]bool{"pg_wal": true, "pg_replslot": true, "pg_dynshmem": true, "pg_notify": true,
		"pg_serial": true, "pg_snapshots": true, "pg_stat_tmp": true, "pg_subtrans": true}
	uid, gid, chown, err := postgresIDs()
	if err != nil {
		return err
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("copying the data directory: %w", err)
		}
		rel, _ := filepath.Rel(src, path)
		top := strings.Split(rel, string(filepath.Separator))[0]
		if skip[rel] || (emptied[top] && rel != top) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return fmt.Errorf("copying the data directory: %w", err)
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			err = os.Mkdir(to, info.Mode().Perm())
		case info.Mode().IsRegular():
			err = copyFile(path, to, info.Mode().Perm())
		default:
			return nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return fmt.Errorf("copying %s: %w", rel, err)
		}
		if chown {
			return os.Lchown(to, uid, gid)
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeOwned(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := chownToPostgres(path); err != nil {
		return fmt.Errorf("handing %s to the postgres user: %w", path, err)
	}
	return nil
}

// Promote ends recovery on a standby, which then starts a new timeline
// and accepts writes; it waits until the promotion is done.
func (pg *Postgres) Promote() error {
	return pg.ctl(context.Background(), "promote", "-w", "-t", "60")
}

// Identity is what IDENTIFY_SYSTEM reports about a server.
type Identity struct {
	SystemID string
	Timeline int32
	// WALPos is the current WAL flush position on a primary, the replay
	// position on a standby.
	WALPos   pglogrepl.LSN
	Database string
}

// Identify runs IDENTIFY_SYSTEM on a replication connection to db: the
// system identifier, the timeline, and the WAL position.
func (pg *Postgres) Identify(ctx context.Context, db string) (Identity, error) {
	conn, err := pgconn.Connect(ctx, pg.URL("postgres", db)+"&replication=database")
	if err != nil {
		return Identity{}, fmt.Errorf("connecting for IDENTIFY_SYSTEM: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	r, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return Identity{}, fmt.Errorf("running IDENTIFY_SYSTEM: %w", err)
	}
	return Identity{SystemID: r.SystemID, Timeline: r.Timeline, WALPos: r.XLogPos, Database: r.DBName}, nil
}

// CurrentLSN is the server's current WAL position: on a primary
// pg_current_wal_insert_lsn() (with synchronous_commit off the flush
// position can trail the last commit), on a standby
// pg_last_wal_replay_lsn().
func (pg *Postgres) CurrentLSN(ctx context.Context) (pglogrepl.LSN, error) {
	conn, err := pgx.Connect(ctx, pg.URL("postgres", "postgres"))
	if err != nil {
		return 0, fmt.Errorf("connecting to read the WAL position: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s string
	err = conn.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
		ELSE pg_current_wal_insert_lsn() END::text`).Scan(&s)
	if err != nil {
		return 0, fmt.Errorf("reading the WAL position: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return 0, fmt.Errorf("parsing WAL position %q: %w", s, err)
	}
	return lsn, nil
}

// WaitReplayed waits until a standby has replayed the WAL up to lsn.
func (pg *Postgres) WaitReplayed(ctx context.Context, lsn pglogrepl.LSN) error {
	for {
		got, err := pg.CurrentLSN(ctx)
		if err == nil && got >= lsn {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the standby to replay %s (at %s, %v): %w", lsn, got, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SlotConfirmed is the confirmed_flush_lsn of a replication slot, 0 when
// the slot does not exist or has confirmed nothing.
func (pg *Postgres) SlotConfirmed(ctx context.Context, slot string) (pglogrepl.LSN, error) {
	conn, err := pgx.Connect(ctx, pg.URL("postgres", "postgres"))
	if err != nil {
		return 0, fmt.Errorf("connecting to read slot %s: %w", slot, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s *string
	err = conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && s == nil) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("reading the confirmed_flush_lsn of slot %s: %w", slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		return 0, fmt.Errorf("parsing the confirmed_flush_lsn %q of slot %s: %w", *s, slot, err)
	}
	return lsn, nil
}
