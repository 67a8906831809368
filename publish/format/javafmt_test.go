package format

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/walstream/walstream/decode"
)

// Java's Double.toString and Float.toString (JDK 19+: the shortest digits
// that read back), which Jackson's writeNumber uses for double and float
// nodes: plain from 10^-3 to 10^7, else d.dddE±n.
func TestJavaDouble(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		bits int
		want string
	}{
		{10.5, 64, "10.5"}, {1, 64, "1.0"}, {100, 64, "100.0"}, {0.001, 64, "0.001"}, {0.0001, 64, "1.0E-4"},
		{12345678.9, 64, "1.23456789E7"}, {1e7, 64, "1.0E7"}, {9999999, 64, "9999999.0"}, {1e21, 64, "1.0E21"},
		{-2.5, 64, "-2.5"}, {0, 64, "0.0"}, {math.Copysign(0, -1), 64, "-0.0"}, {math.NaN(), 64, "NaN"},
		{math.Inf(1), 64, "Infinity"}, {0.1, 64, "0.1"}, {float64(float32(0.1)), 32, "0.1"}, {123456.789, 64, "123456.789"},
		{float64(float32(1e10)), 32, "1.0E10"}, {1.0 / 3, 64, "0.3333333333333333"},
		// One digit reads back, and the nearest two-digit decimal is not d.0:
		// the smallest subnormals, as Temurin 25 writes them.
		{math.SmallestNonzeroFloat64, 64, "4.9E-324"}, {2 * math.SmallestNonzeroFloat64, 64, "9.9E-324"},
		{-math.SmallestNonzeroFloat64, 64, "-4.9E-324"},
		{math.SmallestNonzeroFloat32, 32, "1.4E-45"}, {7 * math.SmallestNonzeroFloat32, 32, "9.8E-45"},
		{2e-3, 64, "0.002"}, {3e10, 64, "3.0E10"},
	} {
		if got := string(javaDouble(nil, tc.f, tc.bits)); got != tc.want {
			t.Errorf("javaDouble(%v, %d) = %s, want %s", tc.f, tc.bits, got, tc.want)
		}
	}
}

// BigDecimal.toString: plain unless the adjusted exponent is below -6;
// BigInteger.toByteArray: the shortest two's complement.
func TestJavaDecimal(t *testing.T) {
	for _, tc := range []struct {
		text  string
		scale int
		str   string
		bytes []byte
	}{
		{"12.50", 2, "12.50", []byte{0x04, 0xE2}},
		{"0.00", 2, "0.00", []byte{0x00}},
		{"-0.05", 2, "-0.05", []byte{0xFB}},
		{"1.28", 2, "1.28", []byte{0x00, 0x80}},
		{"-1.28", 2, "-1.28", []byte{0x80}},
		{"-1.29", 2, "-1.29", []byte{0xFF, 0x7F}},
		{"0.0000001", 7, "1E-7", []byte{0x01}},
		{"12.5", 2, "12.50", []byte{0x04, 0xE2}}, // a default at a smaller scale
		{"42", 0, "42", []byte{0x2A}},
	} {
		u, err := decimal([]byte(tc.text), tc.scale)
		if err != nil {
			t.Fatalf("decimal(%q): %v", tc.text, err)
		}
		if got := string(javaBigDecimal(nil, u, tc.scale)); got != tc.str {
			t.Errorf("BigDecimal(%s).toString() = %s, want %s", tc.text, got, tc.str)
		}
		if got := twosComplement(u); string(got) != string(tc.bytes) {
			t.Errorf("toByteArray(%s) = % x, want % x", u, got, tc.bytes)
		}
	}
	for _, bad := range []string{"NaN", "Infinity", "1.234"} {
		if _, err := decimal([]byte(bad), 2); err == nil {
			t.Errorf("decimal(%q) accepted", bad)
		}
	}
}

func jsonValid(b []byte) bool { return json.Valid(b) }

// FuzzExpand: expansion never panics, and what it writes under
// JsonConverter is valid JSON.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{`{"a": 1, "b": [1, 2], "c": {"d": null}}`, `{"x": [{"n": 1}, {"m": "a"}]}`, `[1]`, `{"big": 123456789012345678901234567890}`, `{"e": 1e400}`} {
		f.Add(s)
	}
	o := &decode.Outbox{Columns: decode.Columns{Payload: "payload"}, ExpandJSONNulls: true, ExpandJSONEmptyArrays: true}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := expand([]byte(s), o)
		if err != nil || n == nil {
			return
		}
		if out := n.json(nil); !jsonValid(out) {
			t.Fatalf("expand(%q) wrote invalid JSON %s", s, out)
		}
		_ = n.schema.json(nil, "")
		_ = n.javaString(nil)
	})
}
