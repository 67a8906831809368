package decode

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Outbox is one outbox table and how its rows become records: the settings
// of Debezium's outbox event router for that table. decode reads the
// columns; publish applies the routing and the encoding.
type Outbox struct {
	Schema, Table string
	Columns       Columns
	// Additional are further columns copied into the record
	// (table.fields.additional.placement).
	Additional []Additional
	// AdditionalOptional skips an additional column the table lacks rather
	// than refusing the table (table.field.additional.missing=ignore).
	AdditionalOptional bool
	// OnUpdate is what an UPDATE of an outbox row does
	// (table.op.invalid.behavior). A DELETE is always ignored: removing
	// published rows is how outbox tables are kept small.
	OnUpdate InvalidOp
	// TombstoneOnEmptyPayload turns a NULL or blank payload into a
	// tombstone, a record with no value (route.tombstone.on.empty.payload).
	// Without it a NULL payload is published as a null value, as Debezium
	// does.
	TombstoneOnEmptyPayload bool
	// TopicRegex and TopicReplacement name an event's topic from its
	// route-by value (route.topic.regex, route.topic.replacement).
	TopicRegex, TopicReplacement string
	// ExpandJSONPayload writes a JSON payload as JSON rather than as a JSON
	// string under the JSON converter (table.expand.json.payload).
	ExpandJSONPayload bool
	// ExpandJSONNulls keeps null fields of an expanded payload
	// (table.json.payload.null.behavior=optional_bytes); Debezium's default
	// drops them.
	ExpandJSONNulls bool
	// ExpandJSONEmptyArrays keeps empty arrays of an expanded payload
	// (table.json.payload.empty.array.behavior=optional_string); Debezium's
	// default drops them.
	ExpandJSONEmptyArrays bool
	// MessageNullFields keeps the null fields of a logical message's
	// content, as DecodeLogicalDecodingMessageContent's fields.null.include
	// does; by default they are dropped. For the mapping of messages only.
	MessageNullFields bool
	// Catalog is what the Postgres catalog says of the table's columns, by
	// name: NOT NULL and defaults, which pgoutput does not send. It is read
	// when walstream starts; a column it lacks has no default and may be
	// NULL.
	Catalog map[string]Catalog
}

// Name is the table's schema-qualified name, the name events carry and
// routes are found by. A mapping with no schema, as that of logical
// messages, is named by its Table alone.
func (o *Outbox) Name() string {
	if o.Schema == "" {
		return o.Table
	}
	return o.Schema + "." + o.Table
}

// DefaultColumns returns the outbox columns of Debezium's outbox event
// router. No tracing column: Debezium adds no traceparent header unless
// tracing is set up.
func DefaultColumns() Columns {
	return Columns{
		ID:            "id",
		AggregateType: "aggregatetype",
		AggregateID:   "aggregateid",
		Type:          "type",
		Payload:       "payload",
	}
}

// Columns names the outbox table's columns.
type Columns struct {
	// ID is the event id, sent as the id header (table.field.event.id).
	ID string
	// AggregateType is the route-by column (route.by.field).
	AggregateType string
	// AggregateID is the record key (table.field.event.key).
	AggregateID string
	// Type is optional; it names the event in dead letters.
	Type string
	// Payload is the record value (table.field.event.payload).
	Payload string
	// Timestamp, when set, is a timestamp or timestamptz column whose value
	// becomes the record's timestamp (table.field.event.timestamp); a NULL
	// there, or no column, leaves Kafka's processing time.
	Timestamp string
	// SchemaVersion, when set, is an integer column whose value becomes the
	// version of an envelope's value schema
	// (table.field.event.schema.version).
	SchemaVersion string
	// Tracing, when set, is a W3C trace context column, as Debezium's
	// tracingspancontext or a plain traceparent (tracing.span.context.field);
	// its value becomes the traceparent header.
	Tracing string
}

// Placement is where an additional column goes in the record.
type Placement int

// Placements of table.fields.additional.placement.
const (
	PlaceHeader Placement = iota
	PlaceEnvelope
	PlacePartition
)

func (p Placement) String() string {
	switch p {
	case PlaceHeader:
		return "header"
	case PlaceEnvelope:
		return "envelope"
	case PlacePartition:
		return "partition"
	}
	return "Placement(" + strconv.Itoa(int(p)) + ")"
}

// Additional is one entry of table.fields.additional.placement.
type Additional struct {
	Column    string
	Placement Placement
	// Alias names the header or envelope field; it defaults to Column.
	Alias string
}

