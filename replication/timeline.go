package replication

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Server is what IDENTIFY_SYSTEM says about the server a replication
// connection reached: which cluster, on which timeline, how far its WAL
// goes, and the database the connection is bound to.
type Server struct {
	SystemID string
	Timeline int32
	// XLogPos is the server's current WAL flush position: no position
	// past it names WAL this server has.
	XLogPos  pglogrepl.LSN
	Database string
}

// Identify runs IDENTIFY_SYSTEM on a replication connection.
func Identify(ctx context.Context, conn *pgconn.PgConn) (Server, error) {
	r, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return Server{}, fmt.Errorf("identifying the system: %w", err)
	}
	return Server{SystemID: r.SystemID, Timeline: r.Timeline, XLogPos: r.XLogPos, Database: r.DBName}, nil
}

// WALEnd asks, on a regular connection, what IDENTIFY_SYSTEM's XLogPos
// says: a primary's WAL flush position, a standby's WAL received or
// replayed, whichever is further. A replication connection answers
// IDENTIFY_SYSTEM only before it streams; this is the same position asked
// again later.
func WALEnd(ctx context.Context, conn *pgx.Conn) (pglogrepl.LSN, error) {
	var text string
	err := conn.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery()
		THEN greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) ELSE pg_current_wal_flush_lsn() END::text`).Scan(&text)
	if err != nil {
		return 0, fmt.Errorf("reading the server's WAL end: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(text)
	if err != nil {
		return 0, fmt.Errorf("reading the server's WAL end %q: %w", text, err)
	}
	return lsn, nil
}

// HistoryEntry is one line of a timeline history file: Timeline ended at
// Switch, where its child timeline (the next entry's, or the file's own)
// begins. WAL before Switch is shared by both; WAL from Switch on differs.
type HistoryEntry struct {
	Timeline int32
	Switch   pglogrepl.LSN
	Reason   string
}

// History runs TIMELINE_HISTORY for timeline tli and parses the file. The
// history of timeline 1 is empty: it has no ancestors, and Postgres has no
// file for it.
func History(ctx context.Context, conn *pgconn.PgConn, tli int32) ([]HistoryEntry, error) {
	if tli <= 1 {
		return nil, nil
	}
	r, err := pglogrepl.TimelineHistory(ctx, conn, tli)
	if err != nil {
		return nil, fmt.Errorf("reading the history of timeline %d: %w", tli, err)
	}
	h, err := ParseHistory(r.Content)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", r.FileName, err)
	}
	return h, nil
}

// ParseHistory parses the content of a timeline history file, as
// Postgres writes it: one "parent-timeline<TAB>switch-LSN<TAB>reason" line
// per ancestor, oldest first; blank lines and lines starting with # are
// ignored. Timelines must increase and switch points must not go back.
func ParseHistory(content []byte) ([]HistoryEntry, error) {
	var h []HistoryEntry
	sc := bufio.NewScanner(bytes.NewReader(content))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return nil, fmt.Errorf("line %d %q: want a timeline and a switch LSN", n, line)
		}
		tli, err := strconv.ParseInt(fields[0], 10, 32)
		if err != nil || tli < 1 {
			return nil, fmt.Errorf("line %d %q: timeline %q is not a positive number", n, line, fields[0])
		}
		lsn, err := pglogrepl.ParseLSN(fields[1])
		if err != nil {
			return nil, fmt.Errorf("line %d %q: switch LSN: %w", n, line, err)
		}
		e := HistoryEntry{Timeline: int32(tli), Switch: lsn, Reason: strings.Join(fields[2:], " ")}
		if k := len(h); k > 0 && (e.Timeline <= h[k-1].Timeline || e.Switch < h[k-1].Switch) {
			return nil, fmt.Errorf("line %d %q: timeline %d at %s does not follow timeline %d at %s",
				n, line, e.Timeline, e.Switch, h[k-1].Timeline, h[k-1].Switch)
		}
		h = append(h, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return h, nil
}

// Fork returns where timeline tli left the history of timeline current:
// WAL of tli before the returned LSN is also current's, WAL from it on is
// not. ok is false when tli is not current nor one of its ancestors (a
// sibling branch, or a later timeline than the server's). For current
// itself there is no fork: ok is true and the LSN is zero.
func Fork(history []HistoryEntry, current, tli int32) (fork pglogrepl.LSN, ok bool) {
	if tli == current {
		return 0, true
	}
	for _, e := range history {
		if e.Timeline == tli {
			return e.Switch, true
		}
	}
	return 0, false
}
