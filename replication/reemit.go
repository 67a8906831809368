package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectReader opens a connection that reads an outbox table's rows for a
// re-emit: read-only, with the session settings the walsender renders
// column values in (Dial), so that a row read here has the text its INSERT
// had in the stream.
func ConnectReader(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	cfg = cfg.Copy()
	renderSettings(cfg.RuntimeParams)
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	return Connect(ctx, cfg)
}

// ReemitTable is what a re-emit reads of an outbox table: the columns the
// publication sends, in table order, and how to page through the rows
// that satisfy a predicate by primary key.
type ReemitTable struct {
	Table Table
	// Columns are the columns pgoutput sends of the table: not the
	// generated ones, and only those of the publication's column list
	// when it has one (Postgres 15 and later).
	Columns []Column
	// Key are the primary key's columns in key order, and KeyTypes their
	// types as format_type writes them.
	Key, KeyTypes []string
	// Where is the request's predicate, and-ed with the publication's row
	// filter when it has one: a row the stream never publishes is not
	// re-emitted either.
	Where string
}

// DescribeReemit reads what a re-emit of table t's rows that satisfy
// where needs, and plans the predicate in a read-only transaction so that
// one that does not parse, or names what the table lacks, is refused with
// Postgres' reason before any row is read. An error that FaultOfRequest
// reports is the request's, not the connection's.
func DescribeReemit(ctx context.Context, conn *pgx.Conn, n Names, t Table, where string) (*ReemitTable, error) {
	rt := &ReemitTable{Table: t, Where: where}
	var oid uint32
	var published bool
	err := conn.QueryRow(ctx, `SELECT c.oid, EXISTS (SELECT 1 FROM pg_publication_tables pt WHERE pt.pubname = $2 AND pt.schemaname = $3 AND pt.tablename = $4)
		FROM pg_class c WHERE c.oid = to_regclass($1)`, t.SQL(), n.Publication, t.Schema, t.Name).Scan(&oid, &published)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, &ReemitError{Table: t, Reason: "the table does not exist"}
	case err != nil:
		return nil, fmt.Errorf("describing %s for a re-emit: %w", t.SQL(), err)
	case !published:
		return nil, &ReemitError{Table: t, Reason: fmt.Sprintf("the table is not in publication %q: the stream does not publish it", n.Publication)}
	}
	// The publication's column list and row filter exist from Postgres 15
	// on; a query naming them does not parse before.
	var filters bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'pg_catalog.pg_publication_tables'::regclass AND attname = 'rowfilter')`).Scan(&filters); err != nil {
		return nil, fmt.Errorf("describing %s for a re-emit: %w", t.SQL(), err)
	}
	listed, rowFilter := "NULL::name[]", "NULL::text"
	if filters {
		listed, rowFilter = "pt.attnames", "pt.rowfilter"
	}
	var attnames []string
	var filter *string
	if err := conn.QueryRow(ctx, `SELECT `+listed+`, `+rowFilter+` FROM pg_publication_tables pt WHERE pt.pubname = $1 AND pt.schemaname = $2 AND pt.tablename = $3`,
		n.Publication, t.Schema, t.Name).Scan(&attnames, &filter); err != nil {
		return nil, fmt.Errorf("reading publication %q's columns and row filter of %s: %w", n.Publication, t.SQL(), err)
	}
	if filter != nil && *filter != "" {
		rt.Where = andPredicates(where, *filter)
	}
	rows, err := conn.Query(ctx, `SELECT a.attname::text, a.atttypid, a.atttypmod FROM pg_attribute a
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' AND ($2::text[] IS NULL OR a.attname = ANY ($2))
		ORDER BY a.attnum`, oid, attnames)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", t.SQL(), err)
	}
	var c Column
	if _, err := pgx.ForEachRow(rows, []any{&c.Name, &c.Type, &c.TypMod}, func() error {
		rt.Columns = append(rt.Columns, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", t.SQL(), err)
	}
	rows, err = conn.Query(ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
		FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.ord`, oid)
	if err != nil {
		return nil, fmt.Errorf("reading the primary key of %s: %w", t.SQL(), err)
	}
	var key, typ string
	if _, err := pgx.ForEachRow(rows, []any{&key, &typ}, func() error {
		rt.Key, rt.KeyTypes = append(rt.Key, key), append(rt.KeyTypes, typ)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading the primary key of %s: %w", t.SQL(), err)
	}
	if len(rt.Key) == 0 {
		return nil, &ReemitError{Table: t, Reason: "the table has no primary key, by which a re-emit reads its rows in chunks"}
	}
	if _, err := rt.explain(ctx, conn, "SELECT 1 FROM "+t.SQL()+" WHERE "+rt.where()); err != nil {
		return nil, err
	}
	return rt, nil
}

