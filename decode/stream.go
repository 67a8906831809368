package decode

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/jackc/pglogrepl"
)

// Streaming of in-progress transactions (pgoutput protocol version 2,
// Postgres 14 and later, asked for with streaming 'on'): Postgres sends a
// transaction that outgrows logical_decoding_work_mem as it goes, in
// blocks between Stream Start and Stream Stop, interleaved with other
// transactions, instead of spilling it to disk and sending it at its
// commit. It ends with a Stream Commit or a Stream Abort, which may also
// abort one subtransaction. Other tables' rows are filtered out as it
// streams, so a large transaction on another table no longer holds up the
// outbox rows committed after it.
//
// Its rows must never be published before its commit, nothing of it if it
// aborts, and an outbox transaction may be of any size and still abort. So
// Streams keeps each streamed transaction's messages in a Spool of its
// own, which the caller keeps outside memory (pipeline uses a temporary
// file), until the transaction ends: at its commit they are decoded in
// order as if the transaction had come whole at its commit LSN, split into
// parts and checkpointed at (commit LSN, ordinal) as any other; at an
// abort they are discarded. Nothing of a streamed transaction is durable:
// a session that ends in the middle of one drops its spools, and the next
// session gets the transaction again from its start, since it commits
// after any position walstream confirmed.

// Spool holds the messages of one streamed transaction. decode writes and
// reads it through this interface and does no I/O of its own. Writes
// append; ReadAt reads what was written, whatever is buffered.
type Spool interface {
	io.Writer
	io.ReaderAt
	// Truncate discards everything from offset size on; the next write
	// goes there.
	Truncate(size int64) error
	// Close discards the spool.
	Close() error
}

// StreamCommit is the commit of a streamed transaction.
type StreamCommit struct {
	Xid               uint32
	CommitLSN, EndLSN pglogrepl.LSN
	CommitTime        time.Time
}

// Streams sorts the messages of streamed transactions into their spools.
// It is used from one goroutine.
type Streams struct {
	// newSpool makes the spool of a transaction at its first message.
	newSpool func(xid uint32) (Spool, error)
	// takes says whether the decoder makes something of a logical
	// decoding message with this prefix; nil: of every one.
	takes func(prefix string) bool
	open  map[uint32]*streamed
	// cur is the transaction whose stream block is open, nil outside one.
	cur   *streamed
	frame []byte
}

// streamed is one streamed transaction in progress.
type streamed struct {
	xid   uint32
	spool Spool // nil until its first message
	size  int64
	// subs are its subtransactions, by the offset of their first message:
	// a subtransaction's abort discards from there on, as everything after
	// it belongs to it or to subtransactions it aborts with.
	subs []sub
	// firstMessage is the offset of the first logical decoding message
	// the decoder takes, -1 for none. pgoutput sends a streamed message
	// with the top-level transaction's xid, whichever subtransaction
	// emitted it, so a subtransaction's abort cannot tell whether a
	// message before its first row was its own.
	firstMessage int64
	// unsure is the subtransaction whose abort came after such a message:
	// the transaction cannot be published from its spool. 0: none.
	unsure uint32
}

type sub struct {
	xid    uint32
	offset int64
}

// NewStreams returns Streams that keep each transaction's messages in a
// spool newSpool makes. takes says which logical decoding messages the
// decoder makes something of (Decoder.TakesMessage); nil: every one.
func NewStreams(newSpool func(xid uint32) (Spool, error), takes func(prefix string) bool) *Streams {
	return &Streams{newSpool: newSpool, takes: takes, open: make(map[uint32]*streamed)}
}

// WholeError is a streamed transaction that cannot be published from its
// stream: one of its subtransactions rolled back after a logical decoding
// message the decoder takes was streamed, and the stream does not say
// which subtransaction emitted the message. Sent whole at its commit (not
// streamed), it comes without what rolled back.
type WholeError struct {
	Xid, SubXid uint32
	CommitLSN   pglogrepl.LSN
}

