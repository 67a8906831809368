package decode

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
)

// Column is an outbox column as the encoders need it: its Postgres type,
// whether the catalog allows NULL in it, and its default. It is built when
// the table's Relation message is decoded and not changed afterwards.
type Column struct {
	Name string
	// Type is the type OID and TypMod its modifier (-1 for none), both from
	// the Relation message: numeric's precision and scale live there.
	Type   uint32
	TypMod int32
	// NotNull is the catalog's NOT NULL, which Kafka Connect schemas show
	// as optional=false. False when the catalog was not read.
	NotNull bool
	// Default is the column's default in the text form Postgres writes in
	// a tuple, as Debezium reads it from the catalog; nil for none. A NULL
	// in the row becomes this value where Debezium reads the column with
	// Kafka Connect's Struct.get.
	Default []byte
}

// Catalog is what the Postgres catalog says of one column and pgoutput's
// Relation message does not carry. replication reads it at startup.
type Catalog struct {
	NotNull bool
	// Default is pg_get_expr of the column's default; empty for none.
	Default string
}

// Numeric's precision and scale from its type modifier, as Postgres packs
// them; ok is false for a numeric without precision.
func (c *Column) Numeric() (precision, scale int, ok bool) {
	if c.Type != TypeNumeric || c.TypMod < 4 {
		return 0, 0, false
	}
	m := int(c.TypMod - 4)
	return m >> 16 & 0xFFFF, m & 0xFFFF, true
}

// keyable says whether a column of this type can be the record key or an
// additional field, and why not: the encoders render exactly these types as
// Debezium's Postgres connector does with its default settings.
func keyable(c *Column) error {
	switch c.Type {
	case TypeBool, TypeInt2, TypeInt4, TypeInt8, TypeFloat4, TypeFloat8, TypeText, TypeVarchar, TypeBPChar, TypeChar, TypeName,
		TypeUUID, TypeJSON, TypeJSONB, TypeXML, TypeInet, TypeCIDR, TypeMacaddr, TypeMacaddr8, TypeDate, TypeTimestamp:
		return nil
	case TypeTimestampTZ:
		return fmt.Errorf("column %s is timestamptz, which Debezium writes as an io.debezium.time.ZonedTimestamp string whose fraction width depends on how the connector learned the column; cast it to timestamp or text in a generated column", c.Name)
	case TypeNumeric:
		if _, _, ok := c.Numeric(); !ok {
			return fmt.Errorf("column %s is numeric without precision, which Debezium encodes as a VariableScaleDecimal struct walstream does not write; declare it numeric(p,s)", c.Name)
		}
		return nil
	}
	return fmt.Errorf("column %s has type OID %d; walstream encodes text, varchar, char, uuid, json, jsonb, xml, inet, cidr, macaddr, smallint, integer, bigint, real, double precision, numeric(p,s), boolean, date and timestamp as Debezium does; cast it in a generated column", c.Name, c.Type)
}

// Debezium's PostgresDefaultValueConverter patterns: a quoted literal, and a
// function call, whose value is not known until the row is written.
var (
	literalDefault  = regexp.MustCompile(`'([^']*(?:''[^']*)*)'`)
	functionDefault = regexp.MustCompile(`^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)`)
	uuidText        = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)
	currentDefaults = map[string]bool{"current_timestamp": true, "current_time": true, "current_date": true, "localtime": true, "localtimestamp": true}
)

