package format

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// javaDouble appends f as Java's Double.toString (bits 64) or
// Float.toString (bits 32) writes it, which is also how Jackson writes a
// double or float node behind JsonConverter: the shortest digits that read
// back as f (JDK 19 and later), in plain notation from 10^-3 up to 10^7
// ("10.5", "1.0") and in Java's scientific notation outside it
// ("1.23456789E7", "1.0E-4").
func javaDouble(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	case f == 0:
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// d.ddddde±x: the shortest digits and the decimal exponent. Where one
	// digit reads back as f, Java writes two anyway, and takes of the
	// two-digit decimals the one nearest to f: it differs from d.0 only
	// for the smallest subnormals (4.9E-324 and 1.4E-45, not 5.0E-324 and
	// 1.0E-45).
	e := strconv.FormatFloat(f, 'e', -1, bits)
	if len(e) > 1 && e[1] == 'e' {
		if near := strconv.FormatFloat(f, 'e', 1, bits); near[2] != '0' && readsBack(near, f, bits) {
			e = near
		}
	}
	mant, expText, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expText)
	if f >= 1e-3 && f < 1e7 {
		if exp >= 0 {
			for len(digits) < exp+2 {
				digits += "0"
			}
			return append(append(append(dst, digits[:exp+1]...), '.'), digits[exp+1:]...)
		}
		return append(append(dst, "0."+strings.Repeat("0", -exp-1)...), digits...)
	}
	if len(digits) == 1 {
		digits += "0"
	}
	dst = append(append(append(dst, digits[0], '.'), digits[1:]...), 'E')
	return strconv.AppendInt(dst, int64(exp), 10)
}

// readsBack says whether the decimal text parses back to f.
func readsBack(text string, f float64, bits int) bool {
	g, err := strconv.ParseFloat(text, bits)
	return err == nil && g == f
}

// errNotDecimal is a numeric value a Connect Decimal cannot hold.
var errNotDecimal = errors.New("is not a decimal number (NaN and infinity have no Kafka Connect Decimal)")

// decimal reads numeric's text form at the column's scale, as Debezium's
// Decimal (a BigDecimal) holds it: the unscaled integer and the scale.
func decimal(text []byte, scale int) (*big.Int, error) {
	s := string(text)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || strings.Trim(whole+frac, "0123456789") != "" {
		return nil, errNotDecimal
	}
	for len(frac) < scale {
		frac += "0"
	}
	// Postgres writes a numeric(p,s) value with exactly s decimals; a
	// default may have more, which Debezium would round (HALF_EVEN), and
	// walstream truncates only trailing zeros.
	for len(frac) > scale && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	if len(frac) > scale {
		return nil, errors.New("has more decimals than the column's scale")
	}
	u, ok := new(big.Int).SetString(whole+frac, 10)
	if !ok {
		return nil, errNotDecimal
	}
	if neg {
		u.Neg(u)
	}
	return u, nil
}

// javaBigDecimal appends BigDecimal.toString of unscaled×10^-scale: plain
// notation unless the adjusted exponent is below -6, then scientific.
func javaBigDecimal(dst []byte, u *big.Int, scale int) []byte {
	digits := new(big.Int).Abs(u).String()
	if u.Sign() < 0 {
		dst = append(dst, '-')
	}
	adjusted := len(digits) - 1 - scale
	switch {
	case scale == 0:
		return append(dst, digits...)
	case scale > 0 && adjusted >= -6:
		if len(digits) <= scale {
			return append(append(dst, "0."+strings.Repeat("0", scale-len(digits))...), digits...)
		}
		return append(append(append(dst, digits[:len(digits)-scale]...), '.'), digits[len(digits)-scale:]...)
	}
	dst = append(dst, digits[0])
	if len(digits) > 1 {
		dst = append(append(dst, '.'), digits[1:]...)
	}
	dst = append(dst, 'E')
	if adjusted >= 0 {
		dst = append(dst, '+')
	}
	return strconv.AppendInt(dst, int64(adjusted), 10)
}

// twosComplement is BigInteger.toByteArray: the shortest big-endian two's
// complement bytes, which Kafka Connect's Decimal writes.
func twosComplement(u *big.Int) []byte {
	if u.Sign() >= 0 {
		b := u.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -u - 1, inverted.
	m := new(big.Int).Neg(u)
	m.Sub(m, big.NewInt(1))
	b := m.Bytes()
	for i := range b {
		b[i] = ^b[i]
	}
	if len(b) == 0 || b[0]&0x80 == 0 {
		b = append([]byte{0xFF}, b...)
	}
	return b
}
