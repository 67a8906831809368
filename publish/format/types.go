package format

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/walstream/walstream/decode"
)

// The column types whose Connect values are not the column's text: how
// Debezium's PostgresValueConverter (default settings: time.precision.mode
// adaptive, interval.handling.mode numeric, decimal.handling.mode precise,
// binary.handling.mode bytes, money.fraction.digits 2) reads each from
// pgoutput's text form, found by running Debezium 3.6 beside walstream
// (compat/). The encoders of encode.go call these.

// microTime is a time's Connect value: io.debezium.time.Time (milliseconds
// past midnight, int32) for time(0) to time(3), MicroTime (microseconds,
// int64) otherwise.
func microTime(col *decode.Column, text []byte) (int64, error) {
	s := string(text)
	hms, frac, _ := strings.Cut(s, ".")
	parts := strings.Split(hms, ":")
	if len(parts) != 3 || len(frac) > 6 {
		return 0, fmt.Errorf("time %q is not HH:MM:SS[.ffffff]", s)
	}
	var n [3]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("time %q is not HH:MM:SS[.ffffff]", s)
		}
		n[i] = v
	}
	micros := ((n[0]*60+n[1])*60 + n[2]) * 1e6
	if frac != "" {
		f, err := strconv.ParseInt((frac + "00000")[:6], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("time %q is not HH:MM:SS[.ffffff]", s)
		}
		micros += f
	}
	if millisTimestamp(col) {
		return micros / 1000, nil
	}
	return micros, nil
}

// offsetSeconds reads a UTC offset as Postgres writes it: +HH, +HH:MM or
// +HH:MM:SS.
func offsetSeconds(s string) (int, error) {
	if len(s) < 3 || s[0] != '+' && s[0] != '-' {
		return 0, fmt.Errorf("offset %q is not ±HH[:MM[:SS]]", s)
	}
	secs := 0
	for i, p := range strings.Split(s[1:], ":") {
		v, err := strconv.Atoi(p)
		if err != nil || i > 2 {
			return 0, fmt.Errorf("offset %q is not ±HH[:MM[:SS]]", s)
		}
		secs += v * []int{3600, 60, 1}[i]
	}
	if s[0] == '-' {
		secs = -secs
	}
	return secs, nil
}

// zonedTime is a timetz's Connect value: io.debezium.time.ZonedTime, the
// time moved to UTC and written as Java's ISO_OFFSET_TIME does (seconds
// always, the fraction without trailing zeros, Z).
func zonedTime(text []byte) (string, error) {
	s := string(text)
	i := strings.LastIndexAny(s, "+-")
	if i < 0 {
		return "", fmt.Errorf("timetz %q has no offset", s)
	}
	off, err := offsetSeconds(s[i:])
	if err != nil {
		return "", fmt.Errorf("timetz %q: %w", s, err)
	}
	hms, frac, _ := strings.Cut(s[:i], ".")
	t, err := time.Parse("15:04:05", hms)
	if err != nil {
		return "", fmt.Errorf("timetz %q: %w", s, err)
	}
	secs := ((t.Hour()*60+t.Minute())*60 + t.Second() - off) % 86400
	if secs < 0 {
		secs += 86400
	}
	out := fmt.Sprintf("%02d:%02d:%02d", secs/3600, secs/60%60, secs%60)
	if frac = strings.TrimRight(frac, "0"); frac != "" {
		out += "." + frac
	}
	return out + "Z", nil
}

// zonedTimestamp is a timestamptz's Connect value:
// io.debezium.time.ZonedTimestamp, the instant in UTC with as many
// fraction digits as the column's precision (6 when it has none), or, for
// timestamptz(0), as Java's ISO_OFFSET_DATE_TIME writes it (no fraction
// unless there is one). Postgres's infinities stay the words.
func zonedTimestamp(col *decode.Column, text []byte) (string, error) {
	if s := string(text); s == "infinity" || s == "-infinity" {
		return s, nil
	}
	t, err := decode.ParseTimestamp(text)
	if err != nil {
		return "", err
	}
	t = t.UTC()
	width := 6
	if col.TypMod >= 0 && col.TypMod <= 6 {
		width = int(col.TypMod)
	}
	out := t.Format("2006-01-02T15:04:05")
	if width > 0 {
		out += "." + fmt.Sprintf("%09d", t.Nanosecond())[:width]
	} else if ns := t.Nanosecond(); ns != 0 {
		out += "." + strings.TrimRight(fmt.Sprintf("%09d", ns), "0")
	}
	return out + "Z", nil
}

