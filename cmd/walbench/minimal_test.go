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
				var recs []txnRecord
				for j := range perTxn {
					recs = append(recs, txnRecord{"data", fmt.Appendf(nil, "%d", i*perTxn+j), []byte("v")})
				}
				recs = append(recs, txnRecord{"positions", []byte("k"), fmt.Appendf(nil, "%d", i)})
				before := time.Now()
				committing, err := mc.commit(ctx, recs)
				if err != nil {
					t.Fatalf("transaction %d: %v", i, err)
				}
				if after := time.Now(); committing.Before(before) || committing.After(after) {
					t.Fatalf("transaction %d: commit sent at %s, outside the call, %s to %s", i, committing, before, after)
				}
			}
			// Each record is in the partition Kafka's default partitioner
			// picks for its key, and each partition's keys rise.
			byKey := kgo.StickyKeyPartitioner(nil).ForTopic("data")
			partitions := int(mc.partitions["data"])
			seen := make(map[int32][]int)
			err = testenv.ReadCommitted(ctx, b.Addr(), "data", func(r *kgo.Record) {
				var k int
				fmt.Sscan(string(r.Key), &k)
				seen[r.Partition] = append(seen[r.Partition], k)
				if want := byKey.Partition(&kgo.Record{Key: r.Key}, partitions); int(r.Partition) != want {
					t.Errorf("key %s in partition %d, want %d of %d", r.Key, r.Partition, want, partitions)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) < 2 {
				t.Errorf("%d records in %d partitions of %d: %v", txns*perTxn, len(seen), partitions, seen)
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
