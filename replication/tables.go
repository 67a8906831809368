package replication

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Column is a table column as the catalog has it.
type Column struct {
	Name string
	Type uint32 // type OID
}

// TableInfo is an outbox table as the catalog has it now.
type TableInfo struct {
	Table
	// OID is the table's pg_class OID: a table dropped and created again
	// under the same name gets another.
	OID     uint32
	Columns []Column
	// SchemaPublished says the publication covers the table's whole schema
	// (FOR TABLES IN SCHEMA, Postgres 15+) or every table: a table created
	// again is in the publication from its CREATE TABLE on, so recreating
	// it loses no row.
	SchemaPublished bool
}

// DescribeTables reads the outbox tables' OIDs and columns, and whether
// publication covers them whatever their OID.
func DescribeTables(ctx context.Context, conn *pgx.Conn, n Names) ([]TableInfo, error) {
	// pg_publication_namespace exists from Postgres 15 on; a query naming it
	// does not even parse before.
	var schemas bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('pg_catalog.pg_publication_namespace') IS NOT NULL`).Scan(&schemas); err != nil {
		return nil, fmt.Errorf("describing the outbox tables: %w", err)
	}
	bySchema := "false"
	if schemas {
		bySchema = "EXISTS (SELECT 1 FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid AND pn.pnnspid = c.relnamespace)"
	}
	out := make([]TableInfo, 0, len(n.Tables))
	for _, t := range n.Tables {
		info := TableInfo{Table: t}
		var names []string
		var types []uint32
		err := conn.QueryRow(ctx, `SELECT c.oid,
				ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
				ARRAY(SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
				EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = $2 AND (p.puballtables OR `+bySchema+`))
			FROM pg_class c WHERE c.oid = to_regclass($1)`, t.SQL(), n.Publication).Scan(&info.OID, &names, &types, &info.SchemaPublished)
		if err != nil {
			if err == pgx.ErrNoRows {
				return nil, &SetupError{Object: "table " + t.SQL(), Reason: "does not exist", Fix: "create it, and add it to the publication in the same transaction"}
			}
			return nil, fmt.Errorf("describing table %s: %w", t, err)
		}
		for i := range names {
			info.Columns = append(info.Columns, Column{Name: names[i], Type: types[i]})
		}
		out = append(out, info)
	}
	return out, nil
}

// RecreateAdvice is how to create an outbox table again without losing
// rows: Postgres sends a table's rows only once it is in the publication,
// so rows committed between a separate CREATE TABLE and ALTER PUBLICATION
// are never sent.
func (n Names) RecreateAdvice(t Table) string {
	return fmt.Sprintf("create a table and add it to the publication in one transaction: BEGIN; CREATE TABLE %s (...); %s; COMMIT",
		t.SQL(), n.addTablesSQL([]Table{t}))
}
