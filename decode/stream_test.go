package decode

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// memSpool is a Spool in memory, as tests need one.
type memSpool struct {
	b      []byte
	closed bool
}

var _ Spool = (*memSpool)(nil)

func (s *memSpool) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }

func (s *memSpool) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(s.b)) {
		return 0, io.EOF
	}
	n := copy(p, s.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (s *memSpool) Truncate(size int64) error { s.b = s.b[:size]; return nil }
func (s *memSpool) Close() error              { s.closed = true; s.b = nil; return nil }

// streamDecoder decodes frames as the pipeline's feed does: streaming
// messages through Streams, committed streamed transactions replayed
// through the decoder, everything else decoded at once.
type streamDecoder struct {
	t      *testing.T
	dec    *Decoder
	st     *Streams
	spools map[uint32][]*memSpool
}

func newStreamDecoder(t *testing.T, cfg Config) *streamDecoder {
	sd := &streamDecoder{t: t, dec: New(cfg), spools: make(map[uint32][]*memSpool)}
	sd.st = NewStreams(func(xid uint32) (Spool, error) {
		s := &memSpool{}
		sd.spools[xid] = append(sd.spools[xid], s)
		return s, nil
	}, sd.dec.TakesMessage)
	return sd
}

func (sd *streamDecoder) take(lsn pglogrepl.LSN, data []byte) ([]*Tx, error) {
	handled, r, err := sd.st.Take(lsn, data)
	if err != nil || (handled && r == nil) {
		return nil, err
	}
	if !handled {
		tx, err := sd.dec.Decode(lsn, data)
		if tx == nil {
			return nil, err
		}
		return []*Tx{tx}, err
	}
	defer r.Close()
	if err := sd.dec.BeginStreamed(r.Commit); err != nil {
		return nil, err
	}
	var txs []*Tx
	for {
		at, msg, ok, err := r.Next()
		if err != nil {
			return txs, err
		}
		if !ok {
			break
		}
		tx, err := sd.dec.Decode(at, msg)
		if err != nil {
			return txs, err
		}
		if tx != nil {
			txs = append(txs, tx)
		}
	}
	tx, err := sd.dec.CommitStreamed(r.Commit)
	if tx != nil {
		txs = append(txs, tx)
	}
	return txs, err
}

func (sd *streamDecoder) all(frames []frame) []*Tx {
	sd.t.Helper()
	var txs []*Tx
	for _, f := range frames {
		got, err := sd.take(f.lsn, f.data)
		if err != nil {
			sd.t.Fatalf("at %s: %v", f.lsn, err)
		}
		txs = append(txs, got...)
	}
	if sd.dec.InTx() || sd.st.Open() != 0 {
		sd.t.Fatalf("after the last frame: a transaction open %v, %d streamed transactions open", sd.dec.InTx(), sd.st.Open())
	}
	return txs
}

// Frames captured with streaming on: two outbox transactions streamed
// interleaved, one rolling back to a savepoint and then committing, the
// other aborting after 800 rows streamed; a plain transaction and a
// transaction on another table, streamed with nothing of it sent, commit
// in between. In commit order: the plain row, the other table's empty
// transaction, and the first transaction's 405 rows, in parts; nothing
// rolled back, nothing before its commit.
func TestStreamsCaptured(t *testing.T) {
	cfg := outboxConfig("public", nil)
	cfg.MaxPartEvents = 100
	sd := newStreamDecoder(t, cfg)
	frames := readFrames(t, "streamed")
	var commits []pglogrepl.LSN
	for _, f := range frames {
		if f.data[0] == 'c' {
			var m pglogrepl.StreamCommitMessageV2
			if err := m.DecodeV2(f.data[1:], false); err != nil {
				t.Fatal(err)
			}
			commits = append(commits, m.CommitLSN)
		}
	}
	txs := sd.all(frames)
	var seqs []int
	var plain, empty, parts int
	for _, tx := range txs {
		if len(tx.Events) == 0 {
			if !tx.Final || tx.CommitLSN != commits[0] {
				t.Errorf("an empty transaction %+v, want only the other table's, final, at %s", tx, commits[0])
			}
			empty++
			continue
		}
		for _, ev := range tx.Events {
			var p struct {
				Seq int    `json:"seq"`
				Agg string `json:"agg"`
			}
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			switch {
			case string(ev.AggregateID) == "c":
				plain++
				if parts > 0 {
					t.Error("the plain transaction, committed first, came after the streamed one")
				}
			case p.Agg == "a":
				seqs = append(seqs, p.Seq)
				if tx.CommitLSN != commits[1] || ev.CommitLSN != commits[1] || ev.Ordinal != uint64(len(seqs)) {
					t.Fatalf("event %d of the streamed transaction at %s:%d, want %s:%d", p.Seq, ev.CommitLSN, ev.Ordinal, commits[1], len(seqs))
				}
			default:
				t.Fatalf("row of aggregate %q published (%s)", ev.AggregateID, ev.Payload)
			}
		}
		if string(tx.Events[0].AggregateID) == "a" {
			parts++
			if want := parts == 5; tx.Final != want {
				t.Errorf("part %d Final %v, want %v", parts, tx.Final, want)
			}
		}
	}
	if plain != 1 || empty != 1 || parts != 5 || len(seqs) != 405 {
		t.Fatalf("%d plain rows, %d empty transactions, %d parts with %d rows; want 1, 1, 5 parts of 405", plain, empty, parts, len(seqs))
	}
	for i, s := range seqs {
		if s != i+1 {
			t.Fatalf("row %d has seq %d: out of order, or a rolled-back row", i+1, s)
		}
	}
	for xid, spools := range sd.spools {
		for _, s := range spools {
			if !s.closed {
				t.Errorf("the spool of transaction %d was not discarded", xid)
			}
		}
	}
}

// v2 is a message of a stream block: v1's with the xid after the type.
func v2(v1 []byte, xid uint32) []byte {
	b := append([]byte{v1[0]}, binary.BigEndian.AppendUint32(nil, xid)...)
	return append(b, v1[1:]...)
}

func streamStart(xid uint32, first bool) []byte {
	b := append([]byte{'S'}, binary.BigEndian.AppendUint32(nil, xid)...)
	if first {
		return append(b, 1)
	}
	return append(b, 0)
}

func streamAbort(xid, sub uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{'A'}, xid), sub)
}

