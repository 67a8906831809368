package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/internal/testenv"
)

// Names of what walbench creates in Postgres. Every run drops and
// recreates them.
const (
	benchTable        = "public.outbox"
	benchPublication  = "walbench"
	slotRecvLogical   = "walbench_recvlogical"
	slotWalstream     = "walbench_walstream"
	slotWalstreamAvro = "walbench_walstream_avro"
)

// pgSettings are the throwaway cluster's settings beyond those of
// internal/testenv (no durability, since walstream's cost is under test,
// not the disk's): no autovacuum and no forced checkpoints, so that nothing
// writes WAL behind the benchmark's back.
var pgSettings = [...]string{
	"autovacuum = off",
	"max_wal_size = 16GB",
	"checkpoint_timeout = 1h",
	// The fleet scenario's streams: a slot, a walsender and a writer each.
	"max_replication_slots = 128",
	"max_wal_senders = 128",
	"max_connections = 400",
}

// postgres is the server walbench measures against: a throwaway cluster it
// started, or one given with -pg-url.
type postgres struct {
	url     string
	cluster *testenv.Postgres // nil when not started by walbench
}

// startPostgres initdbs a cluster from the server binaries in bin and
// starts it, with extra (name=value) after walbench's own settings.
func startPostgres(ctx context.Context, bin string, extra []string) (*postgres, error) {
	c, err := testenv.LaunchPostgres(ctx, testenv.PostgresConfig{BinDir: bin, Settings: append(pgSettings[:], extra...)})
	if err != nil {
		return nil, fmt.Errorf("%w (or pass -pg-url)", err)
	}
	return &postgres{url: c.URL("postgres", "postgres"), cluster: c}, nil
}

// stop stops a cluster walbench started and removes it.
func (pg *postgres) stop() error {
	if pg.cluster == nil {
		return nil
	}
	return pg.cluster.Close()
}

// setupSQL creates the payload function and the load procedure. The
// payload is an order as JSON, padded to the requested size with a "note".
// The procedure commits every perTx rows, so a million single-row
// transactions load at server speed, without a round trip each.
const setupSQL = `
CREATE OR REPLACE FUNCTION walbench_payload(g bigint, pad int) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
SELECT jsonb_build_object(
	'order_id', g,
	'customer_id', 'customer-' || (g % 9973),
	'status', 'created',
	'currency', 'EUR',
	'total_cents', (g * 7919) % 1000000,
	'items', jsonb_build_array(
		jsonb_build_object('sku', 'sku-' || (g % 1000), 'qty', 1 + g % 5, 'price_cents', (g * 31) % 10000),
		jsonb_build_object('sku', 'sku-' || ((g + 7) % 1000), 'qty', 1 + (g + 3) % 5, 'price_cents', (g * 17) % 10000)),
	'shipping', jsonb_build_object('country', 'DE', 'city', 'Berlin', 'zip', lpad((g % 100000)::text, 5, '0')),
	'note', repeat('x', pad))
$$;

CREATE OR REPLACE PROCEDURE walbench_load(first bigint, n bigint, per_tx bigint, pad int, aggtype text)
LANGUAGE plpgsql AS $$
DECLARE
	i bigint := first;
BEGIN
	WHILE i < first + n LOOP
		INSERT INTO public.outbox (aggregatetype, aggregateid, type, payload)
		SELECT aggtype, 'order-' || (g % 100000), 'OrderCreated', walbench_payload(g, pad)
		FROM generate_series(i, least(i + per_tx, first + n) - 1) AS g;
		COMMIT;
		i := i + per_tx;
	END LOOP;
END
$$;`

// resetSQL drops what a previous run left and creates the outbox table
// (the layout of testdata/outbox.sql without created_at, as in the
// end-to-end tests) and its publication.
const resetSQL = `
DROP PUBLICATION IF EXISTS walbench;
DROP TABLE IF EXISTS public.outbox;
CREATE TABLE public.outbox (
	id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	aggregatetype text NOT NULL,
	aggregateid text NOT NULL,
	type text NOT NULL,
	payload jsonb NOT NULL);
CREATE PUBLICATION walbench FOR TABLE public.outbox WITH (publish = 'insert');
CHECKPOINT;`

// db is walbench's own connection to the server for setup, loading and
// watching slots.
type db struct {
	conn *pgx.Conn
}

func connect(ctx context.Context, url string) (*db, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return nil, fmt.Errorf("connecting to Postgres: %w", err)
	}
	return &db{conn: conn}, nil
}

func (d *db) close() { d.conn.Close(context.Background()) }

func (d *db) exec(ctx context.Context, sql string, args ...any) error {
	if _, err := d.conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("running %q: %w", firstLine(sql), err)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// serverVersion is the server's version string.
func (d *db) serverVersion(ctx context.Context) (string, error) {
	var v string
	if err := d.conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "", fmt.Errorf("reading server_version: %w", err)
	}
	return v, nil
}

