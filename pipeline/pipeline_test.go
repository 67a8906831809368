package pipeline

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/checkpoint/store"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
)

func TestClassifyFailure(t *testing.T) {
	pgErr := func(code string) error { return fmt.Errorf("receiving: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name      string
		err       error
		peer      string
		kind      string
		permanent bool
	}{
		{"epoch bumped", &epochBumpedError{fmt.Errorf("x: %w", publish.ErrFenced)}, peerKafka, kindEpochBumped, false},
		// Not a fencing by anyone: it neither stops the stream nor counts
		// towards a shared transactional id.
		{"transaction aborted on timeout", onKafka(&publish.AbortedError{TransactionalID: "t", Err: kerr.InvalidProducerEpoch}), peerKafka, kindTxnAborted, false},
		{"bad input", fmt.Errorf("slot s: %w", &decode.Error{Reason: "bad"}), peerPostgres, kindBadInput, true},
		{"slot ahead", fmt.Errorf("%w: slot", ErrSlotAhead), peerPostgres, kindSlotAhead, true},
		{"setup", &replication.SetupError{Object: "wal_level"}, peerPostgres, kindSetup, true},
		{"fenced", onKafka(fmt.Errorf("%w: x", publish.ErrFenced)), peerKafka, kindFenced, true},
		{"authorization", onKafka(fmt.Errorf("%w: x", kafka.ErrAuthorization)), peerKafka, kindAuthorization, true},
		{"record too large", onKafka(&publish.RecordError{Topic: "t", Err: kerr.MessageTooLarge}), peerKafka, kindBadInput, true},
		{"record timestamp out of range", onKafka(&publish.RecordError{Topic: "t", Err: kerr.InvalidTimestamp}), peerKafka, kindBadInput, true},
		{"kafka tls", onKafka(x509.UnknownAuthorityError{}), peerKafka, kindTLS, true},
		{"postgres tls", fmt.Errorf("connecting: %w", x509.HostnameError{Host: "db"}), peerPostgres, kindTLS, true},
		{"kafka other", onKafka(errors.New("broker gone")), peerKafka, kindKafka, false},
		{"schema registry down", onKafka(&format.RegistryError{Err: errors.New("connection refused")}), peerRegistry, kindRegistry, false},
		{"schema refused", onKafka(&format.RegistryError{Permanent: true, Err: errors.New("incompatible")}), peerRegistry, kindSchemaRefused, true},
		{"slot in use", pgErr("55006"), peerPostgres, kindSlotInUse, false},
		{"admin shutdown", pgErr("57P01"), peerPostgres, kindPostgres, false},
		{"stream ended", replication.ErrStreamEnded, peerPostgres, kindPostgres, false},
		{"wrong password", pgErr("28P01"), peerPostgres, kindPostgres, true},
		{"eof", io.ErrUnexpectedEOF, peerPostgres, kindPostgres, false},
		{"unknown", errors.New("something"), peerPostgres, kindPostgres, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classifyFailure(tc.err)
			if want := (failure{tc.peer, tc.kind, tc.permanent}); got != want {
				t.Fatalf("classifyFailure(%v) = %+v, want %+v", tc.err, got, want)
			}
		})
	}
}

// TestFailureKinds: every kind and peer constant of failure.go has a
// series from the start (failureKinds, failurePeers), so that rate()
// sees its first error, and the list of labels the metrics reference
// generates from those series names it.
func TestFailureKinds(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "failure.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				var list []string
				switch {
				case strings.HasPrefix(name.Name, "kind"):
					list = failureKinds
				case strings.HasPrefix(name.Name, "peer"):
					list = failurePeers
				default:
					continue
				}
				found++
				if !slices.Contains(list, v) {
					t.Errorf("%s (%q) has no series from the start: add it to failureKinds or failurePeers", name.Name, v)
				}
			}
		}
	}
	if found < 10 {
		t.Fatalf("found %d kind and peer constants in failure.go: the parse is wrong", found)
	}
	for _, v := range []Verdict{Phantoms, OffHistory, SystemChanged} {
		if !slices.Contains(failureKinds, v.String()) {
			t.Errorf("verdict %s has no series from the start", v)
		}
	}
}

func TestFencings(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := fencings{window: 10 * time.Minute, max: 3}
	for i, step := range []struct {
		at     time.Duration
		n      int
		shared bool
	}{
		{0, 1, false},
		{5 * time.Minute, 2, false},
		{11 * time.Minute, 2, false}, // the first fell out of the window
		{12 * time.Minute, 3, true},
		{40 * time.Minute, 1, false},
	} {
		n, shared := f.add(t0.Add(step.at))
		if n != step.n || shared != step.shared {
			t.Fatalf("step %d at +%s: add = %d, %v; want %d, %v", i, step.at, n, shared, step.n, step.shared)
		}
	}
}

