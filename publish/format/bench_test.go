package format

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"
	"github.com/walstream/walstream/decode"
)

// benchPayload is a jsonb payload of about 430 bytes, as walbench writes.
var benchPayload = []byte(`{"id": 1234567, "seq": 42, "agg": "order-17", "note": "lorem ipsum dolor sit amet, consectetur adipiscing elit", ` +
	`"items": [{"sku": "A-1", "qty": 2, "price": 10.5}, {"sku": "B-22", "qty": 1, "price": 99.99}], "customer": {"name": "Jane Doe", ` +
	`"email": "jane@example.com", "address": {"street": "1 Main St", "city": "Springfield", "zip": "12345"}}, "total": 120.99, "paid": true, "tags": ["a", "b", "c"]}`)

// BenchmarkRecord builds the Kafka record of an event whose aggregate type
// was seen before, the steady state, under each converter; under Avro the
// schemas' ids are known by then, so the registry is not asked.
func BenchmarkRecord(b *testing.B) {
	reg := srfake.New()
	defer reg.Close()
	key := &decode.Column{Name: "aggregateid", Type: decode.TypeText, TypMod: -1, NotNull: true}
	payload := &decode.Column{Name: "payload", Type: decode.TypeJSONB, TypMod: -1, NotNull: true}
	eventType := &decode.Column{Name: "type", Type: decode.TypeText, TypMod: -1, NotNull: true}
	for _, bc := range []struct {
		name     string
		enc      Encoding
		envelope bool
	}{
		{"string", Encoding{}, false},
		{"json", Encoding{Key: JSON, Value: JSON}, false},
		{"avro", avroEncoding(reg.URL()), false},
		{"avro envelope", avroEncoding(reg.URL()), true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o := outbox("public", nil)
			ev := decode.Event{Source: o, Identity: decode.Identity{ID: []byte("11111111-1111-1111-1111-111111111111"), Table: "public.outbox"},
				AggregateType: []byte("Order"), AggregateID: []byte("o-1"), Payload: benchPayload, KeyColumn: key, PayloadColumn: payload}
			if bc.envelope {
				o.Additional = []decode.Additional{{Column: "type", Placement: decode.PlaceEnvelope, Alias: "eventType"}}
				ev.Fields = []decode.Field{{Name: "eventType", Placement: decode.PlaceEnvelope, Column: eventType, Value: []byte("OrderCreated")}}
			}
			r, err := NewRouter(bc.enc, nil, o)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if rec, err := r.Record(context.Background(), &ev); err != nil || rec.Topic != "outbox.event.Order" {
					b.Fatal(rec, err)
				}
			}
		})
	}
}