// padFor returns the padding that makes an average payload payloadBytes
// long as Postgres renders it (jsonb as text), for row numbers around g.
func (d *db) padFor(ctx context.Context, payloadBytes int, g int64) (int, error) {
	var base int
	if err := d.conn.QueryRow(ctx, "SELECT octet_length(walbench_payload($1, 0)::text)", g).Scan(&base); err != nil {
		return 0, fmt.Errorf("measuring the payload: %w", err)
	}
	if base > payloadBytes {
		return 0, fmt.Errorf("the payload without padding is %d bytes, over -payload-bytes %d", base, payloadBytes)
	}
	return payloadBytes - base, nil
}

// reset recreates the table and publication, dropping walbench's slots.
func (d *db) reset(ctx context.Context) error {
	if err := d.dropSlots(ctx); err != nil {
		return err
	}
	return d.exec(ctx, resetSQL)
}

// benchSlots are every slot walbench creates.
var benchSlots = []string{slotRecvLogical, slotGoRecv, slotWalstream, slotWalstreamAvro, slotDbzStandalone, slotDbzDistributed}

// dropSlots drops walbench's slots, waiting up to 30s for the walsenders
// of clients that just left to release them.
func (d *db) dropSlots(ctx context.Context) error {
	return d.dropSlotsWhere(ctx, "slot_name = ANY($1)", benchSlots)
}

// dropSlotsLike drops the slots whose names match pattern (LIKE), as
// dropSlots does walbench's own.
func (d *db) dropSlotsLike(ctx context.Context, pattern string) error {
	return d.dropSlotsWhere(ctx, "slot_name LIKE $1", pattern)
}

// dropSlotsWhere drops the slots that cond, on arg, picks.
func (d *db) dropSlotsWhere(ctx context.Context, cond string, arg any) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active int
		err := d.conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE "+cond+" AND active", arg).Scan(&active)
		if err != nil {
			return fmt.Errorf("reading walbench's slots: %w", err)
		}
		if active == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return d.exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE "+cond, arg)
}

// createSlot creates a pgoutput slot and returns its consistent point.
func (d *db) createSlot(ctx context.Context, name string) (pglogrepl.LSN, error) {
	var s string
	if err := d.conn.QueryRow(ctx, "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", name).Scan(&s); err != nil {
		return 0, fmt.Errorf("creating slot %s: %w", name, err)
	}
	return parseLSN(s)
}

// insertLSN is pg_current_wal_insert_lsn(). Right after a commit, on a
// server where nothing else writes, it is the end of that commit record:
// the position a client confirms once it has the transaction.
func (d *db) insertLSN(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := d.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return 0, fmt.Errorf("reading pg_current_wal_insert_lsn: %w", err)
	}
	return parseLSN(s)
}

// slotState is a slot's confirmed_flush_lsn and the PID of the walsender
// streaming it (0 when none).
func (d *db) slotState(ctx context.Context, slot string) (pglogrepl.LSN, int, error) {
	var lsn *string
	var pid *int32
	err := d.conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&lsn, &pid)
	if err != nil {
		return 0, 0, fmt.Errorf("reading slot %s: %w", slot, err)
	}
	var l pglogrepl.LSN
	if lsn != nil {
		if l, err = parseLSN(*lsn); err != nil {
			return 0, 0, err
		}
	}
	if pid == nil {
		return l, 0, nil
	}
	return l, int(*pid), nil
}

// load inserts n rows numbered from first, perTx rows per transaction, and
// returns the end LSN of the last commit.
func (d *db) load(ctx context.Context, first, n, perTx int64, pad int, aggType string) (pglogrepl.LSN, error) {
	// CALL with transaction control must not run inside a transaction
	// block; the simple protocol sends it as one plain statement.
	if _, err := d.conn.Exec(ctx, "CALL walbench_load($1, $2, $3, $4, $5)", pgx.QueryExecModeSimpleProtocol,
		first, n, perTx, pad, aggType); err != nil {
		return 0, fmt.Errorf("loading %d rows, %d per transaction: %w", n, perTx, err)
	}
	return d.insertLSN(ctx)
}

// loaded measures the outbox rows of one aggregate type: how many, the
// bytes of the Kafka records they become (key = aggregateid, value =
// payload as text, id header value), and the average payload.
func (d *db) loaded(ctx context.Context, aggType string) (rows, recordBytes int64, payloadAvg float64, err error) {
	err = d.conn.QueryRow(ctx, `SELECT count(*),
			coalesce(sum(octet_length(aggregateid) + octet_length(payload::text) + octet_length(id::text)), 0),
			coalesce(avg(octet_length(payload::text)), 0)::float8
		FROM public.outbox WHERE aggregatetype = $1`, aggType).Scan(&rows, &recordBytes, &payloadAvg)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("measuring the loaded rows: %w", err)
	}
	return rows, recordBytes, payloadAvg, nil
}

func parseLSN(s string) (pglogrepl.LSN, error) {
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return 0, fmt.Errorf("parsing LSN %q: %w", s, err)
	}
	return lsn, nil
}