// microDuration is an interval's Connect value: io.debezium.time.MicroDuration,
// microseconds, computed as Debezium computes it from pgjdbc's PGInterval:
// a month is 365.25/12 days, in double arithmetic truncated to a long.
// Each step is rounded to float64 on its own, as Java does (Go could
// otherwise fuse a multiply and an add).
func microDuration(text []byte) (int64, error) {
	years, months, days, hours, minutes, seconds, err := pgInterval(string(text))
	if err != nil {
		return 0, err
	}
	// PGInterval.setSeconds and getSeconds: whole seconds and microseconds.
	total := int64(math.Floor(float64(seconds*1e6) + 0.5))
	secs := float64(total/1e6) + float64(total%1e6)/1e6
	const daysPerMonth = 365.25 / 12.0
	numberOfDays := float64(float64(years*12+months)*daysPerMonth) + float64(days)
	numberOfSeconds := float64(float64(float64(float64(float64(numberOfDays*24)+float64(hours))*60)+float64(minutes))*60) + secs
	return int64(float64(numberOfSeconds * 1e6)), nil
}

// pgInterval reads an interval in Postgres's default IntervalStyle
// (postgres), as PGInterval.setValue does: "1 year 2 mons 3 days
// 04:05:06.789", "-1 days -00:00:01".
func pgInterval(s string) (years, months, days, hours, minutes int, seconds float64, err error) {
	bad := func() error { return fmt.Errorf("interval %q is not in IntervalStyle postgres", s) }
	if strings.HasPrefix(s, "P") || strings.HasPrefix(s, "@") {
		return 0, 0, 0, 0, 0, 0, bad()
	}
	fields := strings.Fields(strings.ToLower(strings.ReplaceAll(s, "+", " ")))
	var value string
	for i, tok := range fields {
		if i%2 == 0 {
			h, rest, ok := strings.Cut(tok, ":")
			if !ok {
				value = tok
				continue
			}
			neg := strings.HasPrefix(h, "-")
			hh, err1 := strconv.Atoi(strings.TrimPrefix(h, "-"))
			if len(rest) < 2 {
				return 0, 0, 0, 0, 0, 0, bad()
			}
			mm, err2 := strconv.Atoi(rest[:2])
			var ss float64
			var err3 error
			if _, sec, ok := strings.Cut(rest, ":"); ok {
				ss, err3 = strconv.ParseFloat(sec, 64)
			}
			if errors.Join(err1, err2, err3) != nil {
				return 0, 0, 0, 0, 0, 0, bad()
			}
			hours, minutes, seconds = hh, mm, ss
			if neg {
				hours, minutes, seconds = -hh, -mm, -ss
			}
			value = ""
			continue
		}
		n, err := strconv.Atoi(value)
		if value == "" || err != nil {
			return 0, 0, 0, 0, 0, 0, bad()
		}
		switch {
		case strings.HasPrefix(tok, "year"):
			years = n
		case strings.HasPrefix(tok, "mon"):
			months = n
		case strings.HasPrefix(tok, "day"):
			days = n
		case strings.HasPrefix(tok, "hour"):
			hours = n
		case strings.HasPrefix(tok, "min"):
			minutes = n
		case strings.HasPrefix(tok, "sec"):
			seconds = float64(n)
		}
	}
	return years, months, days, hours, minutes, seconds, nil
}

// money is a money column's Connect Decimal: the amount with the currency
// symbol and grouping removed, as Debezium's PostgresMoney reads it, at
// money.fraction.digits 2.
func money(text []byte) (*big.Int, error) {
	s := string(text)
	if s == "" {
		return nil, errors.New("money is empty")
	}
	neg := s[0] == '(' || s[0] == '-'
	s = strings.TrimPrefix(s, "-")
	s = strings.TrimSuffix(strings.TrimPrefix(s, "("), ")")
	if s != "" && (s[0] < '0' || s[0] > '9') && s[0] != '.' {
		s = s[1:]
	}
	s = strings.ReplaceAll(s, ",", "")
	if neg {
		s = "-" + s
	}
	u, err := decimal([]byte(s), moneyScale)
	if err != nil {
		return nil, fmt.Errorf("money %q %w", text, err)
	}
	return u, nil
}

// moneyScale is Debezium's money.fraction.digits default.
const moneyScale = 2

// variableScale is a numeric without precision as Debezium's
// VariableScaleDecimal holds it: the unscaled value and the scale the text
// has.
func variableScale(text []byte) (u *big.Int, scale int, err error) {
	_, frac, _ := strings.Cut(string(text), ".")
	u, err = decimal(text, len(frac))
	if err != nil {
		return nil, 0, fmt.Errorf("numeric %q %w", text, err)
	}
	return u, len(frac), nil
}

// bytea is a bytea column's bytes, from its hex text.
func bytea(text []byte) ([]byte, error) {
	if len(text) < 2 || text[0] != '\\' || text[1] != 'x' {
		return nil, errors.New(`bytea is not in hex format (bytea_output must be 'hex')`)
	}
	return hex.DecodeString(string(text[2:]))
}