// andPredicates joins two predicates with AND; an empty one is left out.
func andPredicates(a, b string) string {
	switch {
	case strings.TrimSpace(a) == "":
		return b
	case strings.TrimSpace(b) == "":
		return a
	}
	return "(" + a + "\n) AND (" + b + "\n)"
}

// where is the predicate as the queries put it: in parentheses ended on a
// line of its own, so that a trailing comment ends with it.
func (rt *ReemitTable) where() string {
	if strings.TrimSpace(rt.Where) == "" {
		return "true"
	}
	return "(" + rt.Where + "\n)"
}

// keyList is the key's columns, comma-separated, with suffix after each.
func (rt *ReemitTable) keyList(suffix string) string {
	cols := make([]string, len(rt.Key))
	for i, k := range rt.Key {
		cols[i] = pgx.Identifier{k}.Sanitize() + suffix
	}
	return strings.Join(cols, ", ")
}

// orderBy is the key's columns qualified with the table, with suffix
// after each: in ORDER BY a bare name would be the output column of the
// same name, the key's text, whose order is not the key's.
func (rt *ReemitTable) orderBy(suffix string) string {
	cols := make([]string, len(rt.Key))
	for i, k := range rt.Key {
		cols[i] = pgx.Identifier{rt.Table.Schema, rt.Table.Name, k}.Sanitize() + suffix
	}
	return strings.Join(cols, ", ")
}

// keyParams is a row of parameters from $first on, cast to the key's types.
func (rt *ReemitTable) keyParams(first int) string {
	ps := make([]string, len(rt.Key))
	for i, t := range rt.KeyTypes {
		ps[i] = fmt.Sprintf("$%d::%s", first+i, t)
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

// explain plans query in a read-only transaction and returns the rows the
// planner expects. A plan that fails is the request's fault.
func (rt *ReemitTable) explain(ctx context.Context, conn *pgx.Conn, query string, args ...any) (int64, error) {
	var rows int64
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var plan []struct {
			Plan struct {
				Rows float64 `json:"Plan Rows"`
			} `json:"Plan"`
		}
		var b []byte
		if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+query, args...).Scan(&b); err != nil {
			return err
		}
		if err := json.Unmarshal(b, &plan); err != nil || len(plan) == 0 {
			return fmt.Errorf("reading the plan %s: %v", b, err)
		}
		rows = int64(plan[0].Plan.Rows)
		return nil
	})
	if err != nil {
		if FaultOfRequest(err) {
			return 0, &ReemitError{Table: rt.Table, Reason: "the predicate does not plan", Err: err}
		}
		return 0, fmt.Errorf("planning the re-emit of %s: %w", rt.Table.SQL(), err)
	}
	return rows, nil
}

// countTimeout bounds counting a request's rows; past it the planner's
// estimate stands in.
const countTimeout = 5 * time.Second

// Bounds returns the key of the last row that satisfies the predicate, in
// key order (nil when none does), and the number of rows up to it: counted
// when that takes at most countTimeout, else the planner's estimate.
func (rt *ReemitTable) Bounds(ctx context.Context, conn *pgx.Conn) (upper []string, estimate int64, err error) {
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT 1", rt.keyList("::text"), rt.Table.SQL(), rt.where(), rt.orderBy(" DESC"))
	vals := make([]*string, len(rt.Key))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	switch err := conn.QueryRow(ctx, q).Scan(ptrs...); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, 0, nil
	case err != nil:
		return nil, 0, rt.readError("reading the last key", err)
	}
	for _, v := range vals {
		if v == nil {
			return nil, 0, &ReemitError{Table: rt.Table, Reason: "a primary key column is NULL"}
		}
		upper = append(upper, *v)
	}
	args := make([]any, len(upper))
	for i, v := range upper {
		args[i] = v
	}
	matching := fmt.Sprintf("FROM %s WHERE %s AND (%s) <= %s", rt.Table.SQL(), rt.where(), rt.keyList(""), rt.keyParams(1))
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", countTimeout.Milliseconds())); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT count(*) "+matching, args...).Scan(&estimate)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "57014" { // canceled by the timeout
		estimate, err = rt.explain(ctx, conn, "SELECT 1 "+matching, args...)
	}
	if err != nil && !errors.As(err, new(*ReemitError)) {
		err = rt.readError("counting the rows", err)
	}
	return upper, estimate, err
}

// Chunk is rows read by ReadChunk: each row's columns' text (nil for
// NULL), in the order of Columns, and the key of the last.
type Chunk struct {
	Rows  [][][]byte
	Bytes int
	Last  []string
	// More says rows may follow: the read stopped at its limit of rows or
	// bytes, before the upper key.
	More bool
}

