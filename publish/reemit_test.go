package publish

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/internal/testenv"
	"github.com/walstream/walstream/publish/format"
)

// runStream runs a producer of transactional id txid on broker until ctx
// ends, as runProducer does.
func runStream(ctx context.Context, t *testing.T, broker, txid string, mod func(*Config)) (q *Queue, committed chan checkpoint.Checkpoint, errc chan error) {
	t.Helper()
	return runProducer(ctx, t, newProducerWith(t, broker, txid, mod), checkpoint.Checkpoint{})
}

// The producer records a request in the checkpoint that covers its
// transaction and leaves another stream's alone; it publishes a request's
// chunks with the header naming it, recording the progress in the same
// Kafka transaction and moving no position; it drops a chunk that does
// not continue the request's progress, ends a request where a cancel is
// met, and fails one at a row it cannot publish while live events go on.
func TestReemitRequests(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, committed, errc := runStream(ctx, t, broker, "tx-r", func(c *Config) { c.Stream = "s" })
	put := func(tx *decode.Tx) {
		t.Helper()
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	// until waits for a committed checkpoint whose requests satisfy ok.
	until := func(what string, ok func(checkpoint.Reemits) bool) checkpoint.Checkpoint {
		t.Helper()
		for {
			select {
			case cp := <-committed:
				if cp.Notes != nil && ok(cp.Notes.Reemits) {
					return cp
				}
			case err := <-errc:
				t.Fatalf("Run ended waiting for %s: %v", what, err)
			case <-ctx.Done():
				t.Fatalf("no checkpoint with %s", what)
			}
		}
	}
	state := func(rs checkpoint.Reemits, id string) checkpoint.Reemit {
		if i := rs.Find(id); i >= 0 {
			return rs[i]
		}
		return checkpoint.Reemit{}
	}
	reemit := func(id, stream, bad string) decode.Request {
		return decode.Request{Action: decode.ActionReemit, ID: id, Stream: stream, Table: "public.outbox", Origin: decode.OriginCLI, Err: bad}
	}
	chunk := func(id string, after, last []string, done bool, evs ...decode.Event) *decode.Tx {
		tx := &decode.Tx{Chunk: &decode.Chunk{Request: id, After: after, Last: last, Done: done, Key: []string{"id"}, Upper: []string{"z"}}, Events: evs}
		for i := range evs {
			tx.Bytes += evs[i].Size()
		}
		return tx
	}

	put(&decode.Tx{CommitLSN: 0x100, EndLSN: 0x110, Final: true, Requests: []decode.Request{
		reemit("r1", "s", ""), reemit("elsewhere", "t", ""), reemit("refused", "", "the predicate closes a parenthesis")}})
	cp := until("r1 queued", func(rs checkpoint.Reemits) bool { return state(rs, "r1").State == checkpoint.ReemitQueued })
	if rs := cp.Notes.Reemits; rs.Find("elsewhere") >= 0 || state(rs, "refused").State != checkpoint.ReemitFailed || cp.LSN != 0x110 || state(rs, "r1").LSN != 0x100 {
		t.Fatalf("requests met at %s: %+v", cp, rs)
	}
	put(chunk("r1", nil, []string{"b"}, false, event(0, "a"), event(0, "b")))
	put(chunk("r1", []string{"x"}, []string{"y"}, false, event(0, "stale"))) // not after b: dropped
	put(&decode.Tx{CommitLSN: 0x200, EndLSN: 0x210, Final: true, Events: []decode.Event{event(1, "live-1")}, Bytes: 10})
	put(chunk("r1", []string{"b"}, []string{"c"}, true, event(0, "c")))
	cp = until("r1 done", func(rs checkpoint.Reemits) bool { return state(rs, "r1").State == checkpoint.ReemitDone })
	if r := state(cp.Notes.Reemits, "r1"); r.Rows != 3 || !slices.Equal(r.Last, []string{"c"}) || !slices.Equal(r.Upper, []string{"z"}) || cp.LSN != 0x210 || cp.Events != 1 {
		t.Fatalf("r1 done at %s (%d events): %+v", cp, cp.Events, r)
	}

	// A cancel met before a chunk ends the request: the chunk is dropped.
	put(&decode.Tx{CommitLSN: 0x300, EndLSN: 0x310, Final: true, Requests: []decode.Request{
		reemit("r2", "", ""), {Action: decode.ActionCancel, ID: "r2"}}})
	put(chunk("r2", nil, []string{"a"}, false, event(0, "a")))
	// A row that cannot be published fails the request, with none of its
	// chunk; the live events after it are published.
	bad := event(0, "bad")
	bad.Bad = &decode.Error{Reason: "aggregate type is NULL"}
	put(&decode.Tx{CommitLSN: 0x400, EndLSN: 0x410, Final: true, Requests: []decode.Request{reemit("r3", "", "")}})
	put(chunk("r3", nil, []string{"b"}, false, event(0, "a"), bad))
	put(&decode.Tx{CommitLSN: 0x500, EndLSN: 0x510, Final: true, Events: []decode.Event{event(1, "live-2")}, Bytes: 10})
	cp = until("r3 failed", func(rs checkpoint.Reemits) bool { return state(rs, "r3").State == checkpoint.ReemitFailed })
	if r2 := state(cp.Notes.Reemits, "r2"); r2.State != checkpoint.ReemitCancelled || r2.Rows != 0 {
		t.Errorf("r2: %+v", r2)
	}
	if r3 := state(cp.Notes.Reemits, "r3"); r3.Rows != 0 || r3.Error == "" {
		t.Errorf("r3: %+v", r3)
	}
	// The live event after the failure commits with it or after it.
	for cp.LSN < 0x510 {
		select {
		case cp = <-committed:
		case err := <-errc:
			t.Fatalf("Run ended waiting for the live event after the failure: %v", err)
		case <-ctx.Done():
			t.Fatalf("no checkpoint with the live event after the failure: the last was %s", cp)
		}
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}

	byRequest := make(map[string][]string)
	for _, r := range readTopic(t, broker, "outbox.event.Order") {
		var id, req string
		for i, h := range r.Headers {
			switch h.Key {
			case format.HeaderID:
				id = string(h.Value)
			case HeaderReemit:
				req = string(h.Value)
				if i != len(r.Headers)-1 {
					t.Errorf("the %s header of %s is not the last", HeaderReemit, id)
				}
			}
		}
		byRequest[req] = append(byRequest[req], id)
	}
	if got := byRequest["r1"]; !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("r1 published %v, want a, b, c", got)
	}
	if got := byRequest[""]; !slices.Equal(got, []string{"live-1", "live-2"}) {
		t.Errorf("live events %v", got)
	}
	if len(byRequest) != 2 {
		t.Errorf("records by request: %v", byRequest)
	}
}