func streamCommit(xid uint32, commit, end pglogrepl.LSN) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'c'}, xid)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, 0)
}

// The table's Relation message streamed in a subtransaction that rolls
// back is kept: Postgres does not send it again for the rows after, which
// need it. The rows of the rolled-back subtransaction, and of one nested
// in it, are dropped; a second commit of the same xid is refused.
func TestStreamsSubtransactionAbortKeepsRelation(t *testing.T) {
	basic := readFrames(t, "basic") // Begin, Relation, Insert, Insert, Commit, ...
	rel, ins1, ins2 := basic[1].data, basic[2].data, basic[3].data
	const top, sub, nested, later = 700, 701, 702, 703
	frames := []frame{
		{0x100, streamStart(top, true)},
		{0, v2(rel, sub)},
		{0x110, v2(ins1, sub)},
		{0x120, v2(ins2, nested)},
		{0x130, []byte{'E'}},
		{0x140, streamAbort(top, sub)},
		{0x150, streamStart(top, false)},
		{0x160, v2(ins2, later)},
		{0x170, []byte{'E'}},
		{0x180, streamAbort(top, 999)}, // a subtransaction that streamed nothing
		{0x190, streamStart(top, false)},
		{0x1a0, v2(ins1, top)},
		{0x1b0, []byte{'E'}},
		{0x1c0, streamCommit(top, 0x1c0, 0x1c8)},
	}
	sd := newStreamDecoder(t, outboxConfig("public", nil))
	txs := sd.all(frames)
	if len(txs) != 1 || len(txs[0].Events) != 2 || !txs[0].Final || txs[0].EndLSN != 0x1c8 {
		t.Fatalf("got %d transactions (%+v), want one of the 2 rows after the rollback", len(txs), txs)
	}
	if got := []string{string(txs[0].Events[0].ID), string(txs[0].Events[1].ID)}; got[0] != "22222222-2222-2222-2222-222222222222" || got[1] != "11111111-1111-1111-1111-111111111111" {
		t.Fatalf("events %v, want the later subtransaction's row, then the top transaction's", got)
	}
	if _, err := sd.take(0x1d0, streamCommit(top, 0x1c0, 0x1c8)); err == nil {
		t.Fatal("a second commit of the same transaction was taken")
	}
}

// An aborted streamed transaction publishes nothing, and its spool is
// discarded; a transaction whose stream never came cannot commit.
func TestStreamsAbort(t *testing.T) {
	basic := readFrames(t, "basic")
	sd := newStreamDecoder(t, outboxConfig("public", nil))
	txs := sd.all([]frame{
		{0x100, streamStart(5, true)}, {0, v2(basic[1].data, 5)}, {0x110, v2(basic[2].data, 5)}, {0x120, []byte{'E'}},
		{0x130, streamStart(6, true)}, {0, v2(basic[1].data, 6)}, {0x140, v2(basic[3].data, 6)}, {0x150, []byte{'E'}},
		{0x160, streamAbort(5, 5)},
		{0x170, streamCommit(6, 0x170, 0x178)},
	})
	if len(txs) != 1 || len(txs[0].Events) != 1 || string(txs[0].Events[0].ID) != "22222222-2222-2222-2222-222222222222" {
		t.Fatalf("got %+v, want the committed transaction's one row", txs)
	}
	if !sd.spools[5][0].closed {
		t.Error("the aborted transaction's spool was kept")
	}
}

