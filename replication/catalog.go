package replication

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ColumnInfo is what the catalog says of a column that pgoutput's Relation
// message does not carry, and that Debezium reads from the catalog: NOT
// NULL, and the default as pg_get_expr writes it (empty for none).
type ColumnInfo struct {
	NotNull bool
	Default string
}

// Columns reads the catalog's NOT NULL and defaults of a table's columns,
// by name. A generated column's expression is not a default.
func Columns(ctx context.Context, conn *pgx.Conn, t Table) (map[string]ColumnInfo, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname, a.attnotnull, CASE WHEN a.attgenerated = '' THEN coalesce(pg_get_expr(d.adbin, d.adrelid), '') ELSE '' END
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, t.SQL())
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", t, err)
	}
	out := make(map[string]ColumnInfo)
	var name string
	var c ColumnInfo
	_, err = pgx.ForEachRow(rows, []any{&name, &c.NotNull, &c.Default}, func() error {
		out[name] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", t, err)
	}
	return out, nil
}
