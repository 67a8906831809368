package decode

import (
	"testing"
)

// BenchmarkDecodeInsert decodes a captured outbox INSERT inside an open
// transaction; parts of 1,000 events are handed on and dropped.
func BenchmarkDecodeInsert(b *testing.B) {
	frames := readFrames(b, "basic")
	relation, begin, insert := frames[1], frames[0], frames[2]
	d := New(outboxConfig("public", nil))
	for _, f := range []frame{relation, begin} {
		if _, err := d.Decode(f.lsn, f.data); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(insert.data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(insert.lsn, insert.data); err != nil {
			b.Fatal(err)
		}
	}
}
