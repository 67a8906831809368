package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/walstream/walstream/internal/testenv"
)

// The minimal client's figure is a floor only if its transactions are
// real: committed, visible to read_committed consumers, in order, with
// and without transaction version 2.
func TestMinimalClientCommits(t *testing.T) {
	for _, kind := range []testenv.BrokerKind{testenv.BrokerKafka, testenv.BrokerKafka39} {
		t.Run(string(kind), func(t *testing.T) {
			b := testenv.StartBroker(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			mc, err := dialMinimal(ctx, b.Addr(), "minimal-test", "data", "positions")
			if err != nil {
				t.Fatal(err)
			}
			defer mc.Close()
			if want := kind == testenv.BrokerKafka; mc.tv2 != want {
				t.Fatalf("transaction version 2 in use: %v, want %v", mc.tv2, want)
			}
			const txns, perTxn = 10, 4
			for i := range txns {
				var recs []minimalRecord
				for j := range perTxn {
					recs = append(recs, minimalRecord{"data", fmt.Appendf(nil, "%d", i*perTxn+j), []byte("v")})
				}
				recs = append(recs, minimalRecord{"positions", []byte("k"), fmt.Appendf(nil, "%d", i)})
				if err := mc.commit(ctx, recs); err != nil {
					t.Fatalf("transaction %d: %v", i, err)
				}
			}
			// Records go to the partitions in turn, so each partition's keys
			// rise in steps of the partition count.
			seen := make(map[int32][]int)
			err = testenv.ReadCommitted(ctx, b.Addr(), "data", func(r *kgo.Record) {
				var k int
				fmt.Sscan(string(r.Key), &k)
				seen[r.Partition] = append(seen[r.Partition], k)
			})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for p, keys := range seen {
				n += len(keys)
				for i := 1; i < len(keys); i++ {
					if keys[i] <= keys[i-1] {
						t.Errorf("partition %d: key %d after %d", p, keys[i], keys[i-1])
					}
				}
			}
			if n != txns*perTxn {
				t.Errorf("read_committed sees %d records of data, want %d: %v", n, txns*perTxn, seen)
			}
			var positions []string
			if err := testenv.ReadCommitted(ctx, b.Addr(), "positions", func(r *kgo.Record) { positions = append(positions, string(r.Value)) }); err != nil {
				t.Fatal(err)
			}
			if len(positions) != txns {
				t.Errorf("read_committed sees %d records of positions, want %d", len(positions), txns)
			}
		})
	}
}
