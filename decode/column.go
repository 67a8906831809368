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
	// Labels are an enum type's labels in order, comma-separated, from the
	// catalog: Debezium's io.debezium.data.Enum schema lists them. Empty
	// for any other type, or when the catalog was not read.
	Labels string
}

// Catalog is what the Postgres catalog says of one column and pgoutput's
// Relation message does not carry. replication reads it at startup.
type Catalog struct {
	NotNull bool
	// Default is pg_get_expr of the column's default; empty for none.
	Default string
	// Labels are an enum type's labels (Column.Labels).
	Labels string
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

// VariableScale reports whether the column is a numeric without precision,
// which Debezium writes as an io.debezium.data.VariableScaleDecimal struct.
func (c *Column) VariableScale() bool {
	_, _, ok := c.Numeric()
	return c.Type == TypeNumeric && !ok
}

// Enum reports whether the column is of an enum type, as the catalog said.
func (c *Column) Enum() bool { return c.Labels != "" }

// arrayElements are the element types of the array types walstream
// encodes, by array type OID: those Debezium's PostgresValueConverter
// gives a Connect array schema of the element's own schema.
var arrayElements = map[uint32]uint32{
	1000: TypeBool, 1005: TypeInt2, 1007: TypeInt4, 1016: TypeInt8, 1021: TypeFloat4, 1022: TypeFloat8,
	1002: TypeChar, 1009: TypeText, 1014: TypeBPChar, 1015: TypeVarchar, 2951: TypeUUID, 199: TypeJSON, 3807: TypeJSONB,
	1041: TypeInet, 651: TypeCIDR, 1040: TypeMacaddr, 775: TypeMacaddr8,
	1182: TypeDate, 1115: TypeTimestamp, 1185: TypeTimestampTZ, 1183: TypeTime, 1270: TypeTimeTZ,
}

// Elem is the element column of an array column: its element type with
// the array's type modifier (a timestamp[]'s precision is its elements'),
// nullable; ok is false for any other column.
func (c *Column) Elem() (elem Column, ok bool) {
	t, ok := arrayElements[c.Type]
	if !ok {
		return Column{}, false
	}
	return Column{Name: c.Name, Type: t, TypMod: c.TypMod}, true
}

// keyable says whether a column of this type can be the record key or an
// additional field, and why not: the encoders render exactly these types as
// Debezium's Postgres connector does with its default settings.
func keyable(c *Column) error {
	switch c.Type {
	case TypeBool, TypeInt2, TypeInt4, TypeInt8, TypeFloat4, TypeFloat8, TypeText, TypeVarchar, TypeBPChar, TypeChar, TypeName,
		TypeUUID, TypeJSON, TypeJSONB, TypeXML, TypeInet, TypeCIDR, TypeMacaddr, TypeMacaddr8, TypeDate, TypeTimestamp,
		TypeTimestampTZ, TypeTime, TypeTimeTZ, TypeInterval, TypeMoney, TypeNumeric, TypeBytea:
		return nil
	}
	if _, ok := c.Elem(); ok || c.Enum() {
		return nil
	}
	return fmt.Errorf("column %s has type OID %d, which walstream does not encode; it encodes text, varchar, char, name, uuid, json, jsonb, xml, inet, cidr, macaddr, "+
		"smallint, integer, bigint, real, double precision, numeric, money, boolean, bytea, date, time, timetz, timestamp, timestamptz, interval, enums, "+
		"and one-dimensional arrays of most of these as Debezium does; change the column's type, or write the value into a column of one of these types (pgoutput sends no generated column before Postgres 18)", c.Name, c.Type)
}

// Debezium's PostgresDefaultValueConverter patterns: a quoted literal, and a
// function call, whose value is not known until the row is written.
var (
	literalDefault  = regexp.MustCompile(`'(.*?)'`)
	functionDefault = regexp.MustCompile(`^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)`)
	uuidText        = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)
	currentDefaults = map[string]bool{"current_timestamp": true, "current_time": true, "current_date": true, "localtime": true, "localtimestamp": true}
)

// ParseDefault turns a column default, as pg_get_expr writes it, into the
// value Debezium's schema carries for it (PostgresDefaultValueConverter):
// the literal inside quotes or the bare constant, and for a function call
// Debezium's placeholder for the type (0, false, ”, '{}', the nil UUID,
// the epoch). ok is false where Debezium sets no default: no expression, a
// NULL::type default, a type it has no mapper for (money, timetz, bytea,
// arrays, inet...) or whose value is a struct (a numeric without
// precision), or a value that does not parse. The result is in Postgres's
// text form, as if the row had held it.
func ParseDefault(col Column, expr string) (text []byte, ok bool) {
	if expr == "" || col.VariableScale() {
		return nil, false
	}
	typ := col.Type
	if col.Enum() {
		return enumDefault(expr)
	}
	placeholder := map[uint32]string{TypeBool: "false", TypeBPChar: "", TypeVarchar: "", TypeText: "", TypeNumeric: "0.0",
		TypeFloat4: "0.0", TypeFloat8: "0.0", TypeInt2: "0", TypeInt4: "0", TypeInt8: "0", TypeJSON: "{}", TypeJSONB: "{}",
		TypeUUID: "00000000-0000-0000-0000-000000000000", TypeDate: "1970-01-01", TypeTimestamp: "1970-01-01 00:00:00",
		TypeTime: "00:00:00", TypeTimestampTZ: "1970-01-01 00:00:00+00", TypeInterval: "00:00:00"}
	ph, mapped := placeholder[typ]
	if !mapped {
		return nil, false
	}
	switch typ {
	case TypeBool, TypeNumeric, TypeFloat4, TypeFloat8, TypeInt2, TypeInt4, TypeInt8, TypeUUID, TypeDate, TypeTimestamp,
		TypeTime, TypeTimestampTZ, TypeInterval:
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
		// '(.*?)': the first quoted run, a doubled quote ending it.
		m := literalDefault.FindStringSubmatch(expr)
		if m == nil {
			return nil, false
		}
		v = m[1]
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
	case TypeTime: // pg_get_expr writes HH:MM:SS[.ffffff]
		if _, err := time.Parse("15:04:05.999999", v); err != nil {
			return nil, false
		}
		return []byte(v), true
	case TypeTimestampTZ:
		if len(v) == len("2006-01-02") {
			v += " 00:00:00+00"
		}
		if _, err := ParseTimestamp([]byte(v)); err != nil {
			return nil, false
		}
		return []byte(v), true
	}
	return []byte(v), true
}

// enumDefault is an enum column's default as Debezium's extractEnumDefault
// reads it: the quoted literal before the cast, 'ok'::mood; a function
// call has none.
func enumDefault(expr string) ([]byte, bool) {
	i := strings.LastIndex(expr, "::")
	if i < 0 {
		return nil, false
	}
	v := expr[:i]
	if len(v) < 2 || v[0] != '\'' || v[len(v)-1] != '\'' {
		return nil, false
	}
	return []byte(v[1 : len(v)-1]), true
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