func TestSharedIDError(t *testing.T) {
	last := &epochBumpedError{fmt.Errorf("%w (transactional id t): epoch", publish.ErrFenced)}
	err := error(&SharedIDError{TransactionalID: "t", Slot: "s", Fencings: 3, Window: 10 * time.Minute, Err: last})
	if !errors.Is(err, publish.ErrFenced) {
		t.Fatal("SharedIDError does not unwrap to ErrFenced")
	}
	for _, want := range []string{"fenced", "transactional id t was fenced 3 times in 10m0s", `slot "s"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not contain %q", err, want)
		}
	}
}

// fakeSource is a checkpointSource with func fields.
type fakeSource struct {
	fence   func(ctx context.Context) error
	read    func(ctx context.Context) (checkpoint.Checkpoint, time.Time, bool, error)
	history []checkpoint.Checkpoint
	open    []store.OpenRecord // records in open transactions every read finds
	// decided, when set, is the number of reads that find open; the
	// later ones find committed instead, as the checkpoint.
	decided   int
	committed checkpoint.Checkpoint
	reads     int
	// coordinator, when set, is what the transaction coordinator says of
	// an open record's transaction, and markers what its markers in the
	// other topics it wrote say; unset, neither decides.
	coordinator, markers func(o store.OpenRecord) (kafka.Fate, error)
	// ended are the records whose transactions AbortLeftOpen was asked to
	// abort where they were left open, which fails with endErr.
	ended  []store.OpenRecord
	endErr error
}

var _ checkpointSource = (*fakeSource)(nil)

func (f *fakeSource) Fence(ctx context.Context) error { return f.fence(ctx) }
func (f *fakeSource) CoordinatorFate(_ context.Context, o store.OpenRecord) (kafka.Fate, error) {
	if f.coordinator == nil {
		return kafka.FateOpen, nil
	}
	return f.coordinator(o)
}
func (f *fakeSource) AbortLeftOpen(_ context.Context, o store.OpenRecord) ([]string, error) {
	f.ended = append(f.ended, o)
	return []string{"outbox-0"}, f.endErr
}
func (f *fakeSource) MarkerFate(_ context.Context, o store.OpenRecord) (kafka.Fate, error) {
	if f.markers == nil {
		return kafka.FateOpen, errors.New("the record names no other topics")
	}
	return f.markers(o)
}
func (f *fakeSource) FenceOthers(context.Context, []string) error {
	return errors.New("no transactional id but the stream's own wrote its checkpoints")
}
func (f *fakeSource) ReadCheckpoint(ctx context.Context) (store.Read, error) {
	cp, at, found, err := f.read(ctx)
	if f.reads++; f.decided > 0 && f.reads > f.decided {
		return store.Read{Checkpoint: f.committed, At: at, Found: true}, err
	}
	return store.Read{Checkpoint: cp, At: at, Found: found, Open: slices.Clone(f.open)}, err
}

// A record of the stream's own transactional id still open after the
// stream fenced it is waited for: when Kafka commits it, the stream
// resumes from it. When it stays open, a transaction Kafka left hanging,
// its markers in the other topics it wrote decide it: committed, the
// stream resumes after it; aborted, before it. Nothing deciding it, the
// stream stops, guessing neither. One of a producer it does not know
// stays a reason to wait.
func TestHangingOwnRecord(t *testing.T) {
	srv := replication.Server{SystemID: "7", Timeline: 1, XLogPos: 0x10000, Database: "d"}
	id := checkpoint.Identity{SystemID: "7", Timeline: 1, Database: "d"}
	own := checkpoint.Checkpoint{LSN: 0x500, Identity: id}
	later := checkpoint.Checkpoint{LSN: 0x900, Identity: id, Owner: checkpoint.Owner{Slot: "s", TransactionalID: "walstream-d/s"}}
	cfg := &Config{Names: replication.Names{Slot: "s"}, CheckpointKey: "k", CheckpointTopic: "cp", TransactionalID: "walstream-d/s",
		undecidedWait: 2 * time.Second}
	for _, tc := range []struct {
		name    string
		writer  string
		decided int // reads that find the record open; 0: all
		markers kafka.Fate
		want    pglogrepl.LSN // 0: an error
	}{
		{"decided by Kafka during the wait", "walstream-d/s", 3, kafka.FateOpen, 0x900},
		{"hanging, committed by its markers", "walstream-d/s", 0, kafka.FateCommitted, 0x900},
		{"hanging, aborted by its markers", "walstream-d/s", 0, kafka.FateAborted, 0x500},
		{"hanging, undecided", "walstream-d/s", 0, kafka.FateOpen, 0},
		{"an unknown producer's", "", 0, kafka.FateOpen, 0},
	} {
		src := &fakeSource{fence: func(context.Context) error { return nil },
			read: func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
				return own, time.Now(), true, nil
			},
			open: []store.OpenRecord{{Partition: 0, Offset: 426, ProducerID: 9, TransactionalID: tc.writer,
				Checkpoint: checkpoint.Checkpoint{LSN: 0x900, Identity: id, Owner: checkpoint.Owner{Slot: "s", TransactionalID: tc.writer}}}},
			decided: tc.decided, committed: later,
			markers: func(store.OpenRecord) (kafka.Fate, error) { return tc.markers, nil }}
		prior := &earlier{}
		cp, _, err := resume(context.Background(), src, replication.Slot{ConfirmedFlush: 0x500}, srv, nil, walEndAt(srv.XLogPos), cfg, prior,
			slog.New(slog.DiscardHandler), prometheus.NewGauge(prometheus.GaugeOpts{Name: "p"}))
		var open *OpenCheckpointError
		var undecided *UndecidedCheckpointError
		switch {
		case tc.want != 0 && (err != nil || cp.LSN != tc.want):
			t.Errorf("%s: resume = %v, %v; want %s", tc.name, cp, err, tc.want)
		case tc.want == 0 && tc.writer == "" && !errors.As(err, &open):
			t.Errorf("%s: resume error %v, want an OpenCheckpointError", tc.name, err)
		case tc.want == 0 && tc.writer != "" && (!errors.As(err, &undecided) || !classifyFailure(err).permanent ||
			!strings.Contains(err.Error(), "partition 0 offset 426") || !strings.Contains(err.Error(), "--start-offset 426")):
			t.Errorf("%s: resume = %v, %v; want a permanent UndecidedCheckpointError naming the record and how to abort it", tc.name, cp, err)
		}
		if tc.want == 0 || tc.decided > 0 {
			continue
		}
		// The next session of the process does not wait for the record
		// decided before: its replication stream would be idle meanwhile.
		src.reads = 0
		if cp, _, err := resume(context.Background(), src, replication.Slot{ConfirmedFlush: 0x500}, srv, nil, walEndAt(srv.XLogPos), cfg, prior,
			slog.New(slog.DiscardHandler), prometheus.NewGauge(prometheus.GaugeOpts{Name: "p"})); err != nil || cp.LSN != tc.want || src.reads > 2 {
			t.Errorf("%s, the next session: resume = %v, %v after %d reads of the checkpoint; want %s after 2, without waiting", tc.name, cp, err, src.reads, tc.want)
		}
	}
}

// A process killed while it waits for a record of its own transactional
// id, whose coordinator could not say whether it committed, leaves the
// next process nothing to ask: the coordinator forgot at the fencing. The
// next process never takes the record for one that did not commit: its
// markers decide it, or it stops.
func TestUndecidedAfterKilledWait(t *testing.T) {
	srv := replication.Server{SystemID: "7", Timeline: 1, XLogPos: 0x10000, Database: "d"}
	id := checkpoint.Identity{SystemID: "7", Timeline: 1, Database: "d"}
	owner := checkpoint.Owner{Slot: "s", TransactionalID: "walstream-d/s"}
	read := checkpoint.Checkpoint{LSN: 0x500, Identity: id, Owner: owner}
	open := store.OpenRecord{Partition: 0, Offset: 426, ProducerID: 9, ProducerEpoch: 3, TransactionalID: owner.TransactionalID,
		Checkpoint: checkpoint.Checkpoint{LSN: 0x900, Identity: id, Owner: owner}, Wrote: []string{"cp", "outbox.event.Order"}}
	cfg := &Config{Names: replication.Names{Slot: "s"}, CheckpointKey: "k", CheckpointTopic: "cp", TransactionalID: owner.TransactionalID,
		undecidedWait: time.Minute}
	source := func(markers kafka.Fate) *fakeSource {
		return &fakeSource{fence: func(context.Context) error { return nil },
			read: func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
				return read, time.Now(), true, nil
			},
			open: []store.OpenRecord{open},
			coordinator: func(store.OpenRecord) (kafka.Fate, error) {
				return kafka.FateOpen, errors.New("COORDINATOR_LOAD_IN_PROGRESS")
			},
			markers: func(store.OpenRecord) (kafka.Fate, error) { return markers, nil }}
	}
	// The first process: the coordinator cannot answer; killed during
	// the wait.
	ctx, cancel := context.WithCancel(context.Background())
	src := source(kafka.FateCommitted)
	src.read = func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
		if src.reads == 2 {
			cancel()
		}
		return read, time.Now(), true, nil
	}
	if _, _, err := resume(ctx, src, replication.Slot{ConfirmedFlush: 0x500}, srv, nil, walEndAt(srv.XLogPos), cfg, &earlier{},
		slog.New(slog.DiscardHandler), prometheus.NewGauge(prometheus.GaugeOpts{Name: "p"})); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first process: resume = %v, want it killed during the wait", err)
	}
	// The next processes, after their waits.
	cfg.undecidedWait = 500 * time.Millisecond
	for _, tc := range []struct {
		markers kafka.Fate
		want    pglogrepl.LSN // 0: an UndecidedCheckpointError
	}{{kafka.FateCommitted, 0x900}, {kafka.FateAborted, 0x500}, {kafka.FateOpen, 0}} {
		cp, _, err := resume(context.Background(), source(tc.markers), replication.Slot{ConfirmedFlush: 0x500}, srv, nil, walEndAt(srv.XLogPos), cfg, &earlier{},
			slog.New(slog.DiscardHandler), prometheus.NewGauge(prometheus.GaugeOpts{Name: "p"}))
		var undecided *UndecidedCheckpointError
		if tc.want == 0 && !errors.As(err, &undecided) || tc.want != 0 && (err != nil || cp.LSN != tc.want) {
			t.Errorf("the next process, the markers saying %s: resume = %v, %v; want %s (0: undecided)", tc.markers, cp, err, tc.want)
		}
	}
}

// A record Kafka acknowledged committing to an earlier session of the
// process, or whose transaction the coordinator reports committed before
// the fencing, is committed, whatever its partition shows (a broker killed
// just after it acknowledged a commit left its record open past the
// fencing, its events committed). The stream resumes after it without waiting, as from a
// position Kafka's readers do not hold: nothing is confirmed to Postgres
// before its next commit. Any other record is waited for as before.
func TestAcknowledgedOpenRecord(t *testing.T) {
	srv := replication.Server{SystemID: "7", Timeline: 1, XLogPos: 0x10000, Database: "d"}
	id := checkpoint.Identity{SystemID: "7", Timeline: 1, Database: "d"}
	owner := checkpoint.Owner{Slot: "s", TransactionalID: "walstream-d/s"}
	read := checkpoint.Checkpoint{LSN: 0x500, Identity: id, Owner: owner, Events: 5, Counted: true}
	acked := checkpoint.Checkpoint{LSN: 0x900, Identity: id, Owner: owner, Events: 9, Counted: true}
	cfg := &Config{Names: replication.Names{Slot: "s"}, CheckpointKey: "k", CheckpointTopic: "cp", TransactionalID: "walstream-d/s",
		undecidedWait: 2 * time.Second}
	none := publish.Acknowledged{}
	fenced := false
	for _, tc := range []struct {
		name        string
		acked       publish.Acknowledged
		coordinator kafka.Fate // what it reports of the record's transaction before the fencing
		want        pglogrepl.LSN
		waited      bool
		endErr      error // ending the transaction where it is left open fails so
	}{
		{"the record acknowledged", publish.Acknowledged{Partition: 0, Offset: 426, Checkpoint: acked}, kafka.FateOpen, 0x900, false, nil},
		{"another offset", publish.Acknowledged{Partition: 0, Offset: 425, Checkpoint: acked}, kafka.FateOpen, 0x500, true, nil},
		{"another checkpoint", publish.Acknowledged{Partition: 0, Offset: 426, Checkpoint: acked.Published(1)}, kafka.FateOpen, 0x500, true, nil},
		{"none", none, kafka.FateOpen, 0x500, true, nil},
		{"committed as the coordinator says", none, kafka.FateCommitted, 0x900, false, nil},
		{"aborted as the coordinator says", none, kafka.FateAborted, 0x500, false, nil},
		// Resuming before a record whose transaction is left open where
		// it wrote, the stream's next commit there would commit it too.
		{"aborted, but not ended where it is left open", none, kafka.FateAborted, 0, false, kerr.ClusterAuthorizationFailed},
	} {
		src := &fakeSource{fence: func(context.Context) error { fenced = true; return nil },
			read: func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
				return read, time.Now(), true, nil
			},
			open: []store.OpenRecord{{Partition: 0, Offset: 426, ProducerID: 9, TransactionalID: owner.TransactionalID, Checkpoint: acked}},
			coordinator: func(store.OpenRecord) (kafka.Fate, error) {
				if fenced {
					t.Errorf("%s: the coordinator was asked after the fencing, which makes it forget", tc.name)
				}
				return tc.coordinator, nil
			},
			// Past the wait, the transaction's markers say it did not
			// commit.
			markers: func(store.OpenRecord) (kafka.Fate, error) { return kafka.FateAborted, nil }, endErr: tc.endErr}
		fenced = false
		cp, inKafka, err := resume(context.Background(), src, replication.Slot{ConfirmedFlush: 0x500}, srv, nil, walEndAt(srv.XLogPos), cfg, &earlier{acked: tc.acked},
			slog.New(slog.DiscardHandler), prometheus.NewGauge(prometheus.GaugeOpts{Name: "p"}))
		if aborted := tc.want == 0x500 || tc.endErr != nil; (len(src.ended) == 1) != aborted || aborted && src.ended[0].Offset != 426 {
			t.Errorf("%s: ended where left open: %v; want the record's transaction aborted there: %v", tc.name, src.ended, aborted)
		}
		if tc.endErr != nil {
			if !errors.Is(err, errLeftOpen) || !errors.Is(err, kafka.ErrAuthorization) || !classifyFailure(err).permanent ||
				!strings.Contains(err.Error(), "publishing them twice") {
				t.Errorf("%s: resume = %v, %v; want a permanent authorization error saying the events would be published twice", tc.name, cp, err)
			}
			continue
		}
		if err != nil || cp.LSN != tc.want || inKafka != (tc.want == 0x500) {
			t.Errorf("%s: resume = %v, in Kafka %v, %v; want %s, in Kafka %v", tc.name, cp, inKafka, err, tc.want, tc.want == 0x500)
		}
		if waited := src.reads > 2; waited != tc.waited {
			t.Errorf("%s: %d reads of the checkpoint; waited for the record: %v, want %v", tc.name, src.reads, waited, tc.waited)
		}
	}
}

func (f *fakeSource) CheckpointHistory(context.Context) ([]checkpoint.Checkpoint, error) {
	return f.history, nil
}

// walEndAt is a server whose WAL ends at lsn when asked again.
func walEndAt(lsn pglogrepl.LSN) func(context.Context) (pglogrepl.LSN, error) {
	return func(context.Context) (pglogrepl.LSN, error) { return lsn, nil }
}

func TestResume(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	slot := replication.Slot{ConfirmedFlush: 0x500}
	// The server is on timeline 2, which forked from 1 at 0/700.
	srv := replication.Server{SystemID: "7000000000000000001", Timeline: 2, XLogPos: 0x10000, Database: "d"}
	history := []replication.HistoryEntry{{Timeline: 1, Switch: 0x700}}
	own := checkpoint.Identity{SystemID: srv.SystemID, Timeline: 2, Database: "d"}
	tl1 := checkpoint.Identity{SystemID: srv.SystemID, Timeline: 1, Database: "d"}
	found := func(cp checkpoint.Checkpoint, history ...checkpoint.Checkpoint) *fakeSource {
		return &fakeSource{fence: func(context.Context) error { return nil },
			read: func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
				return cp, time.Now(), true, nil
			}, history: history}
	}
	at := func(lsn pglogrepl.LSN, id checkpoint.Identity) checkpoint.Checkpoint {
		return checkpoint.Checkpoint{LSN: lsn, Identity: id}
	}
	past := checkpoint.Checkpoint{LSN: 0x900, Identity: tl1, Events: 10, Counted: true}
	before := checkpoint.Checkpoint{LSN: 0x600, Identity: tl1, Events: 4, Counted: true}
	// Written past the WAL end srv names by an instance that held the
	// slot after IDENTIFY_SYSTEM, as a checkpoint at the WAL end was.
	later := checkpoint.Checkpoint{LSN: 0x12000, Identity: own, Events: 20, Counted: true}
	atEnd := checkpoint.Checkpoint{LSN: 0x10000, Identity: own, Events: 15, Counted: true}
	// A checkpoint whose replay from the slot a session found another
	// history's (a restored copy written past it): the LSNs do not show it.
	last := checkpoint.Last{Xid: 9, CommitLSN: 0x880}
	replayed := checkpoint.Checkpoint{LSN: 0x900, Identity: own, Events: 10, Counted: true, Last: last}
	ownBefore := checkpoint.Checkpoint{LSN: 0x400, Identity: own, Events: 4, Counted: true}
	found9 := &checkpoint.ReplayError{Checkpoint: replayed, From: 0x500, Passed: 0x900}
	rewritten := &earlier{rewritten: &DivergedError{Placement: Placement{Verdict: Phantoms, Fork: 0x500, Ahead: true, Replay: found9}, Checkpoint: replayed}}
	for _, tc := range []struct {
		name         string
		src          *fakeSource
		prior        *earlier
		walEnd       pglogrepl.LSN // the server's WAL end asked again; srv's when zero
		allowAhead   bool
		accept       Accept
		want         checkpoint.Checkpoint
		wantInKafka  bool
		wantErr      func(error) bool
		wantPhantoms float64
	}{
		{name: "no checkpoint: start at the slot", src: &fakeSource{fence: func(context.Context) error { return nil },
			read: func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
				return checkpoint.Checkpoint{}, time.Time{}, false, nil
			}}, want: at(0x500, own)},
		{name: "checkpoint at the slot", src: found(at(0x500, own)), want: at(0x500, own), wantInKafka: true},
		{name: "checkpoint ahead of the slot", src: found(checkpoint.Checkpoint{LSN: 0x900, PartialCommitLSN: 0xa00, Ordinal: 3, Identity: own}),
			want: checkpoint.Checkpoint{LSN: 0x900, PartialCommitLSN: 0xa00, Ordinal: 3, Identity: own}, wantInKafka: true},
		{name: "an old record takes the server's identity, recorded at once", src: found(checkpoint.Checkpoint{LSN: 0x500}), want: at(0x500, own)},
		{name: "safe failover: before the fork", src: found(at(0x600, tl1)), want: at(0x600, own)},
		{name: "slot ahead refused", src: found(at(0x100, own)),
			wantErr: func(err error) bool { return errors.Is(err, ErrSlotAhead) && !strings.Contains(err.Error(), "--") }},
		{name: "slot ahead allowed", src: found(at(0x100, own)), allowAhead: true,
			want: checkpoint.Checkpoint{LSN: 0x500, Identity: own, Gap: checkpoint.Gap{Kind: checkpoint.GapSlotAhead, Previous: own, From: 0x100, To: 0x500, Events: -1}}},
		{name: "phantoms refused, counted from the history", src: found(past, before, past), wantPhantoms: 6,
			wantErr: func(err error) bool {
				var de *DivergedError
				return errors.As(err, &de) && de.Events == 6 && de.Placement == Placement{Verdict: Phantoms, Fork: 0x700} &&
					classifyFailure(err).permanent && classifyFailure(err).kind == "phantoms"
			}},
		{name: "phantoms, the history compacted", src: found(past, past), wantPhantoms: -1,
			wantErr: func(err error) bool { var de *DivergedError; return errors.As(err, &de) && de.Events == -1 }},
		{name: "phantoms accepted: from the fork", src: found(past, before, past), accept: Accept{Phantoms: true}, wantPhantoms: 6,
			want: checkpoint.Checkpoint{LSN: 0x700, Identity: own, Events: 10, Counted: true,
				Gap: checkpoint.Gap{Kind: checkpoint.GapPhantoms, Previous: tl1, From: 0x700, To: 0x900, Events: 6}}},
		{name: "past the identified WAL end, not past the WAL end of now", src: found(later), walEnd: 0x13000, want: later, wantInKafka: true},
		{name: "past the WAL end of now: phantoms", src: found(later, atEnd, later), walEnd: 0x11000, wantPhantoms: 5,
			wantErr: func(err error) bool {
				var de *DivergedError
				return errors.As(err, &de) && de.Placement == Placement{Verdict: Phantoms, Fork: 0x11000, Ahead: true} && de.Events == 5
			}},
		{name: "a rewritten history the last session's replay found, refused", src: found(replayed, ownBefore, replayed), prior: rewritten, wantPhantoms: 6,
			wantErr: func(err error) bool {
				var de *DivergedError
				return errors.As(err, &de) && de.Placement.Replay == found9 && de.From == 0x500 && de.Events == 6 && classifyFailure(err).permanent &&
					strings.Contains(err.Error(), "was rewritten past 0/500") && strings.Contains(err.Error(), "up to 6 events published after 0/500")
			}},
		{name: "a rewritten history accepted: from the slot, the last transaction forgotten", src: found(replayed, ownBefore, replayed), prior: rewritten,
			accept: Accept{Phantoms: true}, wantPhantoms: 6,
			want: checkpoint.Checkpoint{LSN: 0x500, Identity: own, Events: 10, Counted: true,
				Gap: checkpoint.Gap{Kind: checkpoint.GapPhantoms, Previous: own, From: 0x500, To: 0x900, Events: 6}}},
		{name: "a rewritten history found of another checkpoint", src: found(at(0x900, own)), prior: rewritten, want: at(0x900, own), wantInKafka: true},
		{name: "another system refused", src: found(at(0x900, checkpoint.Identity{SystemID: "1", Timeline: 1})),
			wantErr: func(err error) bool {
				var de *DivergedError
				return errors.As(err, &de) && classifyFailure(err).kind == "system_changed" && classifyFailure(err).permanent
			}},
		{name: "fencing fails on Kafka", src: &fakeSource{fence: func(context.Context) error { return kerr.CoordinatorNotAvailable },
			read: func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
				return checkpoint.Checkpoint{}, time.Time{}, false, nil
			}},
			wantErr: func(err error) bool { var ke *kafkaError; return errors.As(err, &ke) }},
		{name: "read fails on Kafka", src: &fakeSource{fence: func(context.Context) error { return nil },
			read: func(context.Context) (checkpoint.Checkpoint, time.Time, bool, error) {
				return checkpoint.Checkpoint{}, time.Time{}, false, errors.New("timeout")
			}},
			wantErr: func(err error) bool { return classifyFailure(err).peer == peerKafka }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{Names: replication.Names{Slot: "s"}, CheckpointKey: "s", CheckpointTopic: "cp", AllowSlotAhead: tc.allowAhead, Accept: tc.accept}
			phantoms := prometheus.NewGauge(prometheus.GaugeOpts{Name: "p"})
			walEnd := srv.XLogPos
			if tc.walEnd != 0 {
				walEnd = tc.walEnd
			}
			if tc.prior == nil {
				tc.prior = &earlier{}
			}
			cp, inKafka, err := resume(context.Background(), tc.src, slot, srv, history, walEndAt(walEnd), cfg, tc.prior, discard, phantoms)
			var m dto.Metric
			if err := phantoms.Write(&m); err != nil {
				t.Fatal(err)
			}
			if got := m.GetGauge().GetValue(); got != tc.wantPhantoms {
				t.Errorf("phantom events gauge = %v, want %v", got, tc.wantPhantoms)
			}
			if tc.wantErr != nil {
				if err == nil || !tc.wantErr(err) {
					t.Fatalf("resume error = %v, not the one wanted", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cp.Gap.At = time.Time{}
			if cp != tc.want || inKafka != tc.wantInKafka {
				t.Fatalf("resume = %+v, %v; want %+v, %v", cp, inKafka, tc.want, tc.wantInKafka)
			}
		})
	}
}

func TestHealthAndReadiness(t *testing.T) {
	p := New(Config{StatusInterval: time.Second, CommitTimeout: time.Second, ReadyConfirmAge: time.Minute},
		slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	get := func(h func(w *httptest.ResponseRecorder)) int {
		w := httptest.NewRecorder()
		h(w)
		return w.Code
	}
	healthz := func(w *httptest.ResponseRecorder) { p.Healthz(w, httptest.NewRequest("GET", "/healthz", nil)) }
	readyz := func(w *httptest.ResponseRecorder) { p.Readyz(w, httptest.NewRequest("GET", "/readyz", nil)) }
	if got, want := get(healthz), 200; got != want {
		t.Fatalf("healthz between sessions = %d, want %d", got, want)
	}
	if got, want := get(readyz), 503; got != want {
		t.Fatalf("readyz between sessions = %d, want %d", got, want)
	}
	tr := checkpoint.NewTracker(checkpoint.Checkpoint{LSN: 0x10}, true, pglogrepl.LSN(0x10))
	p.state.tracker.Store(tr)
	// Never confirmed: the last confirm is the zero time, long ago.
	if got, want := get(healthz), 503; got != want {
		t.Fatalf("healthz of a silent loop = %d, want %d", got, want)
	}
	tr.Confirm()
	if got, want := get(healthz), 200; got != want {
		t.Fatalf("healthz after a confirm = %d, want %d", got, want)
	}
	if got, want := get(readyz), 503; got != want {
		t.Fatalf("readyz after a confirm, Kafka never probed = %d, want %d", got, want)
	}
	p.state.kafka.Store(&probeResult{at: time.Now(), ok: time.Now()})
	if got, want := get(readyz), 200; got != want {
		t.Fatalf("readyz after a confirm = %d, want %d", got, want)
	}
}

// Readiness by state: streaming, standby (only with ?standby=1), Kafka
// lost, evidence too old.
func TestReadiness(t *testing.T) {
	now := time.Now()
	kafkaOK := &probeResult{at: now.Add(-time.Second), ok: now.Add(-time.Second)}
	kafkaDown := &probeResult{at: now.Add(-time.Second), ok: now.Add(-5 * time.Second), err: errors.New("dial tcp 127.0.0.1:9092: connect: connection refused")}
	kafkaStale := &probeResult{at: now.Add(-20 * time.Second), ok: now.Add(-20 * time.Second)}
	kafkaUnwritable := &probeResult{at: now.Add(-time.Second), ok: now.Add(-time.Second),
		unwritable: []string{"walstream.checkpoints-0: 1 of 3 replicas in sync, fewer than min.insync.replicas 2: Kafka refuses writes (NOT_ENOUGH_REPLICAS)"}}
	flushFailed := errors.New("flushing Kafka transaction for checkpoint 0/10: context deadline exceeded")
	confirmed := func() *checkpoint.Tracker {
		tr := checkpoint.NewTracker(checkpoint.Checkpoint{LSN: 0x10}, true, pglogrepl.LSN(0x10))
		tr.Confirm()
		return tr
	}
	for _, tc := range []struct {
		name      string
		tracker   *checkpoint.Tracker
		standbyAt time.Time
		kafka     *probeResult
		lastErr   error
		// kafkaFailed: lastErr came from Kafka, a moment ago.
		kafkaFailed bool
		standby     bool
		code        int
		body        string
	}{
		{"streaming", confirmed(), time.Time{}, kafkaOK, nil, false, false, 200, "ready"},
		{"streaming, standby probe", confirmed(), time.Time{}, kafkaOK, nil, false, true, 200, "streaming"},
		{"streaming, Kafka lost", confirmed(), time.Time{}, kafkaDown, nil, false, false, 503, "streaming, but Kafka does not answer: dial tcp"},
		{"streaming, Kafka lost, standby probe", confirmed(), time.Time{}, kafkaDown, nil, false, true, 503, "Kafka does not answer"},
		// The ages read are now's plus the time the subtests before took:
		// the bodies name no age that a slow run would round up.
		{"streaming, Kafka silent", confirmed(), time.Time{}, kafkaStale, nil, false, false, 503, "streaming, but Kafka last answered 2"},
		{"streaming, never probed", confirmed(), time.Time{}, nil, nil, false, false, 503, "no answer from Kafka yet"},
		{"streaming, Kafka cannot take writes", confirmed(), time.Time{}, kafkaUnwritable, nil, false, false, 503,
			"streaming, but Kafka cannot take walstream's writes: walstream.checkpoints-0: 1 of 3 replicas in sync, fewer than min.insync.replicas 2"},
		{"streaming, a Kafka transaction failed since the last commit", confirmed(), time.Time{}, kafkaOK, flushFailed, true, false, 503,
			"ago and none committed since: flushing Kafka transaction"},
		{"not streaming, Kafka cannot take writes", nil, time.Time{}, kafkaUnwritable, flushFailed, true, false, 503,
			"not streaming: flushing Kafka transaction for checkpoint 0/10: context deadline exceeded; Kafka cannot take walstream's writes: walstream.checkpoints-0"},
		{"standby", nil, now.Add(-time.Second), kafkaOK, errors.New("slot is active for PID 42"), false, true, 200, "standby"},
		{"standby, plain readyz", nil, now.Add(-time.Second), kafkaOK, errors.New("slot is active for PID 42"), false, false, 503, "not streaming: slot is active for PID 42"},
		{"standby, Kafka lost", nil, now.Add(-time.Second), kafkaDown, nil, false, true, 503, "standby, but Kafka does not answer"},
		{"standby, slot attempt too old", nil, now.Add(-11 * time.Second), kafkaOK, nil, false, true, 503, "no standby"},
		{"neither", nil, time.Time{}, kafkaOK, errors.New("connecting to h:5432:\nrefused"), false, true, 503, "not streaming: connecting to h:5432: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Config{StatusInterval: time.Second, CommitTimeout: time.Second, ReadyConfirmAge: time.Minute},
				slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			if tc.tracker != nil {
				p.state.tracker.Store(tc.tracker)
			}
			if !tc.standbyAt.IsZero() {
				p.state.standbyAt.Store(tc.standbyAt.UnixNano())
			}
			if tc.kafka != nil {
				p.state.kafka.Store(tc.kafka)
			}
			if tc.lastErr != nil {
				p.state.setLastErr(tc.lastErr, tc.kafkaFailed)
			}
			target := "/readyz"
			if tc.standby {
				target += "?standby=1"
			}
			w := httptest.NewRecorder()
			p.Readyz(w, httptest.NewRequest("GET", target, nil))
			body := w.Body.String()
			if got, want := w.Code, tc.code; got != want {
				t.Fatalf("%s = %d %q, want %d", target, got, body, want)
			}
			if !strings.Contains(body, tc.body) || strings.Count(body, "\n") != 1 {
				t.Fatalf("%s body %q, want one line with %q", target, body, tc.body)
			}
		})
	}
}

// A peer nobody answers for is named with its address and the reason, for
// "cannot reach Postgres at 127.0.0.1:1: connection refused"; other
// errors are not.
func TestUnreachable(t *testing.T) {
	port := closedPort(t)
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://u@127.0.0.1:%d/db", port))
	if err != nil {
		t.Fatal(err)
	}
	_, pgErr := replication.Connect(context.Background(), cfg)
	_, dialErr := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for _, tc := range []struct {
		name      string
		err       error
		ok        bool
		addr, why string
	}{
		{"postgres", pgErr, true, addr, "connection refused"},
		{"kafka", onKafka(fmt.Errorf("initializing producer id: %w", dialErr)), true, addr, "connection refused"},
		{"unknown host", onKafka(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "kafka.invalid", IsNotFound: true}}), true, "kafka.invalid", "no such host"},
		{"server error", &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}, false, "", ""},
		{"deadline", context.DeadlineExceeded, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, why, ok := unreachable(tc.err)
			if ok != tc.ok || a != tc.addr || why != tc.why {
				t.Fatalf("unreachable(%v) = %q, %q, %v; want %q, %q, %v", tc.err, a, why, ok, tc.addr, tc.why, tc.ok)
			}
		})
	}
	if strings.Contains(pgErr.Error(), "server refused TLS") {
		t.Errorf("the sslmode=prefer fallback's TLS refusal hides the real error: %v", pgErr)
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// The divergences a config accepts hold until a session had a checkpoint
// in Kafka: the sessions of a later Run (a shared fleet's stream given
// back to this process) accept none, and the Pipeline's config keeps them.
func TestAcceptedOnce(t *testing.T) {
	cfg := Config{Stream: "s", AllowSlotAhead: true, Accept: Accept{Phantoms: true, SystemChange: true}}
	p := New(cfg, slog.New(slog.DiscardHandler), nil)
	if s := p.newSession(); !s.cfg.AllowSlotAhead || s.cfg.Accept != cfg.Accept {
		t.Fatalf("a first Run's session accepts %v, %+v; want the config's", s.cfg.AllowSlotAhead, s.cfg.Accept)
	}
	p.settled.Store(true) // as a session that had a checkpoint in Kafka sets it
	if s := p.newSession(); s.cfg.AllowSlotAhead || s.cfg.Accept != (Accept{}) || s.cfg.accepts() {
		t.Fatalf("a later Run's session accepts %v, %+v", s.cfg.AllowSlotAhead, s.cfg.Accept)
	}
	if !p.cfg.AllowSlotAhead || p.cfg.Accept != cfg.Accept {
		t.Error("the Pipeline's config lost what it accepts")
	}
}