// Input that breaks the streaming protocol is an error naming the LSN,
// never a guess.
func TestStreamsProtocolErrors(t *testing.T) {
	basic := readFrames(t, "basic")
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   string
	}{
		{"stop outside a stream", [][]byte{{'E'}}, "Stream Stop outside a stream"},
		{"start inside a stream", [][]byte{streamStart(1, true), streamStart(2, true)}, `message 'S' inside the stream`},
		{"first segment twice", [][]byte{streamStart(1, true), {'E'}, streamStart(1, true)}, "again from its first segment"},
		{"a later segment first", [][]byte{streamStart(1, false)}, "whose first segment never came"},
		{"commit of an unknown transaction", [][]byte{streamCommit(9, 0x10, 0x18)}, "whose stream never came"},
		{"commit ending before it starts", [][]byte{streamStart(1, true), {'E'}, streamCommit(1, 0x18, 0x10)}, "not after its start"},
		{"BEGIN inside a stream", [][]byte{streamStart(1, true), basic[0].data}, `message 'B' inside the stream`},
		{"truncated start", [][]byte{{'S', 0, 0}}, "decoding Stream Start"},
		{"truncated streamed row", [][]byte{streamStart(1, true), {'I', 0, 0}}, "want at least 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sd := newStreamDecoder(t, outboxConfig("public", nil))
			var err error
			for i, f := range tc.frames {
				if _, err = sd.take(pglogrepl.LSN(0x100+i), f); err != nil {
					break
				}
			}
			var de *Error
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) || de.Event.LSN == 0 {
				t.Fatalf("err = %v, want a decode error at an LSN saying %q", err, tc.want)
			}
		})
	}
}

// A huge streamed outbox transaction is held in its spool, not in memory,
// until it commits, and is then handed on in parts no larger than a part's
// limit, whatever its size.
func TestStreamsHugeTransactionInParts(t *testing.T) {
	basic := readFrames(t, "basic")
	rel, ins := basic[1].data, basic[2].data
	cfg := outboxConfig("public", nil)
	cfg.MaxPartEvents = 1000
	sd := newStreamDecoder(t, cfg)
	const xid, rows = 42, 25_000
	frames := []frame{{0x10, streamStart(xid, true)}, {0, v2(rel, xid)}}
	for i := range rows {
		if i > 0 && i%5000 == 0 {
			frames = append(frames, frame{0x20, []byte{'E'}}, frame{0x20, streamStart(xid, false)})
		}
		frames = append(frames, frame{pglogrepl.LSN(0x100 + i), v2(ins, xid)})
	}
	frames = append(frames, frame{0x10000, []byte{'E'}}, frame{0x10010, streamCommit(xid, 0x10010, 0x10018)})
	var before int
	for _, f := range frames[:len(frames)-1] {
		if txs, err := sd.take(f.lsn, f.data); err != nil || len(txs) != 0 {
			t.Fatalf("before the commit: %d transactions handed on, err %v", len(txs), err)
		}
	}
	before = len(sd.spools[xid][0].b)
	txs, err := sd.take(frames[len(frames)-1].lsn, frames[len(frames)-1].data)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, tx := range txs {
		if len(tx.Events) > cfg.MaxPartEvents+1 || tx.Final != (i == len(txs)-1) {
			t.Fatalf("part %d: %d events, final %v", i, len(tx.Events), tx.Final)
		}
		n += len(tx.Events)
	}
	if n != rows || len(txs) < rows/cfg.MaxPartEvents {
		t.Fatalf("%d events in %d parts, want %d in parts of at most %d", n, len(txs), rows, cfg.MaxPartEvents)
	}
	if want := rows * (recordHeader + len(ins)); before < want {
		t.Errorf("the spool held %d bytes before the commit, want the %d of every row", before, want)
	}
}

