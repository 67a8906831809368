package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The timestamp is found in a value under every converter: the payload
// as it is (string, and Avro's string after its header) or escaped in a
// JSON string.
func TestRecordTimestamp(t *testing.T) {
	for _, v := range []string{`{"seq": 1, "ts_us": 1732600000123456}`, `"{\"seq\": 1, \"ts_us\": 1732600000123456}"`,
		"\x00\x00\x00\x00\x02\x4c{\"ts_us\": 1732600000123456, \"seq\": 1}"} {
		if ts, err := recordTimestamp([]byte(v)); err != nil || ts != 1732600000123456 {
			t.Errorf("recordTimestamp(%q) = %d, %v", v, ts, err)
		}
	}
}

// A window's latencies split at walstream's producer: up to the record's
// timestamp and from there, for the rows timestamped in the window only.
func TestLatencyBetween(t *testing.T) {
	c := &timedConsumer{by: map[string]*timings{"a": {ts: []int64{100, 200, 300, 400}, lat: []int64{10, 20, 30, 40}, produced: []int64{1, 5, 25, 4}}}}
	lat, to, from := c.between("a", 200, 400)
	if !slices.Equal(lat, []int64{20, 30}) || !slices.Equal(to, []int64{5, 25}) || !slices.Equal(from, []int64{15, 5}) {
		t.Errorf("between(a, 200, 400) = %v, %v, %v; want [20 30], [5 25], [15 5]", lat, to, from)
	}
	if lat, _, _ := c.latencies("a", 300); !slices.Equal(lat, []int64{30, 40}) {
		t.Errorf("latencies(a, 300) = %v, want [30 40]", lat)
	}
}

// The consumer keeps, per topic, the rows written from its moment on, and
// every row when that is the zero time; a record without a timestamp is
// its error.
func TestTimedConsumerTake(t *testing.T) {
	rec := func(topic string, ts int64) *kgo.Record {
		return &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf(`{"ts_us": %d}`, ts)), Timestamp: time.UnixMicro(ts + 3)}
	}
	fetches := func(rs ...*kgo.Record) kgo.Fetches {
		return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "a", Partitions: []kgo.FetchPartition{{Records: rs}}}}}}
	}
	for _, tc := range []struct {
		from        time.Time
		want, wantB int64
	}{{time.UnixMicro(200), 1, 1}, {time.Time{}, 2, 1}} {
		c := &timedConsumer{from: tc.from.UnixMicro(), by: make(map[string]*timings)}
		c.take(fetches(rec("a", 100), rec("a", 250), rec("b", 300)), 310)
		if got := c.receivedOf("a"); got != tc.want {
			t.Errorf("from %v: %d of topic a kept, want %d", tc.from, got, tc.want)
		}
		if c.receivedOf("b") != tc.wantB || c.received() != tc.want+tc.wantB {
			t.Errorf("from %v: %d of b, %d in all; want %d, %d", tc.from, c.receivedOf("b"), c.received(), tc.wantB, tc.want+tc.wantB)
		}
		if lat, to, _ := c.latencies("b", 0); !slices.Equal(lat, []int64{10}) || !slices.Equal(to, []int64{3}) {
			t.Errorf("from %v: topic b's latencies %v and times to the producer %v, want [10], [3]", tc.from, lat, to)
		}
		if c.err() != nil {
			t.Errorf("from %v: %v", tc.from, c.err())
		}
	}
	c := &timedConsumer{by: make(map[string]*timings)}
	c.take(fetches(&kgo.Record{Topic: "a", Value: []byte(`{}`)}), 1)
	if c.err() == nil || c.received() != 0 {
		t.Errorf("a record without ts_us: err %v, %d kept; want an error, none", c.err(), c.received())
	}
}
