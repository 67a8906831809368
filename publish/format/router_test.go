package format

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/decode"
)

func TestRoute(t *testing.T) {
	for _, tc := range []struct{ regex, replacement, in, want string }{
		{decode.DefaultTopicRegex, decode.DefaultTopicReplacement, "Order", "outbox.event.Order"},
		{decode.DefaultTopicRegex, decode.DefaultTopicReplacement, "order", "outbox.event.order"},
		{decode.DefaultTopicRegex, "events-${routedByValue}-v1", "Order", "events-Order-v1"},
		{decode.DefaultTopicRegex, "all-events", "Order", "all-events"},
		{`(.*)Created`, "created.$1", "OrderCreated", "created.Order"},
		{`(.*)Created`, "created.$1", "OrderShipped", "OrderShipped"}, // no match: the value itself
		{`(a)(b)`, "$12", "ab", "a2"}, // Java: group 1, then "2"
		{`(?<routedByValue>.*)`, `cost\$.${routedByValue}`, "x", "cost$.x"},
	} {
		rt, err := NewRoute(tc.regex, tc.replacement)
		if err != nil {
			t.Fatalf("NewRoute(%q, %q): %v", tc.regex, tc.replacement, err)
		}
		for range 2 { // the second time from the cache
			if got := rt.Topic([]byte(tc.in)); got != tc.want {
				t.Errorf("route %q -> %q: Topic(%q) = %q, want %q", tc.regex, tc.replacement, tc.in, got, tc.want)
			}
		}
	}
	for _, bad := range []struct{ regex, replacement string }{
		{"(", "x"}, {decode.DefaultTopicRegex, "${other}"}, {decode.DefaultTopicRegex, "$2"}, {decode.DefaultTopicRegex, "a$"}, {decode.DefaultTopicRegex, `a\`},
	} {
		if _, err := NewRoute(bad.regex, bad.replacement); err == nil {
			t.Errorf("NewRoute(%q, %q) accepted", bad.regex, bad.replacement)
		}
	}
}

func TestRouterRecord(t *testing.T) {
	o := outbox("public", nil)
	r, err := NewRouter(Encoding{}, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	ev := decode.Event{Source: o, Identity: decode.Identity{ID: []byte("id-1")}, AggregateType: []byte("Order"), AggregateID: []byte("o-1"), Payload: []byte(`{"a":1}`)}
	rec, err := r.Record(context.Background(), &ev)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "outbox.event.Order" || string(rec.Key) != "o-1" || string(rec.Value) != `{"a":1}` || len(rec.Headers) != 1 || rec.Headers[0].Key != "id" || string(rec.Headers[0].Value) != "id-1" {
		t.Fatalf("record %+v", rec)
	}
}

// Routes are found by table name, not by the mapping's pointer: an equal
// mapping of the same table routes alike, and an event of a table the
// router was not given is an error rather than a default route.
func TestRouterByTable(t *testing.T) {
	r, err := NewRouter(Encoding{}, nil, outbox("public", func(o *decode.Outbox) { o.TopicReplacement = "x.${routedByValue}" }))
	if err != nil {
		t.Fatal(err)
	}
	ev := decode.Event{Source: outbox("public", nil), Identity: decode.Identity{ID: []byte("id-1")}, AggregateType: []byte("Order"), AggregateID: []byte("o-1")}
	if topic, err := r.Topic(&ev); err != nil || topic != "x.Order" {
		t.Fatalf("Topic = %q, %v; want the route of public.outbox", topic, err)
	}
	ev.Source = outbox("other", nil)
	if _, err := r.Record(context.Background(), &ev); err == nil || !strings.Contains(err.Error(), "outbox table other.outbox has no route") {
		t.Fatalf("Record of an unknown table: %v", err)
	}
}

// An event is told by its id header, or, where it is null, by its key
// and value.
func TestEventKey(t *testing.T) {
	withID := &kgo.Record{Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "other", Value: []byte("x")}, {Key: HeaderID, Value: []byte("e-1")}}}
	if got := EventKey(withID); got != "id:e-1" {
		t.Errorf("EventKey = %q, want the id header", got)
	}
	// A null id: key and value tell the event, a null key from an empty one.
	a := EventKey(&kgo.Record{Key: nil, Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: HeaderID}}})
	b := EventKey(&kgo.Record{Key: []byte{}, Value: []byte("v")})
	c := EventKey(&kgo.Record{Key: []byte{}, Value: []byte("v")})
	if a == b || b != c {
		t.Errorf("keys of null and empty key: %q, %q, %q", a, b, c)
	}
}
