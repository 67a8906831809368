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

// BenchmarkDecodeTransaction decodes a captured one-row transaction, BEGIN,
// INSERT and COMMIT, as most outbox transactions are.
func BenchmarkDecodeTransaction(b *testing.B) {
	frames := readFrames(b, "basic")
	relation, begin, insert, commit := frames[1], frames[5], frames[6], frames[7]
	d := New(outboxConfig("public", nil))
	if _, err := d.Decode(relation.lsn, relation.data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(insert.data)))
	b.ReportAllocs()
	for b.Loop() {
		for _, f := range []frame{begin, insert} {
			if _, err := d.Decode(f.lsn, f.data); err != nil {
				b.Fatal(err)
			}
		}
		if tx, err := d.Decode(commit.lsn, commit.data); err != nil || tx == nil || len(tx.Events) != 1 {
			b.Fatal(tx, err)
		}
	}
}

// BenchmarkDecodeTenRowTransaction decodes a captured transaction of ten
// rows, BEGIN, ten INSERTs and COMMIT, one after the other, as walbench's
// load of 10,000 rows a second sends them.
func BenchmarkDecodeTenRowTransaction(b *testing.B) {
	frames := readFrames(b, "basic")
	relation, begin, insert, commit := frames[1], frames[5], frames[6], frames[7]
	d := New(outboxConfig("public", nil))
	if _, err := d.Decode(relation.lsn, relation.data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(10 * int64(len(insert.data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(begin.lsn, begin.data); err != nil {
			b.Fatal(err)
		}
		for range 10 {
			if _, err := d.Decode(insert.lsn, insert.data); err != nil {
				b.Fatal(err)
			}
		}
		if tx, err := d.Decode(commit.lsn, commit.data); err != nil || tx == nil || len(tx.Events) != 10 {
			b.Fatal(tx, err)
		}
	}
}