// ReadChunk reads, in one statement and so in one snapshot, the rows that
// satisfy the predicate with keys after after (from the first when nil)
// up to upper, in key order: at most limit rows, and no more once they
// hold maxBytes.
func (rt *ReemitTable) ReadChunk(ctx context.Context, conn *pgx.Conn, after, upper []string, limit, maxBytes int) (*Chunk, error) {
	cols := make([]string, len(rt.Columns))
	for i, c := range rt.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	var params [][]byte
	cond := fmt.Sprintf("(%s) <= %s", rt.keyList(""), rt.keyParams(1))
	for _, v := range upper {
		params = append(params, []byte(v))
	}
	if after != nil {
		cond += fmt.Sprintf(" AND (%s) > %s", rt.keyList(""), rt.keyParams(len(params)+1))
		for _, v := range after {
			params = append(params, []byte(v))
		}
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s AND %s ORDER BY %s LIMIT %d",
		strings.Join(cols, ", "), rt.keyList("::text"), rt.Table.SQL(), rt.where(), cond, rt.orderBy(""), limit)
	rr := conn.PgConn().ExecParams(ctx, q, params, nil, nil, nil)
	c := &Chunk{}
	n := len(rt.Columns)
	for rr.NextRow() {
		if len(c.Rows) >= limit || c.Bytes >= maxBytes {
			c.More = true
			break
		}
		vals := rr.Values()
		if len(vals) != n+len(rt.Key) {
			_, _ = rr.Close()
			return nil, fmt.Errorf("reading %s: %d columns, want %d", rt.Table.SQL(), len(vals), n+len(rt.Key))
		}
		size := 0
		for _, v := range vals {
			size += len(v)
		}
		// One buffer per row: the reader reuses its own.
		buf := make([]byte, 0, size)
		row := make([][]byte, n)
		for i, v := range vals[:n] {
			if v != nil {
				start := len(buf)
				buf = append(buf, v...)
				row[i] = buf[start:len(buf):len(buf)]
			}
		}
		c.Last = c.Last[:0]
		for _, v := range vals[n:] {
			c.Last = append(c.Last, string(v))
		}
		c.Rows = append(c.Rows, row)
		c.Bytes += size
	}
	if _, err := rr.Close(); err != nil {
		return nil, rt.readError("reading a chunk", err)
	}
	if len(c.Rows) == limit {
		c.More = true
	}
	if c.More && equalKeys(c.Last, upper) {
		c.More = false
	}
	return c, nil
}

func equalKeys(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (rt *ReemitTable) readError(what string, err error) error {
	if FaultOfRequest(err) {
		return &ReemitError{Table: rt.Table, Reason: what + " fails", Err: err}
	}
	return fmt.Errorf("%s of %s for a re-emit: %w", what, rt.Table.SQL(), err)
}

// ReemitError is a re-emit request that cannot be carried out: its table
// or its predicate is at fault, not the connection.
type ReemitError struct {
	Table  Table
	Reason string
	Err    error
}

func (e *ReemitError) Error() string {
	s := fmt.Sprintf("re-emit of %s: %s", e.Table, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ReemitError) Unwrap() error { return e.Err }

// FaultOfRequest reports whether err is Postgres refusing what a query
// asked rather than failing to answer: a predicate that does not parse or
// names what the table lacks, a value it cannot take, a privilege the role
// lacks. Trying again cannot help. A relation that does not exist is not
// the request's fault: a partition dropped, or the table recreated, while
// a chunk was read; a table missing when a request starts is a
// ReemitError.
func FaultOfRequest(err error) bool {
	var re *ReemitError
	if errors.As(err, &re) {
		return true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 || pe.Code == "42P01" {
		return false
	}
	switch pe.Code[:2] {
	case "22", "42", "0A", "21", "2F", "39", "P0", "23", "25", "2B":
		return true
	}
	return false
}

// CheckSignalTable checks that Debezium's signal table t exists and that
// the publication sends its rows, without which a signal would never
// reach walstream.
func CheckSignalTable(ctx context.Context, conn *pgx.Conn, n Names, t Table) error {
	infos, err := DescribeTables(ctx, conn, Names{Publication: n.Publication, Tables: []Table{t}})
	if err != nil {
		return fmt.Errorf("looking up the signal table: %w", err)
	}
	switch info := infos[0]; {
	case !info.Exists():
		return &SetupError{Object: "signal table " + t.SQL(), Reason: "does not exist",
			Fix: "create it as Debezium's: CREATE TABLE " + t.SQL() + " (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048)); " + n.addTablesSQL([]Table{t})}
	case !info.Published:
		return &SetupError{Object: "signal table " + t.SQL(), Reason: fmt.Sprintf("is not in publication %q, so no signal reaches walstream", n.Publication),
			Fix: n.addTablesSQL([]Table{t})}
	}
	return nil
}

// Estimate is the planner's estimate of the rows that satisfy the
// predicate.
func (rt *ReemitTable) Estimate(ctx context.Context, conn *pgx.Conn) (int64, error) {
	return rt.explain(ctx, conn, "SELECT 1 FROM "+rt.Table.SQL()+" WHERE "+rt.where())
}
