package replication

import (
	"context"
	"fmt"
	"slices"

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
	// Entries are the OIDs, sorted, of the catalog rows by which the
	// publication covers the table: pg_publication_rel's naming it,
	// pg_publication_namespace's of its schema, pg_publication's own when
	// it publishes every table; none when it does not cover it. A table
	// removed from the publication and added again is covered by other
	// rows, and Postgres sent none of the rows committed between.
	Entries []uint32
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
	bySchema, schemaEntry := "false", ""
	if schemas {
		bySchema = "EXISTS (SELECT 1 FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid AND pn.pnnspid = c.relnamespace)"
		schemaEntry = "UNION SELECT pn.oid FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = pn.pnpubid WHERE p.pubname = $2 AND pn.pnnspid = c.relnamespace"
	}
	// One row per column, or one row of NULLs for a table that does not
	// exist.
	rows, err := conn.Query(ctx, `SELECT t.ord, c.oid, a.attname::text, a.atttypid, a.atttypmod, a.attnotnull,
			CASE WHEN a.attgenerated = '' THEN coalesce(pg_get_expr(d.adbin, d.adrelid), '') ELSE '' END,
			coalesce((SELECT string_agg(e.enumlabel::text, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = a.atttypid), ''),
			EXISTS (SELECT 1 FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = $2 AND pr.prrelid = c.oid),
			EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = $2 AND (p.puballtables OR `+bySchema+`)),
			CASE WHEN c.oid IS NULL THEN '{}' ELSE ARRAY(
				SELECT pr.oid FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = $2 AND pr.prrelid = c.oid
				`+schemaEntry+`
				UNION SELECT p.oid FROM pg_publication p WHERE p.pubname = $2 AND p.puballtables
				ORDER BY 1) END
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
		entries                 []uint32
		oid, typ                *uint32
		typmod                  *int32
		name, def, labels       *string
		notNull                 *bool
		listed, schemaPublished bool
	)
	_, err = pgx.ForEachRow(rows, []any{&ord, &oid, &name, &typ, &typmod, &notNull, &def, &labels, &listed, &schemaPublished, &entries}, func() error {
		if ord < 1 || int(ord) > len(out) {
			return fmt.Errorf("table number %d of %d", ord, len(out))
		}
		info := &out[ord-1]
		if oid == nil {
			return nil
		}
		info.OID, info.SchemaPublished, info.Published, info.Entries = *oid, schemaPublished, listed || schemaPublished, entries
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

// Republished is the stop for an outbox table (OID oid) the publication
// covered by the entries was when streamed, and by none of them now: it
// left the publication and came back (or came under other entries of it
// in one transaction: a changed row filter or column list), and Postgres
// sent none of the rows committed to it while it was out. when says when
// that was found.
func (n Names) Republished(t Table, oid uint32, was, now []uint32, when string) error {
	return &RepublishedError{Table: t.String(), Publication: n.Publication, OID: oid, Was: was, Now: now, When: when}
}

// RepublishedError is Republished's stop. An operator accepts it as a
// recreated table's, by the table's OID.
type RepublishedError struct {
	Table, Publication string
	OID                uint32
	Was, Now           []uint32
	When               string
}

// Covers reports whether entries now still include one of was: the
// publication has covered the table throughout by it.
func Covers(was, now []uint32) bool {
	return slices.ContainsFunc(was, func(e uint32) bool { return slices.Contains(now, e) })
}

func (e *RepublishedError) Error() string {
	return fmt.Sprintf("table %s (OID %d) left publication %q and came back %s (its entries in the publication %v, now %v): "+
		"Postgres never sent the rows committed to it while it was out. To recover: find those rows (SELECT them from %s by id or time) "+
		"and publish them again (see docs/reemit.md), or accept the loss; then accept the table (OID %d) and restart (see docs/postgres.md, A table out of the publication)",
		e.Table, e.OID, e.Publication, e.When, e.Was, e.Now, e.Table, e.OID)
}

func (e *RepublishedError) Is(target error) bool { return target == ErrSetup }

// RecreateAdvice is how to create an outbox table again without losing
// rows: Postgres sends a table's rows only once it is in the publication,
// so rows committed between a separate CREATE TABLE and ALTER PUBLICATION
// are never sent.
func (n Names) RecreateAdvice(t Table) string {
	return fmt.Sprintf("create a table and add it to the publication in one transaction: BEGIN; CREATE TABLE %s (...); %s; COMMIT",
		t.SQL(), n.addTablesSQL([]Table{t}))
}

// RelationState is what the catalog says now of a relation whose rows
// came under its own name, no outbox table's: whether it is a partition of
// one, and otherwise whether it could have been one when its rows were
// written without the catalog showing it any more.
type RelationState struct {
	// Root is the outbox table the relation is a partition of, at any
	// depth, when Partition is set.
	Root      Table
	Partition bool
	// Exists says the catalog still has the relation: a dropped one is
	// gone, with its place in any partition tree.
	Exists bool
	// Published says the publication publishes the relation's rows now,
	// as its own or as an ancestor's: a table it names, one in a schema it
	// covers, every table. A relation whose rows came although the
	// publication does not publish it now was in it when they were written,
	// as a partition of a published table or as itself, and left it since.
	Published bool
}

// DescribeRelation says, as the catalog has it now, what relation oid is
// to the outbox tables and to the publication.
func DescribeRelation(ctx context.Context, conn *pgx.Conn, n Names, oid uint32) (RelationState, error) {
	// pg_partition_ancestors lists a partition with its ancestors, and
	// nothing for a table that is no partition, or no longer exists.
	var (
		st  RelationState
		ord *int64
	)
	err := conn.QueryRow(ctx, `WITH rel AS (SELECT $1::oid AS relid UNION SELECT relid FROM pg_partition_ancestors($1::oid::regclass))
		SELECT EXISTS (SELECT FROM pg_class WHERE oid = $1::oid),
			(SELECT t.ord FROM unnest($2::text[]) WITH ORDINALITY AS t(name, ord) JOIN rel ON rel.relid = to_regclass(t.name)
				WHERE rel.relid <> $1::oid ORDER BY t.ord LIMIT 1),
			EXISTS (SELECT FROM rel JOIN pg_class c ON c.oid = rel.relid JOIN pg_namespace s ON s.oid = c.relnamespace
				JOIN pg_publication_tables pt ON pt.pubname = $3 AND pt.schemaname = s.nspname AND pt.tablename = c.relname)`,
		oid, sqlNames(n.Tables), n.Publication).Scan(&st.Exists, &ord, &st.Published)
	if err != nil {
		return RelationState{}, fmt.Errorf("looking up relation %d in the catalog and publication %q: %w", oid, n.Publication, err)
	}
	if ord != nil {
		if tables := n.byOrdinal([]int64{*ord}); len(tables) == 1 {
			st.Root, st.Partition = tables[0], true
		}
	}
	return st, nil
}

// UniqueColumn reports whether table t has a unique index on exactly its
// column (a primary key is one): a valid one, not partial, on no
// expression. A unique index over more columns, as a partitioned table's
// keys must include its partition key, does not make one column unique.
// notNull reports whether the column is declared NOT NULL (a primary key's
// is): a unique index permits any number of nulls.
func UniqueColumn(ctx context.Context, conn *pgx.Conn, t Table, column string) (unique, notNull bool, err error) {
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = $2 AND NOT a.attisdropped
		WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
			AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum),
		EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped AND attnotnull)`,
		t.SQL(), column).Scan(&unique, &notNull)
	if err != nil {
		return false, false, fmt.Errorf("looking up a unique index on column %s of table %s: %w", column, t.SQL(), err)
	}
	return unique, notNull, nil
}
