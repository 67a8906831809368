package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestMajors: StartPostgres starts every supported major with logical
// decoding on, and the server is the major asked for.
func TestMajors(t *testing.T) {
	for _, major := range Majors() {
		t.Run(fmt.Sprint(major), func(t *testing.T) {
			pg := StartPostgres(t, Version(major))
			var num int
			var level string
			conn := pg.Connect("postgres")
			if err := conn.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int, current_setting('wal_level')").Scan(&num, &level); err != nil {
				t.Fatal(err)
			}
			if got := num / 10000; got != major {
				t.Fatalf("server_version_num %d is major %d, want %d", num, got, major)
			}
			if level != "logical" {
				t.Fatalf("wal_level = %s, want logical", level)
			}
		})
	}
}

// TestStandby: a standby built with the low-level backup API streams the
// primary's rows, and once the primary is stopped like a crash and the
// standby promoted, it takes writes on timeline 2. On every major: 14 has
// other backup functions, 17 and later synchronize slots.
func TestStandby(t *testing.T) {
	for _, major := range Majors() {
		tc := struct {
			major     int
			syncSlots bool
		}{major, major >= 17}
		t.Run(fmt.Sprint(tc.major), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			primary := StartPostgres(t, Version(tc.major))
			primary.Exec("postgres", "CREATE TABLE t (id int PRIMARY KEY)")
			primary.Exec("postgres", "INSERT INTO t SELECT generate_series(1, 100)")
			standby := StartStandby(t, primary, StandbyConfig{Slot: "sb1", SyncSlots: tc.syncSlots})

			// Rows written after the backup arrive by streaming.
			primary.Exec("postgres", "INSERT INTO t SELECT generate_series(101, 250)")
			end, err := primary.CurrentLSN(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := standby.WaitReplayed(ctx, end); err != nil {
				t.Fatal(err)
			}
			count := func(pg *Postgres) (n int, inRecovery bool) {
				t.Helper()
				conn := pg.Connect("postgres")
				defer conn.Close(ctx)
				if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM t), pg_is_in_recovery()").Scan(&n, &inRecovery); err != nil {
					t.Fatal(err)
				}
				return n, inRecovery
			}
			if n, rec := count(standby); n != 250 || !rec {
				t.Fatalf("standby: %d rows, in recovery %v; want 250, true", n, rec)
			}
			var active bool
			if err := primary.Connect("postgres").QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'sb1'").Scan(&active); err != nil || !active {
				t.Fatalf("physical slot sb1 on the primary: active %v, %v", active, err)
			}
			if tc.syncSlots {
				var on string
				if err := standby.Connect("postgres").QueryRow(ctx, "SHOW sync_replication_slots").Scan(&on); err != nil || on != "on" {
					t.Fatalf("sync_replication_slots on the standby = %q, %v", on, err)
				}
			}
			before, err := standby.Identify(ctx, "postgres")
			if err != nil {
				t.Fatal(err)
			}
			pid, err := primary.Identify(ctx, "postgres")
			if err != nil {
				t.Fatal(err)
			}
			if before.Timeline != 1 || before.SystemID != pid.SystemID {
				t.Fatalf("standby identity %+v, primary %+v: want timeline 1 and the same system", before, pid)
			}

			if err := primary.StopImmediate(); err != nil {
				t.Fatal(err)
			}
			if err := standby.Promote(); err != nil {
				t.Fatal(err)
			}
			standby.Exec("postgres", "INSERT INTO t VALUES (251)")
			if n, rec := count(standby); n != 251 || rec {
				t.Fatalf("promoted standby: %d rows, in recovery %v; want 251, false", n, rec)
			}
			after, err := standby.Identify(ctx, "postgres")
			if err != nil {
				t.Fatal(err)
			}
			if after.Timeline != 2 || after.SystemID != pid.SystemID || after.WALPos <= before.WALPos {
				t.Fatalf("after promotion %+v, before %+v: want timeline 2, the same system, WAL moved on", after, before)
			}
		})
	}
}

// TestFirstStartMovesPort: a new cluster whose port was taken between the
// pick and the bind starts on another one instead of failing the test (CI
// once lost a standby that way).
func TestFirstStartMovesPort(t *testing.T) {
	pg := StartPostgres(t)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	taken := pg.Port
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := pg.firstStart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pg.Port == taken {
		t.Fatalf("port still %d, which another listener holds", taken)
	}
	var port int
	if err := pg.Connect("postgres").QueryRow(context.Background(), "SELECT current_setting('port')::int").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if port != pg.Port {
		t.Fatalf("server on port %d, cluster says %d", port, pg.Port)
	}
}

// TestPickPortOutsideEphemeral: picked ports lie below the kernel's
// ephemeral range, where no outgoing connection can take them.
func TestPickPortOutsideEphemeral(t *testing.T) {
	lo := ephemeralLow()
	if lo == 0 {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range")
	}
	for range 20 {
		port, err := PickPort()
		if err != nil {
			t.Fatal(err)
		}
		if port >= lo {
			t.Fatalf("picked port %d, inside the ephemeral range from %d", port, lo)
		}
	}
}

// TestPortTaken: a taken port is told apart from other failures, as Go's
// bind reports it and as the servers' logs word it.
func TestPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, bindErr := net.Listen("tcp", ln.Addr().String())
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{bindErr, true},
		{fmt.Errorf("starting kfake: %w", bindErr), true},
		{errors.New(`LOG:  could not bind IPv4 address "127.0.0.1": Address already in use`), true},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{nil, false},
	} {
		if got := portTaken(tc.err); got != tc.want {
			t.Errorf("portTaken(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestStartOnFreePort: a start is tried again, with retry set, only while
// its port was taken, and three times at most.
func TestStartOnFreePort(t *testing.T) {
	taken := fmt.Errorf("starting: %w", syscall.EADDRINUSE)
	other := errors.New("finding java")
	for _, tc := range []struct {
		name   string
		errs   []error
		want   error
		starts int
	}{
		{"started", []error{nil}, nil, 1},
		{"taken once", []error{taken, nil}, nil, 2},
		{"taken thrice", []error{taken, taken, taken, nil}, taken, 3},
		{"another failure", []error{other, nil}, other, 1},
		{"taken, then another failure", []error{taken, other, nil}, other, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var retries []bool
			err := startOnFreePort(func(retry bool) error {
				retries = append(retries, retry)
				return tc.errs[len(retries)-1]
			})
			if err != tc.want {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if len(retries) != tc.starts {
				t.Fatalf("started %d times, want %d", len(retries), tc.starts)
			}
			for i, retry := range retries {
				if retry != (i > 0) {
					t.Fatalf("start %d told retry %v", i+1, retry)
				}
			}
		})
	}
}