// byteBuffer is how StringConverter writes a bytes value: Debezium hands it
// a java.nio.ByteBuffer, whose toString names its position, limit and
// capacity, not its bytes.
func byteBuffer(dst []byte, n int) []byte {
	return fmt.Appendf(dst, "java.nio.HeapByteBuffer[pos=0 lim=%d cap=%d]", n, n)
}

// arrayElements reads a one-dimensional array in Postgres's text form,
// {a,"b c",NULL}: each element's text, nil for NULL.
func arrayElements(text []byte) ([][]byte, error) {
	s := string(text)
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, fmt.Errorf("array %q is not {...} (an array with explicit bounds is not encoded)", s)
	}
	s = s[1 : len(s)-1]
	if s == "" {
		return [][]byte{}, nil
	}
	var out [][]byte
	for i := 0; i <= len(s); {
		if i < len(s) && s[i] == '{' {
			return nil, fmt.Errorf("array %q has more than one dimension, which walstream does not encode", text)
		}
		var elem []byte
		quoted := i < len(s) && s[i] == '"'
		if quoted {
			i++
			elem = []byte{}
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				elem = append(elem, s[i])
			}
			if i == len(s) {
				return nil, fmt.Errorf("array %q has an unterminated quoted element", text)
			}
			i++
		} else {
			j := strings.IndexByte(s[i:], ',')
			if j < 0 {
				j = len(s) - i
			}
			if e := s[i : i+j]; !strings.EqualFold(e, "NULL") {
				elem = []byte(e)
			}
			i += j
		}
		out = append(out, elem)
		if i < len(s) && s[i] != ',' {
			return nil, fmt.Errorf("array %q: want , after an element at offset %d", text, i)
		}
		i++
	}
	return out, nil
}

// elementList appends an array's elements as enc writes each, between open
// and close with sep between them; NULL elements as null.
func elementList(dst []byte, col *decode.Column, text []byte, open, sep, close string,
	enc func(dst []byte, elem *decode.Column, text []byte) ([]byte, error)) ([]byte, error) {
	elem, _ := col.Elem()
	elems, err := arrayElements(text)
	if err != nil {
		return nil, err
	}
	dst = append(dst, open...)
	for i, e := range elems {
		if i > 0 {
			dst = append(dst, sep...)
		}
		if e == nil {
			dst = append(dst, "null"...)
			continue
		}
		if dst, err = enc(dst, &elem, e); err != nil {
			return nil, err
		}
	}
	return append(dst, close...), nil
}

// headerString appends a column's value as SimpleHeaderConverter writes a
// header: Kafka Connect's Values.convertToString, which is the value's
// toString, but for bytes (base64) and lists and structs, written as JSON
// of a kind: strings inside them quoted, with only \ and " escaped.
func headerString(dst []byte, col *decode.Column, text []byte) (out []byte, err error) {
	if text == nil {
		return dst, nil
	}
	defer func() {
		if out == nil && err == nil {
			out = []byte{} // an empty value is a value, not none
		}
	}()
	switch {
	case col.Type == decode.TypeBytea:
		b, err := bytea(text)
		if err != nil {
			return nil, err
		}
		return base64.StdEncoding.AppendEncode(dst, b), nil
	case col.VariableScale():
		return variableScaleJSON(dst, text)
	}
	if _, ok := col.Elem(); ok {
		return elementList(dst, col, text, "[", ",", "]", embeddedString)
	}
	return javaString(dst, col, text) // for text, the column's bytes themselves
}

// embeddedString is an element of a list in a header: a string value
// quoted, with \ and " escaped (Values.escape), bytes as quoted base64,
// anything else as its toString.
func embeddedString(dst []byte, col *decode.Column, text []byte) ([]byte, error) {
	switch typ, _ := connectType(col); typ {
	case "string":
		s, err := javaString(nil, col, text)
		if err != nil {
			return nil, err
		}
		return appendValuesString(dst, string(s)), nil
	case "bytes":
		b, err := bytea(text)
		if err != nil {
			return nil, err
		}
		return append(base64.StdEncoding.AppendEncode(append(dst, '"'), b), '"'), nil
	}
	return javaString(dst, col, text)
}

// variableScaleJSON appends a VariableScaleDecimal struct as JsonConverter
// (and Values, for a header) writes it: {"scale":N,"value":"<base64>"}.
func variableScaleJSON(dst []byte, text []byte) ([]byte, error) {
	u, scale, err := variableScale(text)
	if err != nil {
		return nil, err
	}
	dst = strconv.AppendInt(append(dst, `{"scale":`...), int64(scale), 10)
	dst = base64.StdEncoding.AppendEncode(append(dst, `,"value":"`...), twosComplement(u))
	return append(dst, `"}`...), nil
}