// FuzzStreams: whatever comes inside or outside a stream block, Streams
// and the decoder behind it return a decode error naming the LSN, or go
// on; they never panic.
func FuzzStreams(f *testing.F) {
	for _, fr := range readFrames(f, "streamed")[:20] {
		f.Add(fr.data)
	}
	basic := readFrames(f, "basic")
	f.Fuzz(func(t *testing.T, data []byte) {
		sd := newStreamDecoder(t, outboxConfig("public", nil))
		for _, fr := range []frame{{0x10, streamStart(7, true)}, {0, v2(basic[1].data, 7)}} {
			if _, err := sd.take(fr.lsn, fr.data); err != nil {
				t.Fatal(err)
			}
		}
		for i, fr := range []frame{{0x200, data}, {0x210, []byte{'E'}}, {0x220, data}, {0x230, streamCommit(7, 0x230, 0x238)}} {
			_, err := sd.take(fr.lsn, fr.data)
			var de *Error
			if err != nil && (!errors.As(err, &de) || de.Event.LSN == 0) {
				t.Fatalf("frame %d: error %v is not a decode error naming the LSN", i, err)
			}
		}
	})
}

// pgoutput sends a streamed logical decoding message with the top-level
// transaction's xid, whichever subtransaction emitted it: after a
// subtransaction's abort, a message before its first row (or of a
// subtransaction that streamed no row) may be the rolled-back one's or
// not. Such a transaction is never published from its stream, neither
// with the message (a rolled-back event) nor without it (a lost one):
// its commit is a WholeError. A message after the subtransaction's first
// row is its own and goes with it; a prefix the decoder does not take
// changes nothing.
func TestStreamsMessageInSubtransaction(t *testing.T) {
	basic := readFrames(t, "basic")
	rel, ins := basic[1].data, basic[2].data
	var msg []byte
	for _, f := range readFrames(t, "logical-message") {
		if f.data[0] == 'M' && f.data[1] == 1 {
			msg = f.data
			break
		}
	}
	other := slices.Clone(msg) // the same message under another prefix
	copy(other[10:], "xxxxxxxxx")
	const top, sub = 800, 801
	for _, tc := range []struct {
		name   string
		frames [][]byte
		events int // published when the commit is not a WholeError
		whole  bool
	}{
		{"the subtransaction's only change", [][]byte{v2(rel, top), v2(ins, top), v2(msg, top), streamAbort(top, sub)}, 0, true},
		{"before the subtransaction's first row", [][]byte{v2(rel, top), v2(msg, top), v2(ins, sub), streamAbort(top, sub)}, 0, true},
		{"after the subtransaction's first row", [][]byte{v2(rel, top), v2(ins, top), v2(ins, sub), v2(msg, top), streamAbort(top, sub)}, 1, false},
		{"a prefix the decoder does not take", [][]byte{v2(rel, top), v2(ins, top), v2(other, top), streamAbort(top, sub)}, 1, false},
		{"no subtransaction rolled back", [][]byte{v2(rel, top), v2(msg, top), v2(ins, sub)}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := outboxConfig("public", nil)
			cfg.MessagePrefix = "walstream"
			sd := newStreamDecoder(t, cfg)
			var txs []*Tx
			lsn := pglogrepl.LSN(0x100)
			frames := append(append([][]byte{streamStart(top, true)}, tc.frames...), []byte{'E'})
			for _, f := range frames {
				if f[0] == 'A' { // a Stream Abort comes between blocks
					f = nil
				}
				if f != nil {
					if _, err := sd.take(lsn, f); err != nil {
						t.Fatalf("at %s: %v", lsn, err)
					}
				}
				lsn += 0x10
			}
			for _, f := range tc.frames {
				if f[0] == 'A' {
					if _, err := sd.take(lsn, f); err != nil {
						t.Fatalf("abort: %v", err)
					}
				}
			}
			got, err := sd.take(0x1000, streamCommit(top, 0x1000, 0x1008))
			var we *WholeError
			if tc.whole {
				if !errors.As(err, &we) || we.Xid != top || we.SubXid != sub || we.CommitLSN != 0x1000 || len(got) != 0 {
					t.Fatalf("commit: %v, %d transactions; want a WholeError naming transaction %d, subtransaction %d, commit 0/1000", err, len(got), top, sub)
				}
				if sd.st.Open() != 0 || !sd.spools[top][0].closed {
					t.Error("the transaction's spool was kept")
				}
				return
			}
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
			txs = append(txs, got...)
			var events int
			for _, tx := range txs {
				events += len(tx.Events)
			}
			if events != tc.events {
				t.Fatalf("%d events published, want %d", events, tc.events)
			}
		})
	}
	// A whole abort after an unsure subtransaction: nothing, and no error.
	cfg := outboxConfig("public", nil)
	cfg.MessagePrefix = "walstream"
	sd := newStreamDecoder(t, cfg)
	for i, f := range [][]byte{streamStart(top, true), v2(rel, top), v2(msg, top), {'E'}, streamAbort(top, sub), streamAbort(top, top)} {
		if _, err := sd.take(pglogrepl.LSN(0x100+i), f); err != nil {
			t.Fatal(err)
		}
	}
	if sd.st.Open() != 0 {
		t.Error("the aborted transaction is still open")
	}
}
