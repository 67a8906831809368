package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Record is a Kafka record as a read_committed reader saw it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	// Headers are "key=value" pairs joined by commas, as kcat prints them.
	Headers   string
	Timestamp int64 // milliseconds since the epoch
	Value     string
}

// Header returns the value of the first header named key, "" when none.
func (r Record) Header(key string) string {
	for _, h := range strings.Split(r.Headers, ",") {
		if v, ok := strings.CutPrefix(h, key+"="); ok {
			return v
		}
	}
	return ""
}

// Kcat reads a topic from the beginning to its end, read_committed, with
// kcat: a librdkafka client independent of the franz-go one walstream
// uses.
func Kcat(ctx context.Context, broker, topic string) ([]Record, error) {
	if err := WaitStable(ctx, broker, topic); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "kcat", "-b", broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed",
		"-f", "%p\t%o\t%k\t%h\t%T\t%s\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("reading %s with kcat: %w: %s", topic, err, stderr.String())
	}
	var recs []Record
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 6)
		if len(f) != 6 {
			return nil, fmt.Errorf("reading %s with kcat: line %q: want 6 fields", topic, sc.Text())
		}
		p, err1 := strconv.ParseInt(f[0], 10, 32)
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		ts, err3 := strconv.ParseInt(f[4], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("reading %s with kcat: line %q: %w", topic, sc.Text(), err)
		}
		recs = append(recs, Record{Topic: topic, Partition: int32(p), Offset: o, Key: f[2], Headers: f[3], Timestamp: ts, Value: f[5]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s with kcat: %w", topic, err)
	}
	return recs, nil
}

// stableWithin is how long WaitStable waits for a topic's open
// transactions to end.
const stableWithin = 30 * time.Second

// WaitStable waits up to 30 s until no partition of topic has an open
// transaction: its last stable offset has reached its high watermark. A
// transaction's records become visible to read_committed readers only
// once the coordinator has written its markers, which Kafka does after
// EndTxn has returned; a reader that stopped at the stable offset it found
// first could miss a transaction committed a moment before. A topic that
// does not exist is left to the reader to report. opts are connection
// options (TLS, SASL).
func WaitStable(ctx context.Context, broker, topic string, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(broker, ",")...)}, opts...)...)
	if err != nil {
		return fmt.Errorf("creating the reader of %s: %w", topic, err)
	}
	defer cl.Close()
	_, err = stableEnds(ctx, kadm.NewClient(cl), topic, stableWithin)
	return err
}

// stableEnds waits up to d until every partition's last stable offset
// equals its high watermark and returns those ends.
func stableEnds(ctx context.Context, adm *kadm.Client, topic string, d time.Duration) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(d)
	for {
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("listing the stable offsets of %s: %w", topic, err)
		}
		hw, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
		}
		var open []string
		stable.Each(func(o kadm.ListedOffset) {
			if h, ok := hw.Lookup(topic, o.Partition); o.Err == nil && ok && h.Err == nil && o.Offset < h.Offset {
				open = append(open, fmt.Sprintf("partition %d: stable offset %d, high watermark %d", o.Partition, o.Offset, h.Offset))
			}
		})
		if len(open) == 0 {
			return stable, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s has a transaction open for more than %s: %s", topic, d, strings.Join(open, "; "))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReadCommitted reads a topic read_committed with franz-go, from the
// beginning to its end once no transaction is open on it (WaitStable),
// and calls fn with each record in partition order. opts are connection
// options (TLS, SASL).
func ReadCommitted(ctx context.Context, broker, topic string, fn func(*kgo.Record), opts ...kgo.Opt) error {
	opts = append([]kgo.Opt{kgo.SeedBrokers(strings.Split(broker, ",")...)}, opts...)
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("creating the reader of %s: %w", topic, err)
	}
	defer adm.Close()
	ends, err := stableEnds(ctx, kadm.NewClient(adm), topic, stableWithin)
	if err != nil {
		return err
	}
	until := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			until[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return fmt.Errorf("creating the reader of %s: %w", topic, err)
	}
	defer cl.Close()
	// Control records are kept so that a partition whose stable offset is
	// a transaction marker is known to be read to its end.
	for len(until) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := until[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(until, r.Partition)
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
	return nil
}

// ReadRecords is ReadCommitted collecting the records as kcat prints them.
func ReadRecords(ctx context.Context, broker, topic string, opts ...kgo.Opt) ([]Record, error) {
	var recs []Record
	err := ReadCommitted(ctx, broker, topic, func(r *kgo.Record) {
		hs := make([]string, 0, len(r.Headers))
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		recs = append(recs, Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key),
			Headers: strings.Join(hs, ","), Timestamp: r.Timestamp.UnixMilli(), Value: string(r.Value)})
	}, opts...)
	return recs, err
}
