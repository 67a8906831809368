package checkpoint

import (
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func TestSkip(t *testing.T) {
	whole := Checkpoint{LSN: 1000}
	partial := Checkpoint{LSN: 1000, PartialCommitLSN: 1500, Ordinal: 3}
	for _, tc := range []struct {
		name    string
		cp      Checkpoint
		commit  pglogrepl.LSN
		ordinal uint64
		want    bool
	}{
		{"before the position", whole, 999, 1, true},
		{"at the position: a commit starting there is new", whole, 1000, 1, false},
		{"after the position", whole, 1001, 1, false},
		{"partial: earlier transaction", partial, 999, 7, true},
		{"partial: published ordinal", partial, 1500, 3, true},
		{"partial: next ordinal", partial, 1500, 4, false},
		{"partial: other transaction, same ordinal", partial, 1600, 1, false},
		{"zero checkpoint skips nothing", Checkpoint{}, 1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cp.Skip(tc.commit, tc.ordinal); got != tc.want {
				t.Fatalf("%v.Skip(%s, %d) = %v, want %v", tc.cp, tc.commit, tc.ordinal, got, tc.want)
			}
		})
	}
}

func TestEncodeDecode(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
	id := Identity{SystemID: "7441234567890123456", Timeline: 3, Database: "app"}
	for _, cp := range []Checkpoint{
		{LSN: 0x16B3748},
		{LSN: 0x100, PartialCommitLSN: 0x1_0000_0200, Ordinal: 42},
		{LSN: 0x100, Identity: id, Events: 0, Counted: true},
		{LSN: 0x200, Identity: id, Events: 1234, Counted: true, Gap: Gap{Kind: GapPhantoms,
			Previous: Identity{SystemID: id.SystemID, Timeline: 2, Database: "app"}, From: 0x180, To: 0x300, Events: 17, At: now}},
		{LSN: 0x200, Identity: id, Events: 5, Counted: true, Gap: Gap{Kind: GapSystemChanged,
			Previous: Identity{SystemID: "7000000000000000001", Timeline: 1, Database: "app"}, To: 0x9000, Events: -1, At: now}},
		{LSN: 0x300, Identity: id, Last: Last{Xid: 4_000_000_000, CommitLSN: 0x2F0, CommitTime: now.Add(123456 * time.Microsecond)}},
		{LSN: 0x300, Last: Last{CommitLSN: 0x2F0}}, // a non-transactional message
	} {
		owner := Owner{Stream: "app/walstream", Slot: "walstream"}
		got, at, err := Decode(cp.Encode(owner, now))
		if err != nil {
			t.Fatal(err)
		}
		if cp.Owner = owner; got != cp || !at.Equal(now) {
			t.Fatalf("round trip of %v at %s = %v at %s", cp, now, got, at)
		}
	}
	// A record written before identities and counts were recorded.
	old, _, err := Decode([]byte(`{"slot":"walstream","lsn":"0/16B3748","time":"2026-11-01T00:00:00Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	if old.Identity.Known() || old.Counted || old.Gap.Kind != GapNone || old.Last.Known() || old.LSN != 0x16B3748 {
		t.Fatalf("old record decoded as %+v, want an unknown identity, no count and no gap at 0/16B3748", old)
	}
	for _, bad := range []string{``, `{`, `{"lsn":"zz"}`, `{"lsn":"0/1","partial_commit_lsn":"x"}`,
		`{"lsn":"0/1","gap":{"kind":"phantoms","from_lsn":"x","to_lsn":"0/2"}}`, `{"lsn":"0/1","last_commit_lsn":"x"}`} {
		if _, _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) succeeded", bad)
		}
	}
}

// Notes round-trip, and a record written before they existed still
// decodes, without them.
func TestEncodeDecodeNotes(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
	skip := &Skip{Event: "0/16B3700:2", LSN: "0/16B3650", Table: "public.outbox", EventID: "e-1", Reason: "aggregate id is NULL", Time: now}
	cp := Checkpoint{LSN: 0x16B3748, Notes: &Notes{Tables: map[string]uint32{"public.outbox": 16454}, Entries: map[string][]uint32{"public.outbox": {16460, 16470}}, Skipped: skip}}
	wrote := []string{"outbox.event.Order", "walstream.checkpoints"}
	b := cp.EncodeIn(Owner{Slot: "walstream"}, now, wrote)
	for _, want := range []string{`"tables":{"public.outbox":16454}`, `"entries":{"public.outbox":[16460,16470]}`, `"skipped":{"event":"0/16B3700:2"`, `"wrote":["outbox.event.Order","walstream.checkpoints"]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("record %s lacks %s", b, want)
		}
	}
	got, _, err := Decode(b)
	if err != nil || got.LSN != cp.LSN || got.Notes == nil || got.Notes.Tables["public.outbox"] != 16454 || !slices.Equal(got.Notes.Entries["public.outbox"], []uint32{16460, 16470}) || *got.Notes.Skipped != *skip {
		t.Fatalf("round trip of %s = %+v, %v", b, got, err)
	}
	// The topics its transaction wrote are the record's alone, not the
	// stream's notes.
	if w := Wrote(b); !slices.Equal(w, wrote) {
		t.Errorf("Wrote(%s) = %v, want %v", b, w, wrote)
	}
	if w := Wrote(cp.Encode(Owner{Slot: "walstream"}, now)); w != nil {
		t.Errorf("a record naming no topics: Wrote = %v", w)
	}
	old, _, err := Decode([]byte(`{"slot":"walstream","lsn":"0/16B3748","time":"2026-11-23T01:02:03Z"}`))
	if err != nil || old != (Checkpoint{LSN: 0x16B3748, Owner: Owner{Slot: "walstream"}}) {
		t.Fatalf("old record = %+v, %v", old, err)
	}
	for _, bad := range []string{`{"lsn":"0/1","tables":{"public.outbox":"x"}}`} {
		if _, _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) succeeded", bad)
		}
	}
}

