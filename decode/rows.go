package decode

import (
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Chunk is a batch of rows a re-emit request read from its table by
// primary key, after After and up to Last, handed to the producer as a Tx
// whose Events are the rows. The producer publishes them and records Last
// as the request's progress in the same Kafka transaction, so that the
// next chunk starts after it, also after a restart.
type Chunk struct {
	// Request is the request's id.
	Request string
	// After is the key the chunk starts after: the request's progress it
	// was read from, nil for the first chunk. A chunk whose After is not
	// the request's progress when the producer meets it (the request was
	// cancelled meanwhile) is dropped.
	After []string
	// Last is the key of the chunk's last row; nil when it has none.
	Last []string
	// Key, Upper and Estimate are set on the first chunk: the primary key
	// columns, the largest key of a matching row (rows are read up to it;
	// nil when none matched) and the planner's estimate of the rows.
	Key      []string
	Upper    []string
	Estimate int64
	// Done says no matching row is past the chunk: the request ends with
	// it.
	Done bool
	// Err, when set, ends the request as failed instead: its predicate no
	// longer plans, its table no longer fits the mapping.
	Err string
	// Taken, if not nil, is called once the producer is done with the
	// chunk (published or dropped it), so that its reader bounds the
	// chunks handed on and not yet done with. A live transaction waits
	// for the chunk being published at most: chunks wait in a lane of
	// their own.
	Taken func()
}

// Rows maps rows read from an outbox table by a query to events, as the
// decoder maps the rows the stream brings: a re-emitted row is published
// as its INSERT was. Values are the columns' text forms, as the walsender
// renders them in pgoutput (the query's session has its settings).
type Rows struct {
	rel *relation
	dec *Decoder
}

// NewRows maps rows of outbox o with the columns cols, in table order, and
// what the catalog says of them; an error says why the table does not fit
// the mapping. jsonText is Config.JSONText.
func NewRows(o *Outbox, cols []Column, catalog map[string]Catalog, jsonText bool) (*Rows, error) {
	m := pglogrepl.RelationMessage{Namespace: o.Schema, RelationName: o.Table}
	for _, c := range cols {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: c.Name, DataType: c.Type, TypeModifier: c.TypMod})
	}
	rel := &relation{name: o.Name(), outbox: o, columns: len(cols)}
	if err := rel.mapColumns(0, &m, catalog); err != nil {
		return nil, err
	}
	dec := New(Config{Outboxes: []*Outbox{o}, JSONText: jsonText})
	dec.tx = &Tx{}
	return &Rows{rel: rel, dec: dec}, nil
}

// Event maps one row: values[i] is column i's text, nil for NULL. The
// event's byte slices alias values.
func (r *Rows) Event(values [][]byte) (Event, error) {
	if len(values) != r.rel.columns {
		return Event{}, fmt.Errorf("a row of %s has %d columns, the table %d", r.rel.name, len(values), r.rel.columns)
	}
	vals := make([]value, len(values))
	for i, v := range values {
		vals[i] = value{kind: 'n'}
		if v != nil {
			vals[i] = value{kind: 't', data: v}
		}
	}
	return r.dec.event(r.rel, 0, vals), nil
}