// ParseAdditional reads Debezium's table.fields.additional.placement:
// comma-separated column:placement[:alias] entries, with spaces around each
// part trimmed as EventRouterConfigDefinition.parseAdditionalFieldsConfig
// does. When several entries name the partition, the last one wins, as the
// router sets the partition once per entry in order.
func ParseAdditional(s string) ([]Additional, error) {
	var out []Additional
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	partition := -1
	for _, entry := range strings.Split(s, ",") {
		parts := strings.Split(entry, ":")
		for len(parts) > 1 && parts[len(parts)-1] == "" {
			parts = parts[:len(parts)-1] // Java's split drops trailing empty strings
		}
		if len(parts) != 2 && len(parts) != 3 {
			return nil, fmt.Errorf("%q is not column:placement or column:placement:alias", entry)
		}
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		if parts[0] == "" {
			return nil, fmt.Errorf("%q names no column", entry)
		}
		a := Additional{Column: parts[0], Alias: parts[0]}
		if len(parts) == 3 {
			a.Alias = parts[2]
		}
		switch strings.ToLower(parts[1]) {
		case "header":
			a.Placement = PlaceHeader
		case "envelope":
			a.Placement = PlaceEnvelope
		case "partition":
			a.Placement = PlacePartition
			if partition >= 0 {
				out = slices.Delete(out, partition, partition+1) // the last one wins
			}
			partition = len(out)
		default:
			return nil, fmt.Errorf("%q: placement %q is not header, envelope or partition", entry, parts[1])
		}
		out = append(out, a)
	}
	return out, nil
}

// InvalidOp is what an UPDATE of an outbox row does.
type InvalidOp int

// Values of table.op.invalid.behavior.
const (
	// OpWarn logs a warning and skips the UPDATE (Debezium's default).
	OpWarn InvalidOp = iota
	// OpError logs an error and skips the UPDATE.
	OpError
	// OpFatal stops walstream at the UPDATE.
	OpFatal
)

// ParseInvalidOp reads warn, error or fatal.
func ParseInvalidOp(s string) (InvalidOp, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "warn":
		return OpWarn, nil
	case "error":
		return OpError, nil
	case "fatal":
		return OpFatal, nil
	}
	return 0, fmt.Errorf("%q is not warn, error or fatal", s)
}

// Field is an additional column's value in a record header or envelope.
type Field struct {
	Name      string
	Placement Placement
	// Column is the additional column, whose type says how to encode Value.
	Column *Column
	// Value is the column's text form as Postgres sends it, its default in
	// place of a NULL; nil for NULL.
	Value []byte
}

// Type OIDs of the columns walstream reads with a type in mind.
const (
	// TypeBool and the others are Postgres's built-in type OIDs.
	TypeBool        = 16
	TypeBytea       = 17
	TypeChar        = 18
	TypeName        = 19
	TypeInt8        = 20
	TypeInt2        = 21
	TypeInt4        = 23
	TypeText        = 25
	TypeJSON        = 114
	TypeXML         = 142
	TypeCIDR        = 650
	TypeMacaddr8    = 774
	TypeMacaddr     = 829
	TypeInet        = 869
	TypeFloat4      = 700
	TypeFloat8      = 701
	TypeBPChar      = 1042
	TypeVarchar     = 1043
	TypeMoney       = 790
	TypeDate        = 1082
	TypeTime        = 1083
	TypeTimestamp   = 1114
	TypeTimestampTZ = 1184
	TypeInterval    = 1186
	TypeTimeTZ      = 1266
	TypeNumeric     = 1700
	TypeUUID        = 2950
	TypeJSONB       = 3802
)

// Text forms of timestamps: the walsender renders them in its session's
// DateStyle, which replication.Dial sets to ISO, and TimeZone.
var timestampLayouts = []string{"2006-01-02 15:04:05.999999", "2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00"}

// ParseTimestamp reads a timestamp or timestamptz column's text. A
// timestamp without time zone is taken as UTC, as Debezium does.
func ParseTimestamp(b []byte) (time.Time, error) {
	s := string(b)
	var err error
	for _, layout := range timestampLayouts {
		var t time.Time
		if t, err = time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO timestamp: %w", s, err)
}

// HasEnvelope reports whether the mapping places a field in the envelope,
// which makes every value a struct of payload and those fields.
func (o *Outbox) HasEnvelope() bool {
	for _, a := range o.Additional {
		if a.Placement == PlaceEnvelope {
			return true
		}
	}
	return false
}

// RequiredColumns are the columns the mapping reads that its table must
// have: the event id, route-by, key and payload columns, the timestamp
// column when set, and the additional ones unless they are optional.
func (o *Outbox) RequiredColumns() []string {
	cols := []string{o.Columns.ID, o.Columns.AggregateType, o.Columns.AggregateID, o.Columns.Payload}
	for _, c := range []string{o.Columns.Timestamp, o.Columns.SchemaVersion} {
		if c != "" {
			cols = append(cols, c)
		}
	}
	for _, a := range o.Additional {
		if !o.AdditionalOptional {
			cols = append(cols, a.Column)
		}
	}
	return cols
}
