package replication

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/internal/testenv"
)

func TestParseHistory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    []HistoryEntry
		wantErr bool
	}{
		{"empty", "", nil, false},
		{"one promotion, as Postgres writes it", "1\t0/3000158\tno recovery target specified\n",
			[]HistoryEntry{{1, 0x3000158, "no recovery target specified"}}, false},
		{"two promotions, comments and blank lines",
			"# a comment\n1\t0/3000158\tno recovery target specified\n\n2\t1/A0000000\tbefore 2026-11-23 18:00:00+00\n",
			[]HistoryEntry{{1, 0x3000158, "no recovery target specified"}, {2, 0x1_A000_0000, "before 2026-11-23 18:00:00+00"}}, false},
		{"no reason", "1\t0/10\n", []HistoryEntry{{1, 0x10, ""}}, false},
		{"spaces instead of tabs", "3 0/20 at lsn 0/20\n", []HistoryEntry{{3, 0x20, "at lsn 0/20"}}, false},
		{"missing LSN", "1\n", nil, true},
		{"bad timeline", "x\t0/10\treason\n", nil, true},
		{"zero timeline", "0\t0/10\treason\n", nil, true},
		{"bad LSN", "1\tzz\treason\n", nil, true},
		{"timelines out of order", "2\t0/20\ta\n1\t0/30\tb\n", nil, true},
		{"switch points going back", "1\t0/30\ta\n2\t0/20\tb\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHistory([]byte(tc.content))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseHistory(%q) error = %v, want error %v", tc.content, err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseHistory(%q) = %+v, want %+v", tc.content, got, tc.want)
			}
		})
	}
}

func TestFork(t *testing.T) {
	// Timeline 4's history: 1 forked at 0/3000000, 2 at 0/5000000, and 3
	// at 0/9000000.
	h := []HistoryEntry{{1, 0x3000000, ""}, {2, 0x5000000, ""}, {3, 0x9000000, ""}}
	for _, tc := range []struct {
		name     string
		history  []HistoryEntry
		current  int32
		tli      int32
		wantFork pglogrepl.LSN
		wantOK   bool
	}{
		{"the server's own timeline", h, 4, 4, 0, true},
		{"the parent", h, 4, 3, 0x9000000, true},
		{"an older ancestor forked where it ended, not where the server's began", h, 4, 1, 0x3000000, true},
		{"a later timeline than the server's: an old primary", h, 4, 5, 0, false},
		{"not in the history: a sibling branch", []HistoryEntry{{1, 0x3000000, ""}, {3, 0x9000000, ""}}, 4, 2, 0, false},
		{"timeline 1 has no history", nil, 1, 1, 0, true},
		{"checkpoint on 2, server back on 1", nil, 1, 2, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fork, ok := Fork(tc.history, tc.current, tc.tli)
			if fork != tc.wantFork || ok != tc.wantOK {
				t.Fatalf("Fork(%v, %d, %d) = %s, %v; want %s, %v", tc.history, tc.current, tc.tli, fork, ok, tc.wantFork, tc.wantOK)
			}
		})
	}
}

// WALEnd answers what IDENTIFY_SYSTEM answers at the same moment, on a
// primary and on a standby (where a primary's WAL functions fail): never
// before an IDENTIFY_SYSTEM asked before it, never past one asked after.
func TestWALEnd(t *testing.T) {
	primary := testenv.StartPostgres(t)
	standby := testenv.StartStandby(t, primary, testenv.StandbyConfig{})
	ctx := context.Background()
	admin := connect(t, primary.URL("postgres", "postgres"))
	for _, pg := range []*testenv.Postgres{primary, standby} {
		conn := connect(t, pg.URL("postgres", "postgres"))
		rconn, err := Dial(ctx, &conn.Config().Config)
		if err != nil {
			t.Fatal(err)
		}
		before, err := Identify(ctx, rconn)
		if err != nil {
			t.Fatal(err)
		}
		// WAL written since: the answers must move with it.
		if _, err := admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS walend (n int); INSERT INTO walend VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		var end pglogrepl.LSN
		testenv.Eventually(t, 10*time.Second, "the WAL written to reach the server", func() bool {
			if end, err = WALEnd(ctx, conn); err != nil {
				t.Fatal(err)
			}
			return end > before.XLogPos
		})
		after, err := Identify(ctx, rconn)
		rconn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if end > after.XLogPos {
			t.Errorf("Postgres %s: WALEnd = %s, past IDENTIFY_SYSTEM's %s after it", pg.Dir, end, after.XLogPos)
		}
	}
}
