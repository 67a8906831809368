package publish

import (
	"context"
	"errors"
	"testing"

	"github.com/walstream/walstream/decode"
)

func TestBinaryDataConverter(t *testing.T) {
	o := outbox("public", nil)
	key := &decode.Column{Name: "aggregateid", Type: decode.TypeText, TypMod: -1, NotNull: true}
	bytea := &decode.Column{Name: "payload", Type: decode.TypeBytea, TypMod: -1}
	text := &decode.Column{Name: "payload", Type: decode.TypeText, TypMod: -1}
	ev := func(col *decode.Column, payload []byte) decode.Event {
		return decode.Event{Identity: decode.Identity{ID: []byte("1"), Table: "public.outbox"}, Source: o, AggregateType: []byte("Order"),
			AggregateID: []byte("o-1"), KeyColumn: key, PayloadColumn: col, Payload: payload, PayloadBinary: col.Type == decode.TypeBytea}
	}
	delegated, err := NewRouter(Encoding{Key: FormatBinary, KeyDelegate: FormatJSON, Value: FormatBinary, ValueDelegate: FormatJSON}, o)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := NewRouter(Encoding{Key: FormatString, Value: FormatBinary, ValueDelegate: FormatBinary}, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		r          *Router
		ev         decode.Event
		key, value string
		bad        bool
	}{
		{"bytea as it is", alone, ev(bytea, []byte{0, 1, 0xff}), "o-1", "\x00\x01\xff", false},
		{"bytea with a delegate", delegated, ev(bytea, []byte{0, 1}), `"o-1"`, "\x00\x01", false},
		{"text by the delegate", delegated, ev(text, []byte(`{"a":1}`)), `"o-1"`, `"{\"a\":1}"`, false},
		{"text without a delegate", alone, ev(text, []byte(`{"a":1}`)), "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := tc.r.Record(context.Background(), &tc.ev)
			var ee *EncodingError
			if tc.bad {
				if !errors.As(err, &ee) || !errors.Is(err, errNoDelegate) {
					t.Fatalf("err = %v, want bad input: no delegate", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(rec.Key) != tc.key || string(rec.Value) != tc.value {
				t.Errorf("key %q value %q, want %q %q", rec.Key, rec.Value, tc.key, tc.value)
			}
		})
	}
}