func (e *WholeError) Error() string {
	return fmt.Sprintf("streamed transaction %d committed at %s: its subtransaction %d rolled back after a logical decoding message was streamed, "+
		"and a streamed message does not name the subtransaction that emitted it; the transaction must be received whole, not streamed", e.Xid, e.CommitLSN, e.SubXid)
}

// recordHeader is each spooled message's header: its length and the WAL
// position it started at.
const recordHeader = 4 + 8

// Take handles message data, which started at walStart, when it is part of
// streaming: a stream block's start or stop, a message inside a block
// (kept in its transaction's spool), an abort (which discards) or a commit
// (whose Replay it returns, to be decoded). For any other message it
// returns handled false, and the caller decodes it as usual. Input that
// breaks the protocol is an *Error; any other error is the spool's.
func (s *Streams) Take(walStart pglogrepl.LSN, data []byte) (handled bool, r *Replay, err error) {
	if len(data) == 0 {
		return false, nil, nil
	}
	typ := pglogrepl.MessageType(data[0])
	if s.cur != nil {
		switch typ {
		case pglogrepl.MessageTypeStreamStop:
			s.cur = nil
			return true, nil, nil
		case pglogrepl.MessageTypeOrigin:
			return true, nil, nil
		case pglogrepl.MessageTypeRelation, pglogrepl.MessageTypeType, pglogrepl.MessageTypeInsert, pglogrepl.MessageTypeUpdate,
			pglogrepl.MessageTypeDelete, pglogrepl.MessageTypeTruncate, pglogrepl.MessageTypeMessage:
			return true, nil, s.keep(walStart, data)
		}
		return true, nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("pgoutput message %q inside the stream of transaction %d", data[0], s.cur.xid)}
	}
	switch typ {
	case pglogrepl.MessageTypeStreamStart:
		var m pglogrepl.StreamStartMessageV2
		if err := m.DecodeV2(data[1:], false); err != nil {
			return true, nil, &Error{Event: at(walStart), Reason: "decoding Stream Start", Err: err}
		}
		st, known := s.open[m.Xid]
		switch {
		case m.FirstSegment == 1 && known:
			return true, nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("Stream Start of transaction %d again from its first segment", m.Xid)}
		case m.FirstSegment != 1 && !known:
			return true, nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("Stream Start of transaction %d, whose first segment never came", m.Xid)}
		case !known:
			st = &streamed{xid: m.Xid, firstMessage: -1}
			s.open[m.Xid] = st
		}
		s.cur = st
		return true, nil, nil
	case pglogrepl.MessageTypeStreamStop:
		return true, nil, &Error{Event: at(walStart), Reason: "Stream Stop outside a stream"}
	case pglogrepl.MessageTypeStreamAbort:
		var m pglogrepl.StreamAbortMessageV2
		if err := m.DecodeV2(data[1:], false); err != nil {
			return true, nil, &Error{Event: at(walStart), Reason: "decoding Stream Abort", Err: err}
		}
		return true, nil, s.abort(m.Xid, m.SubXid)
	case pglogrepl.MessageTypeStreamCommit:
		var m pglogrepl.StreamCommitMessageV2
		if err := m.DecodeV2(data[1:], false); err != nil {
			return true, nil, &Error{Event: at(walStart), Reason: "decoding Stream Commit", Err: err}
		}
		st, known := s.open[m.Xid]
		if !known {
			return true, nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("Stream Commit of transaction %d, whose stream never came", m.Xid)}
		}
		if m.TransactionEndLSN <= m.CommitLSN {
			return true, nil, &Error{Event: at(walStart), Reason: fmt.Sprintf("Stream Commit ends at %s, not after its start %s", m.TransactionEndLSN, m.CommitLSN)}
		}
		delete(s.open, m.Xid)
		if st.unsure != 0 {
			return true, nil, errors.Join(&WholeError{Xid: m.Xid, SubXid: st.unsure, CommitLSN: m.CommitLSN}, st.discard())
		}
		c := StreamCommit{Xid: m.Xid, CommitLSN: m.CommitLSN, EndLSN: m.TransactionEndLSN, CommitTime: m.CommitTime}
		r := &Replay{Commit: c, spool: st.spool}
		if st.spool != nil {
			r.r = bufio.NewReaderSize(io.NewSectionReader(st.spool, 0, st.size), 64<<10)
		}
		return true, r, nil
	}
	return false, nil, nil
}

