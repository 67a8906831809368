package debezium

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// testdata/connect.offsets was written as FileOffsetBackingStore writes a
// standalone worker's offsets (a HashMap<byte[],byte[]> through Java 17's
// ObjectOutputStream): two connectors' offsets and a reset one's null.
func TestParseOffsetsFile(t *testing.T) {
	b, err := os.ReadFile("testdata/connect.offsets")
	if err != nil {
		t.Fatal(err)
	}
	if !IsOffsetsFile(b) {
		t.Fatal("IsOffsetsFile = false")
	}
	entries, err := readOffsetsFile(b)
	if err != nil || len(entries) != 3 {
		t.Fatalf("readOffsetsFile = %d entries, %v; want 3", len(entries), err)
	}
	o, err := ParseFile(b, Selector{Connector: "dbz-outbox"}, "testdata/connect.offsets")
	if err != nil || o.Commit != 26373240 || o.LSN != 26373424 || o.TxID != 733 || o.Server != "dbz" || o.MessageType != "MESSAGE" {
		t.Fatalf("dbz-outbox's offset = %+v, %v", o, err)
	}
	if o, err = ParseFile(b, Selector{Server: "bill"}, "f"); err != nil || o.Connector != "billing" || o.Commit != 26650224 {
		t.Fatalf("topic.prefix bill's offset = %+v, %v", o, err)
	}
	if _, err := ParseFile(b, Selector{Connector: "reset"}, "f"); !errors.Is(err, ErrNoOffset) {
		t.Errorf("a reset connector: %v, want ErrNoOffset", err)
	}
	if _, err := ParseFile(b, Selector{}, "f"); err == nil {
		t.Error("two connectors and no name: no error")
	}
	if _, err := ParseFile(nil, Selector{Connector: "dbz-outbox"}, "f"); !errors.Is(err, ErrNoOffset) || !strings.Contains(err.Error(), "f is empty") {
		t.Errorf("an empty file: %v, want ErrNoOffset naming it", err)
	}
	// Every truncation and every flipped byte is an error or a parse, never
	// a panic.
	for i := range len(b) {
		_, _ = readOffsetsFile(b[:i])
		c := append([]byte(nil), b...)
		c[i] ^= 0xFF
		_, _ = readOffsetsFile(c)
	}
	// A worker killed while it rewrites the file leaves a part of it:
	// no offset, as Kafka Connect reads it, not a broken file.
	for i := 4; i < len(b); i++ {
		if _, err := ParseFile(b[:i], Selector{Connector: "dbz-outbox"}, "f"); !errors.Is(err, ErrNoOffset) || !strings.Contains(err.Error(), fmt.Sprintf("f is cut short (%d bytes)", i)) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("the first %d of %d bytes: %v, want ErrNoOffset naming the file cut short, on one line", i, len(b), err)
		}
	}
}

func FuzzOffsetsFile(f *testing.F) {
	b, err := os.ReadFile("testdata/connect.offsets")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseOffsetsFile(b, Selector{}, "fuzz")
	})
}
