package publish

import (
	"context"
	"testing"

	"github.com/walstream/walstream/decode"
)

// BenchmarkRecord builds the Kafka record of an event whose aggregate type
// was seen before, the steady state.
func BenchmarkRecord(b *testing.B) {
	o := outbox("public", nil)
	r, err := NewRouter(Encoding{}, o)
	if err != nil {
		b.Fatal(err)
	}
	ev := decode.Event{Source: o, Identity: decode.Identity{ID: []byte("11111111-1111-1111-1111-111111111111")}, AggregateType: []byte("Order"),
		AggregateID: []byte("o-1"), Payload: make([]byte, 430)}
	b.ReportAllocs()
	for b.Loop() {
		if rec, err := r.Record(context.Background(), &ev); err != nil || rec.Topic != "outbox.event.Order" {
			b.Fatal(rec, err)
		}
	}
}
