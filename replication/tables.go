package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Column is a table column as the catalog has it, with what pgoutput's
// Relation message does not carry and Debezium reads from the catalog.
type Column struct {
	Name string
	Type uint32 // type OID
	// TypMod is the type's modifier (numeric's precision and scale, a
	// time's precision), -1 for none.
	TypMod int32
	// Labels are an enum type's labels in their order, comma-separated;
	// empty for any other type.
	Labels string
	// NotNull is the column's NOT NULL constraint.
	NotNull bool
	// Default is the column's default as pg_get_expr writes it, empty for
	// none; a generated column's expression is not a default.
	Default string
}

// TableInfo is an outbox table as the catalog has it now.
type TableInfo struct {
	Table
	// OID is the table's pg_class OID, zero when no table has its name: a
	// table dropped and created again under the same name gets another.
	OID     uint32
	Columns []Column
	// Published says the publication covers the table: by name, by schema
	// or as every table.
	Published bool
	// SchemaPublished says the publication covers the table's whole schema
	// (FOR TABLES IN SCHEMA, Postgres 15+) or every table: a table created
	// again is in the publication from its CREATE TABLE on, so recreating
	// it loses no row.
	SchemaPublished bool
}

// Exists reports whether a table has the name.
func (i TableInfo) Exists() bool { return i.OID != 0 }

// DescribeTables reads the outbox tables from the catalog, in the order
// of n.Tables: their OIDs, their columns with NOT NULL and defaults, and
// whether the publication covers them, by name or whatever their OID. A
// table that does not exist is described with OID zero, not as an error,
// so that callers can tell a table dropped since they last saw it from
// one never created.
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
	// One row per column, or one row of NULLs for a table that does not
	// exist.
	rows, err := conn.Query(ctx, `SELECT t.ord, c.oid, a.attname::text, a.atttypid, a.atttypmod, a.attnotnull,
			CASE WHEN a.attgenerated = '' THEN coalesce(pg_get_expr(d.adbin, d.adrelid), '') ELSE '' END,
			coalesce((SELECT string_agg(e.enumlabel::text, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = a.atttypid), ''),
			EXISTS (SELECT 1 FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = $2 AND pr.prrelid = c.oid),
			EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = $2 AND (p.puballtables OR `+bySchema+`))
		FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord)
		LEFT JOIN pg_class c ON c.oid = to_regclass(t.name)
		LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		ORDER BY t.ord, a.attnum`, sqlNames(n.Tables), n.Publication)
	if err != nil {
		return nil, fmt.Errorf("describing the outbox tables: %w", err)
	}
	out := make([]TableInfo, len(n.Tables))
	for i, t := range n.Tables {
		out[i].Table = t
	}
	var (
		ord                     int64
		oid, typ                *uint32
		typmod                  *int32
		name, def, labels       *string
		notNull                 *bool
		listed, schemaPublished bool
	)
	_, err = pgx.ForEachRow(rows, []any{&ord, &oid, &name, &typ, &typmod, &notNull, &def, &labels, &listed, &schemaPublished}, func() error {
		if ord < 1 || int(ord) > len(out) {
			return fmt.Errorf("table number %d of %d", ord, len(out))
		}
		info := &out[ord-1]
		if oid == nil {
			return nil
		}
		info.OID, info.SchemaPublished, info.Published = *oid, schemaPublished, listed || schemaPublished
		if name != nil {
			info.Columns = append(info.Columns, Column{Name: *name, Type: *typ, TypMod: *typmod, Labels: *labels, NotNull: *notNull, Default: *def})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("describing the outbox tables: %w", err)
	}
	return out, nil
}

// TableMissing is the stop for an outbox table that does not exist and
// that walstream has no record of streaming.
func (n Names) TableMissing(t Table) error {
	return &SetupError{Object: "table " + t.SQL(), Reason: "does not exist", Fix: "create it, and add it to the publication in the same transaction"}
}

// TableDropped is the stop for an outbox table that does not exist,
// although walstream streamed it as OID oid up to checkpoint since: it was
// dropped after that. Rows committed to the old table before the drop are
// still in the slot; rows committed to a table created again under its
// name before it is in the publication never will be.
func (n Names) TableDropped(t Table, oid uint32, since string) error {
	return &SetupError{Object: "table " + t.SQL(),
		Reason: fmt.Sprintf("was dropped after checkpoint %s (OID %d) and does not exist now: rows committed to a table created again under its name before it is added to publication %q are never sent by Postgres",
			since, oid, n.Publication),
		Fix: "see docs/postgres.md, A recreated outbox table; " + n.RecreateAdvice(t) + "; walstream then stops at the new table's OID until it is accepted"}
}

// RecreateAdvice is how to create an outbox table again without losing
// rows: Postgres sends a table's rows only once it is in the publication,
// so rows committed between a separate CREATE TABLE and ALTER PUBLICATION
// are never sent.
func (n Names) RecreateAdvice(t Table) string {
	return fmt.Sprintf("create a table and add it to the publication in one transaction: BEGIN; CREATE TABLE %s (...); %s; COMMIT",
		t.SQL(), n.addTablesSQL([]Table{t}))
}

// PartitionRoot returns which of the outbox tables relation oid is a
// partition of, at any depth, as the catalog has it now; ok is false for
// none, and for a relation the catalog no longer has.
func PartitionRoot(ctx context.Context, conn *pgx.Conn, n Names, oid uint32) (t Table, ok bool, err error) {
	var ord *int64
	err = conn.QueryRow(ctx, `SELECT t.ord FROM unnest($2::text[]) WITH ORDINALITY AS t(name, ord)
		JOIN pg_partition_ancestors($1::oid::regclass) a ON a.relid = to_regclass(t.name)
		WHERE a.relid <> $1::oid::regclass LIMIT 1`, oid, sqlNames(n.Tables)).Scan(&ord)
	if errors.Is(err, pgx.ErrNoRows) {
		return Table{}, false, nil
	}
	if err != nil {
		return Table{}, false, fmt.Errorf("looking up the partition root of relation %d: %w", oid, err)
	}
	tables := n.byOrdinal([]int64{*ord})
	if len(tables) == 0 {
		return Table{}, false, nil
	}
	return tables[0], true, nil
}