// Each chunk of a request is a Kafka transaction of its own, which a live
// event that comes while it is open joins: two chunks handed on at once
// are two commits.
func TestReemitChunkPerTransaction(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A linger long enough that chunks handed on together would share a
	// transaction if the producer let them.
	q, committed, errc := runStream(ctx, t, broker, "tx-c", func(c *Config) { c.Stream, c.Linger = "s", 300*time.Millisecond })
	req := decode.Request{Action: decode.ActionReemit, ID: "r", Stream: "s", Table: "public.outbox", Origin: decode.OriginCLI}
	chunk := func(after, last []string, evs ...decode.Event) *decode.Tx {
		tx := &decode.Tx{Chunk: &decode.Chunk{Request: "r", After: after, Last: last, Key: []string{"id"}, Upper: []string{"z"}}, Events: evs}
		for i := range evs {
			tx.Bytes += evs[i].Size()
		}
		return tx
	}
	for _, tx := range []*decode.Tx{
		{CommitLSN: 0x100, EndLSN: 0x110, Final: true, Requests: []decode.Request{req}},
		chunk(nil, []string{"b"}, event(0, "a"), event(0, "b")),
		chunk([]string{"b"}, []string{"d"}, event(0, "c"), event(0, "d")),
		{CommitLSN: 0x200, EndLSN: 0x210, Final: true, Events: []decode.Event{event(1, "live")}, Bytes: 10},
	} {
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	// The rows done of each committed checkpoint, until the live event's
	// and the second chunk's.
	var rows []int64
	liveWith := int64(-1) // the rows done when the live event committed
	for cp := (checkpoint.Checkpoint{}); cp.LSN < 0x210 || len(rows) == 0 || rows[len(rows)-1] < 4; {
		select {
		case cp = <-committed:
			if cp.Notes != nil {
				if i := cp.Notes.Reemits.Find("r"); i >= 0 && cp.Notes.Reemits[i].Rows > 0 {
					rows = append(rows, cp.Notes.Reemits[i].Rows)
				}
			}
			if cp.LSN >= 0x210 && liveWith < 0 && len(rows) > 0 {
				liveWith = rows[len(rows)-1]
			}
		case err := <-errc:
			t.Fatalf("Run ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("not every chunk and the live event committed; rows done in those committed: %v", rows)
		}
	}
	if !slices.Equal(rows, []int64{2, 4}) {
		t.Errorf("rows done in the committed checkpoints: %v, want 2 then 4: each chunk in a Kafka transaction of its own", rows)
	}
	if liveWith != 2 && liveWith != 4 {
		t.Errorf("the live event committed with %d rows done, want it with one of the chunks", liveWith)
	}
}

// A chunk is committed as soon as the producer takes it, with the live
// events of the open transaction, whatever the linger: it is a batch
// already, and a linger per chunk idled the re-emit and held the live
// events that joined it.
func TestReemitChunkCommitsAtOnce(t *testing.T) {
	broker := testenv.StartKfake(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, committed, errc := runStream(ctx, t, broker, "tx-n", func(c *Config) { c.Stream, c.Linger, c.CommitTimeout = "s", time.Hour, 4*time.Second })
	req := decode.Request{Action: decode.ActionReemit, ID: "r", Stream: "s", Table: "public.outbox", Origin: decode.OriginCLI}
	chunk := &decode.Tx{Chunk: &decode.Chunk{Request: "r", Last: []string{"b"}, Key: []string{"id"}, Upper: []string{"z"}},
		Events: []decode.Event{event(0, "a"), event(0, "b")}}
	for i := range chunk.Events {
		chunk.Bytes += chunk.Events[i].Size()
	}
	for _, tx := range []*decode.Tx{
		{CommitLSN: 0x100, EndLSN: 0x110, Final: true, Requests: []decode.Request{req}},
		{CommitLSN: 0x200, EndLSN: 0x210, Final: true, Events: []decode.Event{event(1, "live")}, Bytes: 10},
		chunk,
	} {
		if err := q.Put(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	for {
		select {
		case cp := <-committed:
			i := -1
			if cp.Notes != nil {
				i = cp.Notes.Reemits.Find("r")
			}
			if i < 0 || cp.Notes.Reemits[i].Rows == 0 {
				continue
			}
			if rows := cp.Notes.Reemits[i].Rows; rows != 2 || cp.LSN != 0x210 {
				t.Fatalf("the chunk committed at %s with %d rows done; want 2 rows, with the live event (0/210)", cp, rows)
			}
			return
		case err := <-errc:
			t.Fatalf("Run ended: %v", err)
		case <-ctx.Done():
			t.Fatal("the chunk was not committed within 20 s: it waited for the linger (1 h)")
		}
	}
}