// ParseDefault turns a column default, as pg_get_expr writes it, into the
// value Debezium's schema carries for it (PostgresDefaultValueConverter):
// the literal inside quotes or the bare constant, and for a function call
// Debezium's placeholder for the type (0, false, ”, '{}', the nil UUID).
// ok is false where Debezium sets no default: no expression, a NULL::type
// default, a type it has no mapper for, or a value that does not parse.
// The result is in Postgres's text form, as if the row had held it.
func ParseDefault(typ uint32, expr string) (text []byte, ok bool) {
	if expr == "" {
		return nil, false
	}
	placeholder := map[uint32]string{TypeBool: "false", TypeBPChar: "", TypeVarchar: "", TypeText: "", TypeNumeric: "0.0",
		TypeFloat4: "0.0", TypeFloat8: "0.0", TypeInt2: "0", TypeInt4: "0", TypeInt8: "0", TypeJSON: "{}", TypeJSONB: "{}",
		TypeUUID: "00000000-0000-0000-0000-000000000000", TypeDate: "1970-01-01", TypeTimestamp: "1970-01-01 00:00:00"}
	ph, mapped := placeholder[typ]
	if !mapped {
		return nil, false
	}
	switch typ {
	case TypeBool, TypeNumeric, TypeFloat4, TypeFloat8, TypeInt2, TypeInt4, TypeInt8, TypeUUID, TypeDate, TypeTimestamp:
		expr = javaTrim(expr) // Debezium's TRIM_DATA_TYPES
	}
	v := ph
	switch {
	case functionDefault.MatchString(expr) || currentDefaults[strings.ToLower(expr)]:
	case strings.HasPrefix(expr, "NULL::"):
		return nil, false // DEFAULT NULL: Debezium sets no default
	case !strings.Contains(expr, "'"):
		v = expr
	default:
		m := literalDefault.FindStringSubmatch(expr)
		if m == nil {
			return nil, false
		}
		v = strings.ReplaceAll(m[1], "''", "'")
	}
	switch typ {
	case TypeBool: // Boolean.parseBoolean: "true" in any case, anything else false
		if strings.EqualFold(v, "true") {
			return []byte("t"), true
		}
		return []byte("f"), true
	case TypeInt2, TypeInt4, TypeInt8:
		bits := map[uint32]int{TypeInt2: 16, TypeInt4: 32, TypeInt8: 64}[typ]
		n, err := strconv.ParseInt(v, 10, bits) // Short/Integer/Long.parseInt
		if err != nil {
			return nil, false
		}
		return []byte(strconv.FormatInt(n, 10)), true
	case TypeFloat4, TypeFloat8:
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return nil, false
		}
		return []byte(v), true
	case TypeNumeric:
		if _, ok := new(big.Float).SetString(v); !ok {
			return nil, false
		}
		return []byte(v), true
	case TypeDate:
		if _, err := time.Parse("2006-01-02", v); err != nil {
			return nil, false
		}
		return []byte(v), true
	case TypeTimestamp:
		if len(v) == len("2006-01-02") {
			v += " 00:00:00" // TimestampUtils reads a bare date as midnight
		}
		if _, err := ParseTimestamp([]byte(v)); err != nil {
			return nil, false
		}
		return []byte(v), true
	case TypeUUID:
		if !uuidText.MatchString(v) { // UUID.fromString
			return nil, false
		}
		return []byte(strings.ToLower(v)), true
	}
	return []byte(v), true
}

// javaTrim is Java's String.trim(): it strips the characters up to U+0020
// at both ends, and nothing else (not NBSP, not U+0085, not U+3000).
func javaTrim(s string) string {
	i, j := 0, len(s)
	for i < j && s[i] <= ' ' {
		i++
	}
	for j > i && s[j-1] <= ' ' {
		j--
	}
	return s[i:j]
}

// blank is Java's s.trim().isEmpty() over a text value's bytes.
func blank(b []byte) bool { return javaTrim(string(b)) == "" }

// OutboxRelation reports the outbox table a Relation message describes,
// and the relation's OID, without decoding it: a caller that keeps the
// catalog current reads the table's catalog and gives it to SetCatalog
// before the message is decoded, as Debezium rereads a table's schema when
// its relation changes.
func (d *Decoder) OutboxRelation(data []byte) (o *Outbox, oid uint32, ok bool) {
	if len(data) == 0 || pglogrepl.MessageType(data[0]) != pglogrepl.MessageTypeRelation {
		return nil, 0, false
	}
	var m pglogrepl.RelationMessage
	defer func() {
		if recover() != nil { // truncated: Decode reports it
			o, oid, ok = nil, 0, false
		}
	}()
	if m.Decode(data[1:]) != nil {
		return nil, 0, false
	}
	for _, o := range d.cfg.Outboxes {
		if m.Namespace == o.Schema && m.RelationName == o.Table {
			return o, m.RelationID, true
		}
	}
	return nil, 0, false
}

// SetCatalog replaces what the decoder knows of an outbox table's catalog
// (Outbox.Catalog) from the table's next Relation message on.
func (d *Decoder) SetCatalog(table string, c map[string]Catalog) {
	if d.catalogs == nil {
		d.catalogs = make(map[string]map[string]Catalog)
	}
	d.catalogs[table] = c
}

func (d *Decoder) catalog(o *Outbox) map[string]Catalog {
	if c, ok := d.catalogs[o.Name()]; ok {
		return c
	}
	return o.Catalog
}