// keep appends a message of the open stream block to its transaction's
// spool, without the xid protocol version 2 puts after the type: spooled,
// it is the message version 1 sends, which the decoder reads.
func (s *Streams) keep(walStart pglogrepl.LSN, data []byte) error {
	if len(data) < 5 {
		return &Error{Event: at(walStart), Reason: fmt.Sprintf("streamed pgoutput message %q is %d bytes, want at least 5", data[0], len(data))}
	}
	st := s.cur
	xid := binary.BigEndian.Uint32(data[1:])
	if xid != st.xid && !st.hasSub(xid) {
		st.subs = append(st.subs, sub{xid: xid, offset: st.size})
	}
	if data[0] == byte(pglogrepl.MessageTypeMessage) && st.firstMessage < 0 && s.taken(data[5:]) {
		st.firstMessage = st.size
	}
	return s.append(st, walStart, data[0], data[5:])
}

// taken says whether the decoder takes the message whose body (flags, LSN,
// prefix, ...) is b; one it cannot read it takes, to say what is wrong.
func (s *Streams) taken(b []byte) bool {
	if s.takes == nil || len(b) < 9 {
		return true
	}
	prefix, _, ok := bytes.Cut(b[9:], []byte{0})
	return !ok || s.takes(string(prefix))
}

// discard closes the transaction's spool, if any.
func (st *streamed) discard() error {
	if st.spool == nil {
		return nil
	}
	if err := st.spool.Close(); err != nil {
		return fmt.Errorf("discarding streamed transaction %d: %w", st.xid, err)
	}
	return nil
}

func (st *streamed) hasSub(xid uint32) bool {
	for i := len(st.subs) - 1; i >= 0; i-- {
		if st.subs[i].xid == xid {
			return true
		}
	}
	return false
}

// append writes one record: header, type, body.
func (s *Streams) append(st *streamed, walStart pglogrepl.LSN, typ byte, body []byte) error {
	if len(body)+1 > math.MaxUint32-recordHeader {
		return &Error{Event: at(walStart), Reason: fmt.Sprintf("streamed message of %d bytes", len(body))}
	}
	if st.spool == nil {
		sp, err := s.newSpool(st.xid)
		if err != nil {
			return fmt.Errorf("spooling streamed transaction %d: %w", st.xid, err)
		}
		st.spool = sp
	}
	s.frame = binary.BigEndian.AppendUint32(s.frame[:0], uint32(1+len(body)))
	s.frame = binary.BigEndian.AppendUint64(s.frame, uint64(walStart))
	s.frame = append(s.frame, typ)
	if _, err := st.spool.Write(s.frame); err != nil {
		return fmt.Errorf("spooling streamed transaction %d at %s: %w", st.xid, walStart, err)
	}
	if _, err := st.spool.Write(body); err != nil {
		return fmt.Errorf("spooling streamed transaction %d at %s: %w", st.xid, walStart, err)
	}
	st.size += int64(recordHeader + 1 + len(body))
	return nil
}

