package decode

import (
	"fmt"
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
	// than refusing the table (table.fields.additional.error.on.missing=false).
	AdditionalOptional bool
	// OnUpdate is what an UPDATE of an outbox row does
	// (table.op.invalid.behavior). A DELETE is always ignored: removing
	// published rows is how outbox tables are kept small.
	OnUpdate InvalidOp
	// TombstoneOnEmptyPayload turns a NULL payload into a tombstone (a
	// record with no value) instead of bad input
	// (route.tombstone.on.empty.payload).
	TombstoneOnEmptyPayload bool
	// TopicRegex and TopicReplacement name an event's topic from its
	// route-by value (route.topic.regex, route.topic.replacement).
	TopicRegex, TopicReplacement string
	// ExpandJSONPayload writes a JSON payload as JSON rather than as a JSON
	// string under the JSON converter (table.expand.json.payload).
	ExpandJSONPayload bool
}

// Name is the table's schema-qualified name.
func (o *Outbox) Name() string { return o.Schema + "." + o.Table }

// DefaultColumns returns the outbox columns of Debezium's outbox event
// router.
func DefaultColumns() Columns {
	return Columns{
		ID:            "id",
		AggregateType: "aggregatetype",
		AggregateID:   "aggregateid",
		Type:          "type",
		Payload:       "payload",
		Tracing:       "tracingspancontext",
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
	// Tracing is an optional W3C trace context column, as Debezium's
	// tracingspancontext or a plain traceparent (tracing.span.context.field).
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
// comma-separated column:placement[:alias] entries.
func ParseAdditional(s string) ([]Additional, error) {
	var out []Additional
	for _, entry := range strings.Split(s, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		parts := strings.Split(entry, ":")
		if len(parts) != 2 && len(parts) != 3 || parts[0] == "" {
			return nil, fmt.Errorf("%q is not column:placement or column:placement:alias", entry)
		}
		a := Additional{Column: parts[0], Alias: parts[0]}
		if len(parts) == 3 && parts[2] != "" {
			a.Alias = parts[2]
		}
		switch strings.ToLower(parts[1]) {
		case "header":
			a.Placement = PlaceHeader
		case "envelope":
			a.Placement = PlaceEnvelope
		case "partition":
			a.Placement = PlacePartition
		default:
			return nil, fmt.Errorf("%q: placement %q is not header, envelope or partition", entry, parts[1])
		}
		out = append(out, a)
	}
	partitions := 0
	for _, a := range out {
		if a.Placement == PlacePartition {
			partitions++
		}
	}
	if partitions > 1 {
		return nil, fmt.Errorf("%q places %d columns in the partition; a record has one", s, partitions)
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

// Kind is how a column's text form is encoded where types matter: JSON
// envelopes and Kafka Connect's string rendering.
type Kind int

// Kinds of additional columns.
const (
	KindText Kind = iota
	KindInteger
	KindBoolean
)

// Field is an additional column's value in a record header or envelope.
type Field struct {
	Name      string
	Placement Placement
	Kind      Kind
	// Value is the column's text form (booleans as true or false); nil for
	// NULL.
	Value []byte
}

// Type OIDs of the columns walstream reads with a type in mind.
const (
	oidBool        = 16
	oidBytea       = 17
	oidChar        = 18
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidJSON        = 114
	oidBPChar      = 1042
	oidVarchar     = 1043
	oidTimestamp   = 1114
	oidTimestampTZ = 1184
	oidUUID        = 2950
	oidJSONB       = 3802
)

// kindOf maps a column type to how additional fields encode it. Other
// types are refused: Debezium renders them in ways (numeric as bytes,
// timestamps as epoch micros) that copying their text would not match.
func kindOf(oid uint32) (Kind, bool) {
	switch oid {
	case oidText, oidVarchar, oidBPChar, oidChar, oidName, oidUUID, oidJSON, oidJSONB:
		return KindText, true
	case oidInt2, oidInt4, oidInt8:
		return KindInteger, true
	case oidBool:
		return KindBoolean, true
	}
	return 0, false
}

// Text forms of timestamps: the walsender renders them in its session's
// DateStyle, which replication.Dial sets to ISO, and TimeZone.
var timestampLayouts = []string{"2006-01-02 15:04:05.999999", "2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00"}

// parseTimestamp reads a timestamp or timestamptz column. A timestamp
// without time zone is taken as UTC, as Debezium does.
func parseTimestamp(b []byte) (time.Time, error) {
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
