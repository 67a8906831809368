package main

import (
	"slices"
	"testing"
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
	c := &latencyConsumer{timings: timings{ts: []int64{100, 200, 300, 400}, lat: []int64{10, 20, 30, 40}, produced: []int64{1, 5, 25, 4}}}
	lat, to, from := c.between(200, 400)
	if !slices.Equal(lat, []int64{20, 30}) || !slices.Equal(to, []int64{5, 25}) || !slices.Equal(from, []int64{15, 5}) {
		t.Errorf("between(200, 400) = %v, %v, %v; want [20 30], [5 25], [15 5]", lat, to, from)
	}
	if lat, _, _ := c.samples(300); !slices.Equal(lat, []int64{30, 40}) {
		t.Errorf("samples(300) = %v, want [30 40]", lat)
	}
}