// abort discards transaction xid, or its subtransaction subxid and the
// subtransactions that began after it. A Relation or Type message in the
// discarded part is kept: Postgres sends a table's Relation message once
// per streamed transaction, from whichever subtransaction first wrote the
// table, and does not send it again after that subtransaction's abort,
// so later rows of the table still need it.
func (s *Streams) abort(xid, subxid uint32) error {
	st, known := s.open[xid]
	if !known {
		return nil // nothing of it was streamed
	}
	if subxid == xid {
		delete(s.open, xid)
		return st.discard()
	}
	i := len(st.subs) - 1
	for i >= 0 && st.subs[i].xid != subxid {
		i--
	}
	from := st.size // a subtransaction that streamed no row
	if i >= 0 {
		from = st.subs[i].offset
	}
	if st.firstMessage >= 0 && st.firstMessage < from && st.unsure == 0 {
		st.unsure = subxid
	}
	if i < 0 {
		return nil
	}
	var keep [][]byte
	r := &Replay{spool: st.spool, r: bufio.NewReader(io.NewSectionReader(st.spool, from, st.size-from))}
	for {
		walStart, msg, ok, err := r.next()
		if err != nil {
			return fmt.Errorf("discarding subtransaction %d of streamed transaction %d: %w", subxid, xid, err)
		}
		if !ok {
			break
		}
		if t := pglogrepl.MessageType(msg[0]); t == pglogrepl.MessageTypeRelation || t == pglogrepl.MessageTypeType {
			rec := binary.BigEndian.AppendUint64(nil, uint64(walStart))
			keep = append(keep, append(rec, msg...))
		}
	}
	if err := st.spool.Truncate(from); err != nil {
		return fmt.Errorf("discarding subtransaction %d of streamed transaction %d: %w", subxid, xid, err)
	}
	st.size, st.subs = from, st.subs[:i]
	if st.firstMessage >= from {
		st.firstMessage = -1
	}
	for _, rec := range keep {
		if err := s.append(st, pglogrepl.LSN(binary.BigEndian.Uint64(rec)), rec[8], rec[9:]); err != nil {
			return err
		}
	}
	return nil
}

// InBlock reports whether a stream block is open: its messages go to a
// spool.
func (s *Streams) InBlock() bool { return s.cur != nil }

// Open is the number of streamed transactions in progress.
func (s *Streams) Open() int { return len(s.open) }

// Close discards the spools of the transactions in progress: a session
// that ends gets them again from their start.
func (s *Streams) Close() error {
	var errs []error
	for xid, st := range s.open {
		errs = append(errs, st.discard())
		delete(s.open, xid)
	}
	s.cur = nil
	return errors.Join(errs...)
}

// Replay reads back the messages of a committed streamed transaction, in
// the order they came.
type Replay struct {
	Commit StreamCommit
	spool  Spool // nil: the transaction streamed no message
	r      *bufio.Reader
	buf    []byte
}

// Next returns the next message and the WAL position it started at, or ok
// false after the last. msg is valid until the next call.
func (r *Replay) Next() (walStart pglogrepl.LSN, msg []byte, ok bool, err error) {
	if r.r == nil {
		return 0, nil, false, nil
	}
	walStart, msg, ok, err = r.next()
	if err != nil {
		err = fmt.Errorf("reading back streamed transaction %d: %w", r.Commit.Xid, err)
	}
	return walStart, msg, ok, err
}

func (r *Replay) next() (pglogrepl.LSN, []byte, bool, error) {
	var h [recordHeader]byte
	if _, err := io.ReadFull(r.r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, false, nil
		}
		return 0, nil, false, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n == 0 {
		return 0, nil, false, errors.New("an empty spooled message")
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		return 0, nil, false, fmt.Errorf("a spooled message of %d bytes: %w", n, err)
	}
	return pglogrepl.LSN(binary.BigEndian.Uint64(h[4:])), r.buf, true, nil
}

// Close discards the transaction's spool.
func (r *Replay) Close() error {
	if r.spool == nil {
		return nil
	}
	err := r.spool.Close()
	r.spool, r.r = nil, nil
	return err
}

// BeginStreamed opens the committed streamed transaction c, whose spooled
// messages are decoded next, as a BEGIN would have: at its commit LSN,
// known only now.
func (d *Decoder) BeginStreamed(c StreamCommit) error {
	if d.tx != nil {
		return &Error{Event: at(c.CommitLSN), Reason: fmt.Sprintf("the commit of streamed transaction %d inside transaction %d", c.Xid, d.tx.Xid)}
	}
	d.open(c.Xid, c.CommitLSN, c.CommitTime)
	return nil
}

// CommitStreamed ends the streamed transaction BeginStreamed opened, as
// Decode does at a COMMIT.
func (d *Decoder) CommitStreamed(c StreamCommit) (*Tx, error) {
	if d.tx == nil || d.tx.CommitLSN != c.CommitLSN {
		return nil, &Error{Event: at(c.CommitLSN), Reason: fmt.Sprintf("the commit of streamed transaction %d, which is not open", c.Xid)}
	}
	return d.close(c.EndLSN), nil
}
