package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/replication"
)

// outboxTables is what a session knows of the outbox tables at its start.
type outboxTables struct {
	names replication.Names
	// oids are the existing tables' OIDs in the catalog, by schema.table;
	// entries the publication's entries covering them, where it does.
	oids    map[string]uint32
	entries map[string][]uint32
	// missing are the tables that do not exist.
	missing []replication.Table
	// unpublished: a table exists that the publication does not cover.
	unpublished bool
	// mayChange are the tables whose OID may change in the stream without
	// a gap: a publication covering their schema, or an operator's
	// acceptance of this very recreation.
	mayChange map[string]bool
	// schemaPublished are the tables a publication covers whatever their
	// OID.
	schemaPublished map[string]bool
	// catalogs are the tables' NOT NULL and defaults, by schema.table, as
	// the decoder takes them.
	catalogs map[string]map[string]decode.Catalog
}

// checkTables reads the outbox tables from the catalog and checks each
// mapping against its table, so that a broken mapping stops walstream at
// startup instead of at the first row, which an idle outbox may not have
// for a long time. A missing table is not an error yet: whether it was
// dropped since the checkpoint decides what the stop says.
func checkTables(ctx context.Context, conn *pgx.Conn, cfg *Config) (outboxTables, error) {
	infos, err := replication.DescribeTables(ctx, conn, cfg.Names)
	if err != nil {
		return outboxTables{}, err
	}
	t := outboxTables{names: cfg.Names, oids: make(map[string]uint32), entries: make(map[string][]uint32), mayChange: make(map[string]bool),
		schemaPublished: make(map[string]bool), catalogs: make(map[string]map[string]decode.Catalog)}
	for _, info := range infos {
		name := info.Table.String()
		if !info.Exists() {
			t.missing = append(t.missing, info.Table)
			continue
		}
		t.oids[name], t.catalogs[name] = info.OID, catalogOf(info)
		if len(info.Entries) > 0 {
			t.entries[name] = info.Entries
		}
		t.unpublished = t.unpublished || !info.Published
		if info.SchemaPublished {
			t.mayChange[name], t.schemaPublished[name] = true, true
		}
		if err := checkMapping(cfg.Outboxes, info, "at startup"); err != nil {
			return outboxTables{}, err
		}
	}
	return t, nil
}

// settled reports whether every table exists and is in the publication.
// Setup stops at one that is not, and only the checkpoint tells whether
// walstream streamed it before: a table dropped since, whose rows may be
// lost.
func (t outboxTables) settled() bool { return len(t.missing) == 0 && !t.unpublished }

// catalogOf is what the decoder takes of a table's columns.
func catalogOf(info replication.TableInfo) map[string]decode.Catalog {
	c := make(map[string]decode.Catalog, len(info.Columns))
	for _, col := range info.Columns {
		c[col.Name] = decode.Catalog{NotNull: col.NotNull, Default: col.Default, Labels: col.Labels}
	}
	return c
}

// checkMapping checks an outbox table from the catalog against its
// mapping; when names when it was read.
func checkMapping(outboxes []*decode.Outbox, info replication.TableInfo, when string) error {
	name := info.Table.String()
	i := slices.IndexFunc(outboxes, func(o *decode.Outbox) bool { return o.Name() == name })
	if i < 0 {
		return nil
	}
	cols := make([]decode.Column, len(info.Columns))
	for j, c := range info.Columns {
		cols[j] = decode.Column{Name: c.Name, Type: c.Type, TypMod: c.TypMod, Labels: c.Labels}
	}
	if err := decode.CheckTable(outboxes[i], cols); err != nil {
		return fmt.Errorf("checking table %s (OID %d) against its mapping %s: %w", name, info.OID, when, err)
	}
	return nil
}

// sinceCheckpoint compares the tables with those the checkpoint recorded:
// a table with another OID was recreated since, and rows committed to it
// before it was in the publication are missing, unless accept names the
// new OID (the operator dealt with them) or the publication covers the
// table's schema. A recorded table that does not exist was dropped since;
// one never recorded does not exist yet. A table the publication covers by
// none of the recorded entries left it and came back since, and the rows
// committed meanwhile are missing, unless accept names its OID.
func (t outboxTables) sinceCheckpoint(cp checkpoint.Checkpoint, accept map[string]uint32, log *slog.Logger) error {
	var recorded map[string]uint32
	var entries map[string][]uint32
	if cp.Notes != nil {
		recorded, entries = cp.Notes.Tables, cp.Notes.Entries
	}
	for _, tb := range t.missing {
		if old := recorded[tb.String()]; old != 0 {
			return t.names.TableDropped(tb, old, cp.String())
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.oids)) {
		now, old := t.oids[name], recorded[name]
		reason := "not the table streamed before"
		if want, ok := accept[name]; ok {
			switch {
			case want == now:
				t.mayChange[name] = true
			case old == 0 || old == now || t.schemaPublished[name]:
				return fmt.Errorf("%w: accepting table %s as recreated with OID %d, but its OID is %d", replication.ErrSetup, name, want, now)
			default:
				// Recreated again since the checkpoint, after the one
				// accepted: the gap is what the operator must see.
				reason += fmt.Sprintf(", nor the one accepted (OID %d)", want)
			}
		}
		switch {
		case old == 0 || old == now:
		case t.schemaPublished[name]:
			log.Info("outbox table recreated since the checkpoint; its schema is published, so no row is missing", "table", name, "old_oid", old, "oid", now)
		case t.mayChange[name]:
			log.Warn("outbox table recreated since the checkpoint: accepted", "table", name, "old_oid", old, "oid", now, "checkpoint", cp.String())
		default:
			return &decode.Error{Event: decode.Identity{Table: name}, Reason: reason,
				Err: &decode.TableRecreatedError{Table: name, OldOID: old, NewOID: now, Since: cp.String()}}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.entries)) {
		was, now, oid := entries[name], t.entries[name], t.oids[name]
		switch {
		case len(was) == 0 || replication.Covers(was, now):
		case recorded[name] != 0 && recorded[name] != oid:
			// Recreated, which the OID's check above decided.
		case accept[name] == oid:
			log.Warn("outbox table left the publication and came back since the checkpoint: accepted", "table", name, "oid", oid,
				"entries_were", was, "entries", now, "checkpoint", cp.String())
		default:
			tb, _ := replication.ParseTable(name) // a name DescribeTables gave
			return t.names.Republished(tb, oid, was, now, "after checkpoint "+cp.String())
		}
	}
	if len(t.missing) > 0 {
		return t.names.TableMissing(t.missing[0])
	}
	return nil
}

// watched are the OIDs the slot monitor watches: every table whose
// recreation would lose rows.
func (t outboxTables) watched() map[string]uint32 {
	out := make(map[string]uint32, len(t.oids))
	for name, oid := range t.oids {
		if !t.schemaPublished[name] {
			out[name] = oid
		}
	}
	return out
}