// A takeover from Debezium round-trips, its LSN in Postgres' text form,
// and says which transactions Debezium may have published.
func TestEncodeDecodeTakeover(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
	tk := &Takeover{Source: "kafka:connect-offsets", Connector: "outbox", Server: "dbz",
		Offset: []byte(`{"lsn":26373424,"lsn_commit":26373240,"txId":733}`), Until: 0x1926D60, Since: now.Add(-time.Minute), Time: now}
	cp := Checkpoint{LSN: 0x1926C78, Notes: &Notes{Takeover: tk}}
	b := cp.Encode(Owner{Slot: "dbz_outbox"}, now)
	for _, want := range []string{`"takeover":{"source":"kafka:connect-offsets","connector":"outbox","server":"dbz",` +
		`"offset":{"lsn":26373424,"lsn_commit":26373240,"txId":733}`, `"until_lsn":"0/1926D60"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("record %s lacks %s", b, want)
		}
	}
	got, _, err := Decode(b)
	if err != nil || got.Notes == nil || got.Notes.Takeover == nil {
		t.Fatalf("round trip of %s = %+v, %v", b, got, err)
	}
	g := got.Notes.Takeover
	if g.Until != tk.Until || g.Source != tk.Source || g.Connector != tk.Connector || g.Server != tk.Server ||
		string(g.Offset) != string(tk.Offset) || !g.Since.Equal(tk.Since) || !g.Time.Equal(tk.Time) {
		t.Fatalf("takeover round trip = %+v, want %+v", g, tk)
	}
	for _, c := range []struct {
		commit pglogrepl.LSN
		want   bool
	}{{0x1926D00, true}, {0x1926D60, false}, {0x1927000, false}} {
		if got := g.Overlaps(c.commit); got != c.want {
			t.Errorf("Overlaps(%s) = %v, want %v", c.commit, got, c.want)
		}
	}
	if (*Takeover)(nil).Overlaps(1) {
		t.Error("no takeover overlaps a transaction")
	}
	if _, _, err := Decode([]byte(`{"lsn":"0/1","takeover":{"source":"x","offset":{},"until_lsn":"x"}}`)); err == nil {
		t.Error("a takeover with a bad until_lsn decoded")
	}
}

func TestTrackerRefusesRegression(t *testing.T) {
	tr := NewTracker(Checkpoint{LSN: 100}, true, 50)
	tr.ServerWALEnd(200)
	if got, changed := tr.Confirm(); got != 100 || !changed {
		t.Fatalf("Confirm() = %s, %v; want the committed 0/64, changed", got, changed)
	}
	if err := tr.Committed(Checkpoint{LSN: 90}, 0, time.Time{}); err == nil {
		t.Fatal("Committed accepted a checkpoint behind the committed one")
	}
	if err := tr.Committed(Checkpoint{LSN: 100, PartialCommitLSN: 120, Ordinal: 2}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got, changed := tr.Confirm(); got != 100 || changed {
		t.Fatalf("Confirm() = %s, %v after a partial checkpoint, want 0/64 unchanged: the split transaction is not whole", got, changed)
	}
}

// The tracker is the one owner of the session's positions: where it
// resumed, what Kafka holds (nothing until the first commit when Kafka
// held no checkpoint), and what Postgres was told.
func TestTrackerPositions(t *testing.T) {
	resume := Checkpoint{LSN: 100, PartialCommitLSN: 200, Ordinal: 2}
	for _, inKafka := range []bool{true, false} {
		tr := NewTracker(resume, inKafka, 100)
		if got := tr.Resume(); got != resume {
			t.Fatalf("Resume() = %s, want %s", got, resume)
		}
		if !tr.Replayed(200, 2) || tr.Replayed(200, 3) || !tr.Replayed(50, 9) || tr.Replayed(300, 1) {
			t.Fatal("Replayed does not follow the resume checkpoint")
		}
		got, at := tr.InKafka()
		if inKafka && (got != resume || at.IsZero()) {
			t.Fatalf("in Kafka: InKafka() = %s, %s; want the resume checkpoint and a time", got, at)
		}
		if !inKafka && (got != Checkpoint{} || !at.IsZero()) {
			t.Fatalf("not in Kafka: InKafka() = %s, %s; want nothing", got, at)
		}
		tr.ServerWALEnd(400)
		next := Checkpoint{LSN: 300}
		if err := tr.Committed(next, 1, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got, at := tr.InKafka(); got != next || at.IsZero() {
			t.Fatalf("after a commit: InKafka() = %s, %s; want %s and a time", got, at, next)
		}
		if lsn, changed := tr.Confirm(); lsn != 300 || !changed {
			t.Fatalf("Confirm() = %s, %v; want 0/12C, changed", lsn, changed)
		}
		if lsn, changed := tr.Confirm(); lsn != 300 || changed {
			t.Fatalf("second Confirm() = %s, %v; want 0/12C, unchanged", lsn, changed)
		}
	}
}

// The model: a stream of transactions and idle keepalive positions; a
// publisher that groups them into Kafka transactions, splits large ones,
// and crashes at random points; a slot that replays from its confirmed
// position, sometimes (immediate restart) from further back. The rules
// under test are Tracker's and Checkpoint's; the model stands in for
// decode and publish.

type modelTx struct {
	commit, end pglogrepl.LSN
	events      int
	xid         uint32
}

// sent is the transaction as the server sends it, for the witness.
func (tx *modelTx) sent() Sent {
	return Sent{Xid: tx.xid, CommitLSN: tx.commit, CommitTime: time.Unix(int64(tx.xid), 0), Events: uint64(tx.events)}
}

// last is the transaction as a checkpoint records it.
func (tx *modelTx) last() Last {
	return Last{Xid: tx.xid, CommitLSN: tx.commit, CommitTime: time.Unix(int64(tx.xid), 0)}
}

type item struct {
	tx     *modelTx // nil for a keepalive position
	marker pglogrepl.LSN
}

func genStream(r *rand.Rand, n int) []item {
	var items []item
	lsn := pglogrepl.LSN(1000)
	for i := 0; i < n; i++ {
		lsn += pglogrepl.LSN(1 + r.Intn(100))
		if r.Intn(4) == 0 {
			items = append(items, item{marker: lsn})
			continue
		}
		tx := &modelTx{commit: lsn, events: r.Intn(25), xid: uint32(1000 + i)}
		lsn += pglogrepl.LSN(1 + r.Intn(20))
		tx.end = lsn
		items = append(items, item{tx: tx})
	}
	return items
}

type eventID struct {
	commit  pglogrepl.LSN
	ordinal int
}

func TestModel(t *testing.T) {
	for seed := int64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		stream := genStream(r, 200)
		total := 0
		for _, it := range stream {
			if it.tx != nil {
				total += it.tx.events
			}
		}

		var kafka []eventID             // committed events, in order
		var kafkaCP Checkpoint          // committed checkpoint
		var slotConfirmed pglogrepl.LSN // the slot's confirmed_flush_lsn
		var everConfirmed pglogrepl.LSN // what Postgres was ever told
		maxBatch := 1 + r.Intn(30)      // events per Kafka transaction
		crashes := 0

		for run := 0; ; run++ {
			if run > 500 {
				t.Fatalf("seed %d: no progress after %d runs", seed, run)
			}
			tracker := NewTracker(kafkaCP, true, slotConfirmed)
			var serverEnd pglogrepl.LSN // the WAL end the server reported
			reported := func(lsn pglogrepl.LSN) {
				// The server reports its WAL end with each message, and
				// sometimes an older one than it has since written.
				lsn -= pglogrepl.LSN(r.Intn(3))
				serverEnd = max(serverEnd, lsn)
				tracker.ServerWALEnd(lsn)
			}
			// Postgres resends from confirmed_flush; after an immediate
			// restart, it may resend transactions it had already confirmed.
			start := 0
			for start < len(stream) && itemLSN(stream[start]) < slotConfirmed {
				start++
			}
			if start > 0 && r.Intn(3) == 0 {
				start -= r.Intn(start + 1)
			}
			var batch []eventID
			pos := kafkaCP
			crashed := false
			confirm := func() {
				c, _ := tracker.Confirm()
				if c > kafkaCP.LSN {
					t.Fatalf("seed %d: confirm %s passes the checkpoint Kafka holds, %s", seed, c, kafkaCP)
				}
				if c > serverEnd && c > slotConfirmed {
					t.Fatalf("seed %d: confirm %s passes the WAL end the server reported, %s", seed, c, serverEnd)
				}
				if c < everConfirmed {
					t.Fatalf("seed %d: confirm %s moves back from %s", seed, c, everConfirmed)
				}
				if c > slotConfirmed {
					slotConfirmed = c
				}
				everConfirmed = max(everConfirmed, c)
			}
			commit := func() bool {
				switch r.Intn(12) {
				case 0: // crash before the Kafka commit: the batch is lost
					return false
				case 1: // crash after the commit, before anything is confirmed
					kafka, kafkaCP = append(kafka, batch...), pos
					return false
				}
				kafka, kafkaCP = append(kafka, batch...), pos
				if err := tracker.Committed(pos, len(batch), time.Time{}); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				batch = batch[:0]
				if r.Intn(2) == 0 {
					confirm()
				}
				return true
			}
		stream:
			for _, it := range stream[start:] {
				// The witness finds the history the one published,
				// however the replays and crashes fall.
				var err error
				if it.tx != nil {
					reported(it.tx.end)
					err = tracker.Sent(it.tx.sent())
				} else {
					reported(it.marker)
					err = tracker.DecodedTo(it.marker)
				}
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if it.tx == nil {
					if it.marker > pos.LSN && pos.PartialCommitLSN == 0 {
						pos = Checkpoint{LSN: it.marker, Last: pos.Last}
					}
					continue
				}
				if kafkaCP.SkipTx(it.tx.commit) {
					continue
				}
				for o := 1; o <= it.tx.events; o++ {
					if kafkaCP.Skip(it.tx.commit, uint64(o)) {
						continue
					}
					batch = append(batch, eventID{it.tx.commit, o})
					pos.Last = it.tx.last()
					if len(batch) >= maxBatch {
						pos = Checkpoint{LSN: pos.LSN, PartialCommitLSN: it.tx.commit, Ordinal: uint64(o), Last: pos.Last}
						if !commit() {
							crashed = true
							break stream
						}
					}
				}
				pos = Checkpoint{LSN: it.tx.end, Last: pos.Last}
				if r.Intn(3) == 0 && !commit() {
					crashed = true
					break
				}
			}
			if !crashed && !commit() {
				crashed = true
			}
			if !crashed {
				last := stream[len(stream)-1]
				end := last.marker + 2 // the last keepalive
				if last.tx != nil {
					end = last.tx.end + 2
				}
				reported(end)
				if err := tracker.DecodedTo(end); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
			if crashed {
				crashes++
				continue
			}
			confirm()
			break
		}

		seen := make(map[eventID]int)
		for _, id := range kafka {
			seen[id]++
			if seen[id] > 1 {
				t.Fatalf("seed %d: event %v published twice", seed, id)
			}
		}
		if len(seen) != total {
			t.Fatalf("seed %d: %d events in Kafka, want %d (crashes: %d)", seed, len(seen), total, crashes)
		}
		for i := 1; i < len(kafka); i++ {
			a, b := kafka[i-1], kafka[i]
			if b.commit < a.commit || b.commit == a.commit && b.ordinal <= a.ordinal {
				t.Fatalf("seed %d: %v published after %v, out of commit order", seed, b, a)
			}
		}
	}
}

func itemLSN(it item) pglogrepl.LSN {
	if it.tx != nil {
		return it.tx.commit
	}
	return it.marker
}

func TestAtPartKeepIdentity(t *testing.T) {
	id := Identity{SystemID: "1", Timeline: 2, Database: "d"}
	cp := Checkpoint{LSN: 10, Identity: id}.Published(3).Part(20, 2).Published(2)
	if cp.Identity != id || cp.Events != 5 || !cp.Counted || cp.PartialCommitLSN != 20 || cp.Ordinal != 2 || cp.LSN != 10 {
		t.Fatalf("Part = %+v", cp)
	}
	cp = cp.At(30)
	if cp.Identity != id || cp.Events != 5 || cp.PartialCommitLSN != 0 || cp.Ordinal != 0 || cp.LSN != 30 {
		t.Fatalf("At = %+v", cp)
	}
}

func TestTrackerNeverConfirmsPastServer(t *testing.T) {
	// A checkpoint from another history (an old timeline, another system)
	// can be ahead of everything the server has written.
	tr := NewTracker(Checkpoint{LSN: 5000}, true, 300)
	if got, _ := tr.Confirm(); got != pglogrepl.LSN(300) {
		t.Fatalf("Confirm() before the server reported its WAL end = %s, want the slot's 0/12C", got)
	}
	tr.ServerWALEnd(1000)
	if got, _ := tr.Confirm(); got != 1000 {
		t.Fatalf("Confirm() = %s, want the server's WAL end 0/3E8", got)
	}
	tr.ServerWALEnd(900) // an older report never lowers the bound
	if got, _ := tr.Confirm(); got != 1000 {
		t.Fatalf("Confirm() after an older report = %s, want 0/3E8", got)
	}
	tr.ServerWALEnd(7000)
	if got, _ := tr.Confirm(); got != 5000 {
		t.Fatalf("Confirm() = %s, want the committed 0/1388", got)
	}
}

// A session that resumes from a position Kafka's readers do not hold (a
// record whose commit Kafka acknowledged, its marker missing) confirms
// nothing new before its first commit; one read from Kafka confirms it at
// once.
func TestTrackerHoldsUntilInKafka(t *testing.T) {
	for _, inKafka := range []bool{false, true} {
		tr := NewTracker(Checkpoint{LSN: 0x900}, inKafka, 0x500)
		tr.ServerWALEnd(0x9000)
		want := pglogrepl.LSN(0x500)
		if inKafka {
			want = 0x900
		}
		if got, _ := tr.Confirm(); got != want {
			t.Fatalf("in Kafka %v: Confirm() before a commit = %s, want %s", inKafka, got, want)
		}
		if err := tr.Committed(Checkpoint{LSN: 0x900}, 0, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got, _ := tr.Confirm(); got != 0x900 {
			t.Fatalf("in Kafka %v: Confirm() after the commit = %s, want 0/900", inKafka, got)
		}
	}
}

// Within the stretch of a takeover from Debezium nothing new is
// confirmed: a session started again there reads the stretch from its
// start. Past it, Confirm confirms what Kafka committed.
func TestTrackerHoldsWithinTakeover(t *testing.T) {
	tk := &Takeover{Source: "file", Until: 0x5000}
	resume := Checkpoint{LSN: 0x1000, Notes: &Notes{Takeover: tk}}
	if resume.TakeoverAhead() != tk || (Checkpoint{LSN: 0x5000, Notes: &Notes{Takeover: tk}}).TakeoverAhead() != nil || (Checkpoint{LSN: 0x1000}).TakeoverAhead() != nil {
		t.Fatal("TakeoverAhead: want the takeover only while until_lsn lies ahead of the checkpoint")
	}
	tr := NewTracker(resume, false, 0x800)
	tr.ServerWALEnd(0x9000)
	for _, step := range []struct {
		committed, want pglogrepl.LSN
	}{{0x1000, 0x800}, {0x4F00, 0x800}, {0x5000, 0x5000}, {0x6000, 0x6000}} {
		if err := tr.Committed(Checkpoint{LSN: step.committed}, 1, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got, _ := tr.Confirm(); got != step.want {
			t.Fatalf("Confirm() with %s committed = %s, want %s", step.committed, got, step.want)
		}
	}
	// A session that resumes past the stretch holds nothing.
	tr = NewTracker(Checkpoint{LSN: 0x5000, Notes: &Notes{Takeover: tk}}, true, 0x800)
	tr.ServerWALEnd(0x9000)
	if got, _ := tr.Confirm(); got != 0x5000 {
		t.Fatalf("Confirm() past the stretch = %s, want 0/5000", got)
	}
}

func TestTrackerLag(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := NewTracker(Checkpoint{LSN: 100}, true, 100)
	if lag := tr.Status(t0).Lag; lag != 0 {
		t.Fatalf("idle lag = %s, want 0", lag)
	}
	tr.Received(200, t0)
	tr.Received(300, t0.Add(time.Second))
	if lag := tr.Status(t0.Add(5 * time.Second)).Lag; lag != 5*time.Second {
		t.Fatalf("lag of the first waiting transaction = %s, want 5s", lag)
	}
	// The first is published; the second still waits.
	if err := tr.Committed(Checkpoint{LSN: 250}, 1, t0); err != nil {
		t.Fatal(err)
	}
	if lag := tr.Status(t0.Add(6 * time.Second)).Lag; lag != 6*time.Second {
		t.Fatalf("lag while the second waits = %s, want 6s from the newest published", lag)
	}
	if err := tr.Committed(Checkpoint{LSN: 350}, 1, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	st := tr.Status(t0.Add(7 * time.Second))
	if st.Lag != 0 || st.LastEvent.IsZero() {
		t.Fatalf("caught up: lag %s, last event %s; want 0 and a time", st.Lag, st.LastEvent)
	}
	tr.ServerWALEnd(400)
	if tr.Confirm(); tr.Status(t0).LastConfirm.IsZero() {
		t.Fatal("Confirm did not record the time")
	}
	// What the progress line reports.
	st = tr.Status(t0)
	if got, want := st.Events, uint64(2); got != want {
		t.Fatalf("Events = %d, want %d", got, want)
	}
	if got, want := st.Committed, (Checkpoint{LSN: 350}); got != want {
		t.Fatalf("Committed = %s, want %s", got, want)
	}
	if got, want := st.Confirmed, pglogrepl.LSN(350); got != want {
		t.Fatalf("Confirmed = %s, want %s", got, want)
	}
}

func TestPast(t *testing.T) {
	for _, tc := range []struct {
		name string
		cp   Checkpoint
		fork pglogrepl.LSN
		want bool
	}{
		{"before the fork", Checkpoint{LSN: 90}, 100, false},
		{"at the fork: every commit before it, all shared", Checkpoint{LSN: 100}, 100, false},
		{"after the fork", Checkpoint{LSN: 101}, 100, true},
		{"part of a transaction committed before the fork", Checkpoint{LSN: 80, PartialCommitLSN: 99, Ordinal: 3}, 100, false},
		{"part of a transaction committed at the fork", Checkpoint{LSN: 80, PartialCommitLSN: 100, Ordinal: 3}, 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cp.Past(tc.fork); got != tc.want {
				t.Fatalf("%v.Past(%s) = %v, want %v", tc.cp, tc.fork, got, tc.want)
			}
		})
	}
}

func TestEventsPast(t *testing.T) {
	a := Identity{SystemID: "1", Timeline: 1, Database: "d"}
	rec := func(lsn pglogrepl.LSN, events uint64) Checkpoint {
		return Checkpoint{LSN: lsn, Identity: a, Events: events, Counted: true}
	}
	old := Checkpoint{LSN: 50} // written before records were counted
	gap := Gap{Kind: GapSystemChanged, Events: -1}
	for _, tc := range []struct {
		name    string
		history []Checkpoint
		fork    pglogrepl.LSN
		want    int64
	}{
		{"records on both sides", []Checkpoint{rec(10, 5), rec(90, 20), rec(150, 27), rec(200, 40)}, 100, 20},
		{"a record exactly at the fork", []Checkpoint{rec(100, 20), rec(200, 40)}, 100, 20},
		{"nothing past the fork", []Checkpoint{rec(90, 20)}, 100, 0},
		{"a position marker past the fork, no events", []Checkpoint{rec(90, 20), rec(150, 20)}, 100, 0},
		{"compacted: only the last record is left", []Checkpoint{rec(200, 40)}, 100, -1},
		{"empty history", nil, 100, -1},
		{"an uncounted record on the way", []Checkpoint{old, rec(200, 40)}, 100, -1},
		{"the last record uncounted", []Checkpoint{old}, 100, -1},
		{"a record of another system", []Checkpoint{{LSN: 10, Identity: Identity{SystemID: "2"}, Counted: true}, rec(200, 40)}, 100, -1},
		{"a gap accepted in between", []Checkpoint{rec(10, 5), {LSN: 300, Identity: a, Events: 5, Counted: true, Gap: gap}}, 100, -1},
		{"a partial record before the fork counts", []Checkpoint{rec(80, 3).Part(99, 2).Published(2), rec(200, 9)}, 100, 4},
		{"a partial record at the fork does not", []Checkpoint{rec(80, 3), rec(80, 3).Part(100, 2).Published(2), rec(200, 9)}, 100, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EventsPast(tc.history, tc.fork); got != tc.want {
				t.Fatalf("EventsPast(%v, %s) = %d, want %d", tc.history, tc.fork, got, tc.want)
			}
		})
	}
}

func TestSlotAhead(t *testing.T) {
	for _, tc := range []struct {
		cp   Checkpoint
		slot pglogrepl.LSN
		want bool
	}{
		{Checkpoint{LSN: 100}, 100, false},
		{Checkpoint{LSN: 100}, 50, false},
		{Checkpoint{LSN: 100}, 101, true},
		{Checkpoint{LSN: 100, PartialCommitLSN: 200, Ordinal: 3}, 150, true}, // the slot passed what is whole in Kafka
	} {
		if got := tc.cp.SlotAhead(tc.slot); got != tc.want {
			t.Errorf("%s.SlotAhead(%s) = %v, want %v", tc.cp, tc.slot, got, tc.want)
		}
	}
}
