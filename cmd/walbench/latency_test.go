package main

import "testing"

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
