package chaos

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// aggregateTypes route each stream's events to its topics
// <prefix><type>.
var aggregateTypes = []string{"Order", "Customer", "Invoice"}

// numAggregates is how many aggregates the writers share out: writer w
// owns the aggregates k with k % writers == w, so each aggregate's
// sequence numbers increase in commit order.
const numAggregates = 200

// workMem is logical_decoding_work_mem, which the larger transactions
// exceed so that Postgres spills them to disk while decoding.
const workMem = 64 << 10

// ledgerDDL is the ground truth: every outbox row's event id goes into the
// ledger in the same transaction, so the ledger holds exactly the rows that
// committed. It is not in the publication.
const ledgerDDL = `CREATE TABLE ledger (
	id  uuid PRIMARY KEY,
	tx  text NOT NULL,
	agg text NOT NULL,
	seq bigint NOT NULL)`

// outboxDDL is the file that creates the outbox table: plain, or
// partitioned by time (-chaos.outbox).
func outboxDDL(partitioned bool) string {
	if partitioned {
		return "../testdata/outbox-partitioned.sql"
	}
	return "../testdata/outbox.sql"
}

// createSchema creates the outbox from ddlFile and the ledger.
func createSchema(ctx context.Context, url, ddlFile string) error {
	ddl, err := os.ReadFile(ddlFile)
	if err != nil {
		return fmt.Errorf("reading the outbox DDL: %w", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting to create the schema: %w", err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{string(ddl), ledgerDDL, "CREATE INDEX ON ledger (tx)"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("creating the schema: %w", err)
		}
	}
	return nil
}

// payload is what each outbox row carries, and what the checker reads
// back: its aggregate, its place in the aggregate's sequence, and its
// writer transaction with the number of rows that transaction published.
type payload struct {
	Agg string `json:"agg"`
	Seq int64  `json:"seq"`
	Tx  string `json:"tx"`
	N   int    `json:"n"`
	Pad string `json:"pad,omitempty"`
}

type row struct {
	id, typ, agg string
	seq          int64
	payload      []byte
}

// txPlan is one writer transaction: rows inserted before a savepoint,
// rows rolled back to it, rows after it, ids deleted again before the
// commit (they are still published), or a rollback of everything.
type txPlan struct {
	id                       string
	before, discarded, after []row
	deletes                  []string
	savepoint, rollback      bool
	bytes                    int
}

func (p *txPlan) published() []row { return append(append([]row(nil), p.before...), p.after...) }

// loadStats counts what the writers did.
type loadStats struct {
	TxCommitted       int `json:"tx_committed"`
	TxRolledBack      int `json:"tx_rolled_back"`
	TxSavepoint       int `json:"tx_with_savepoint_rollback"`
	TxWithDeletes     int `json:"tx_with_rows_deleted"`
	TxOverWorkMem     int `json:"tx_over_logical_decoding_work_mem"`
	TxSplit           int `json:"tx_larger_than_a_kafka_transaction"`
	TxAbortedByFault  int `json:"tx_aborted_by_error"`
	TxUnknownResolved int `json:"tx_commit_unknown_resolved"`
	TxUnresolved      int `json:"tx_commit_unresolved"`
	RowsCommitted     int `json:"rows_committed"`
	RowsRolledBack    int `json:"rows_rolled_back"`
	RowsDeletedInTx   int `json:"rows_inserted_and_deleted"`
	Reconnects        int `json:"reconnects"`
}

// add adds o's counts to s.
func (s *loadStats) add(o loadStats) {
	s.TxCommitted += o.TxCommitted
	s.TxRolledBack += o.TxRolledBack
	s.TxSavepoint += o.TxSavepoint
	s.TxWithDeletes += o.TxWithDeletes
	s.TxOverWorkMem += o.TxOverWorkMem
	s.TxSplit += o.TxSplit
	s.TxAbortedByFault += o.TxAbortedByFault
	s.TxUnknownResolved += o.TxUnknownResolved
	s.TxUnresolved += o.TxUnresolved
	s.RowsCommitted += o.RowsCommitted
	s.RowsRolledBack += o.RowsRolledBack
	s.RowsDeletedInTx += o.RowsDeletedInTx
	s.Reconnects += o.Reconnects
}

// load runs the writers and keeps their view of what committed.
type load struct {
	url      string
	writers  int
	rate     float64 // rows per second over all writers; 0 is unpaced
	maxBatch int     // walstream's --max-batch-events, for counting splits
	seed     uint64

	mu         sync.Mutex
	stats      loadStats
	committed  map[string]bool // event ids the writers saw commit
	rolledBack map[string]bool // event ids whose transaction or savepoint rolled back
	unresolved map[string]bool // writer transactions whose commit is unknown
	// failed says why each writer transaction an error ended was taken
	// for not committed, for the cross-check to name.
	failed map[string]string
	errs   []string // harness-level inconsistencies
}

func newLoad(url string, writers int, rate float64, maxBatch int, seed uint64) *load {
	return &load{url: url, writers: writers, rate: rate, maxBatch: maxBatch, seed: seed,
		committed: make(map[string]bool), rolledBack: make(map[string]bool), unresolved: make(map[string]bool), failed: make(map[string]string)}
}

// run runs the writers until ctx ends.
func (l *load) run(ctx context.Context) {
	var wg sync.WaitGroup
	for w := range l.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := &writer{l: l, n: w, rng: mrand.New(mrand.NewPCG(l.seed, uint64(w))), seq: make(map[string]int64)}
			for k := w; k < numAggregates; k += l.writers {
				typ := aggregateTypes[k%len(aggregateTypes)]
				wr.aggs = append(wr.aggs, [2]string{typ, fmt.Sprintf("%s-%03d", typ, k)})
			}
			wr.run(ctx)
		}()
	}
	wg.Wait()
}

func (l *load) snapshot() loadStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// writer is one connection writing transactions one after another.
type writer struct {
	l    *load
	n    int
	rng  *mrand.Rand
	aggs [][2]string // type, id
	seq  map[string]int64
	conn *pgx.Conn
	txN  int
}

func (w *writer) run(ctx context.Context) {
	defer func() {
		if w.conn != nil {
			w.conn.Close(context.Background())
		}
	}()
	perWriter := w.l.rate / float64(w.l.writers)
	next := time.Now()
	for ctx.Err() == nil {
		p := w.plan()
		w.exec(ctx, p)
		if perWriter > 0 {
			next = next.Add(time.Duration(float64(len(p.before)+len(p.discarded)+len(p.after)) / perWriter * float64(time.Second)))
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			} else if d < -5*time.Second {
				next = time.Now() // behind after an outage: do not burst
			}
		}
	}
}

// size draws a transaction size from 1 to 500 rows, mostly small.
func (w *writer) size() int {
	switch r := w.rng.IntN(100); {
	case r < 50:
		return 1 + w.rng.IntN(5)
	case r < 80:
		return 6 + w.rng.IntN(45)
	case r < 95:
		return 51 + w.rng.IntN(150)
	default:
		return 201 + w.rng.IntN(300)
	}
}

// rows draws n rows over the writer's aggregates, each next in its
// aggregate's sequence.
func (w *writer) rows(n int) []row {
	rows := make([]row, n)
	for i := range rows {
		a := w.aggs[w.rng.IntN(len(w.aggs))]
		w.seq[a[1]]++
		rows[i] = row{id: newUUID(), typ: a[0], agg: a[1], seq: w.seq[a[1]]}
	}
	return rows
}

func (w *writer) plan() *txPlan {
	w.txN++
	p := &txPlan{id: fmt.Sprintf("w%d-%06d", w.n, w.txN)}
	n := w.size()
	switch r := w.rng.IntN(100); {
	case r < 10:
		p.rollback = true
		p.before = w.rows(n)
	case r < 15:
		// n rows commit: a before the savepoint, n-a after it.
		p.savepoint = true
		a := w.rng.IntN(n)
		p.before = w.rows(a)
		p.discarded = w.rows(1 + w.rng.IntN(n))
		p.after = w.rows(n - a)
	default:
		p.before = w.rows(n)
	}
	published := p.published()
	if !p.rollback && w.rng.IntN(10) == 0 {
		for _, r := range published {
			if w.rng.IntN(2) == 0 {
				p.deletes = append(p.deletes, r.id)
			}
		}
	}
	// Padding makes some transactions exceed logical_decoding_work_mem.
	pad := strings.Repeat("x", w.rng.IntN(400))
	for _, rows := range [][]row{p.before, p.discarded, p.after} {
		for i := range rows {
			b, _ := json.Marshal(payload{Agg: rows[i].agg, Seq: rows[i].seq, Tx: p.id, N: len(published), Pad: pad})
			rows[i].payload = b
			p.bytes += len(b) + 100
		}
	}
	return p
}

// connect returns the writer's connection, reconnecting until ctx ends.
func (w *writer) connect(ctx context.Context) (*pgx.Conn, error) {
	for w.conn == nil || w.conn.IsClosed() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, w.l.url)
		cancel()
		if err == nil {
			w.conn = conn
			break
		}
		w.l.count(func(s *loadStats) { s.Reconnects++ })
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting writer %d: %w", w.n, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return w.conn, nil
}

func (w *writer) drop() {
	if w.conn != nil {
		w.conn.Close(context.Background())
		w.conn = nil
	}
}

const insertOutbox = `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
	SELECT id::uuid, typ, agg, 'Created', payload::jsonb
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS r(id, typ, agg, payload, ord)
	ORDER BY ord`

const insertLedger = `INSERT INTO ledger (id, tx, agg, seq)
	SELECT id::uuid, $2, agg, seq FROM unnest($1::text[], $3::text[], $4::bigint[]) AS r(id, agg, seq)`

func insert(ctx context.Context, tx pgx.Tx, txID string, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	ids, typs, aggs, payloads, seqs := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		ids[i], typs[i], aggs[i], payloads[i], seqs[i] = r.id, r.typ, r.agg, string(r.payload), r.seq
	}
	if _, err := tx.Exec(ctx, insertOutbox, ids, typs, aggs, payloads); err != nil {
		return fmt.Errorf("inserting %d outbox rows of %s: %w", len(rows), txID, err)
	}
	if _, err := tx.Exec(ctx, insertLedger, ids, txID, aggs, seqs); err != nil {
		return fmt.Errorf("inserting %d ledger rows of %s: %w", len(rows), txID, err)
	}
	return nil
}

// exec runs p and records its outcome. A commit whose outcome is unknown
// (the connection broke during COMMIT) is resolved from the ledger.
func (w *writer) exec(ctx context.Context, p *txPlan) {
	body := func(conn *pgx.Conn) (pgx.Tx, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("beginning %s: %w", p.id, err)
		}
		if err := insert(ctx, tx, p.id, p.before); err != nil {
			return tx, err
		}
		if p.savepoint {
			if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
				return tx, fmt.Errorf("savepoint in %s: %w", p.id, err)
			}
			if err := insert(ctx, tx, p.id, p.discarded); err != nil {
				return tx, err
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
				return tx, fmt.Errorf("rolling back to the savepoint in %s: %w", p.id, err)
			}
			if err := insert(ctx, tx, p.id, p.after); err != nil {
				return tx, err
			}
		}
		if len(p.deletes) > 0 {
			if _, err := tx.Exec(ctx, "DELETE FROM outbox WHERE id = ANY($1::text[]::uuid[])", p.deletes); err != nil {
				return tx, fmt.Errorf("deleting rows in %s: %w", p.id, err)
			}
		}
		return tx, nil
	}
	conn, err := w.connect(ctx)
	if err != nil {
		return // stopping: nothing was written
	}
	tx, err := body(conn)
	published := p.published()
	if err != nil || p.rollback {
		if tx != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if rerr := tx.Rollback(rctx); rerr != nil && err == nil {
				w.drop()
				w.l.fail(p.id, "rolling back", rerr)
			}
			cancel()
		}
		if err != nil {
			w.drop()
			w.l.fail(p.id, "before the commit", err)
		}
		w.l.outcome(p, published, false, err != nil)
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err = tx.Commit(cctx)
	cancel()
	if err == nil {
		w.l.outcome(p, published, true, false)
		return
	}
	w.drop()
	// Only an ERROR refused the commit for sure. A FATAL (a shutdown or a
	// terminated backend) can come after the commit record was written, so
	// that outcome is resolved from the ledger like a broken connection.
	var pgErr *pgconn.PgError
	if (errors.As(err, &pgErr) && pgErr.Severity == "ERROR") || errors.Is(err, pgx.ErrTxCommitRollback) || pgconn.SafeToRetry(err) {
		w.l.fail(p.id, "refused at the commit", err)
		w.l.outcome(p, published, false, true) // the server refused it, or COMMIT was never sent
		return
	}
	committed, ok := w.resolve(context.WithoutCancel(ctx), p.id, len(published))
	if !ok {
		w.l.mu.Lock()
		w.l.stats.TxUnresolved++
		w.l.unresolved[p.id] = true
		w.l.mu.Unlock()
		return
	}
	w.l.count(func(s *loadStats) { s.TxUnknownResolved++ })
	w.l.outcome(p, published, committed, !committed)
}

// resolve finds out from the ledger whether transaction id committed,
// retrying for up to two minutes (Postgres may be restarting).
func (w *writer) resolve(ctx context.Context, id string, n int) (committed, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		conn, err := w.connect(ctx)
		if err != nil {
			return false, false
		}
		var got int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM ledger WHERE tx = $1", id).Scan(&got); err == nil {
			if got != 0 && got != n {
				w.l.mu.Lock()
				w.l.errs = append(w.l.errs, fmt.Sprintf("transaction %s: %d rows in the ledger, want 0 or %d", id, got, n))
				w.l.mu.Unlock()
			}
			return got > 0, true
		}
		w.drop()
	}
}

// fail records why transaction id was taken for not committed.
func (l *load) fail(id, when string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed[id] = fmt.Sprintf("%s: %v", when, err)
}

func (l *load) count(f func(*loadStats)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(&l.stats)
}

// outcome records how p ended.
func (l *load) outcome(p *txPlan, published []row, committed, byFault bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.stats
	for _, r := range p.discarded {
		l.rolledBack[r.id] = true
	}
	s.RowsRolledBack += len(p.discarded)
	if !committed {
		for _, r := range published {
			l.rolledBack[r.id] = true
		}
		s.RowsRolledBack += len(published)
		if byFault {
			s.TxAbortedByFault++
		} else {
			s.TxRolledBack++
		}
		return
	}
	for _, r := range published {
		l.committed[r.id] = true
	}
	s.TxCommitted++
	s.RowsCommitted += len(published)
	s.RowsDeletedInTx += len(p.deletes)
	if p.savepoint {
		s.TxSavepoint++
	}
	if len(p.deletes) > 0 {
		s.TxWithDeletes++
	}
	if p.bytes > workMem {
		s.TxOverWorkMem++
	}
	if len(published) > l.maxBatch {
		s.TxSplit++
	}
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// ledgerRow is one committed outbox row, as the ledger has it.
type ledgerRow struct {
	Tx, Agg string
	Seq     int64
}

// readLedger returns the ground truth: every committed event id.
func readLedger(ctx context.Context, url string) (map[string]ledgerRow, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connecting to read the ledger: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT id::text, tx, agg, seq FROM ledger")
	if err != nil {
		return nil, fmt.Errorf("reading the ledger: %w", err)
	}
	out := make(map[string]ledgerRow)
	for rows.Next() {
		var id string
		var r ledgerRow
		if err := rows.Scan(&id, &r.Tx, &r.Agg, &r.Seq); err != nil {
			return nil, fmt.Errorf("reading the ledger: %w", err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the ledger: %w", err)
	}
	return out, nil
}

// crossCheck compares the writers' view with the ledger: every id a
// writer saw commit is in it, and no rolled-back id is. A mismatch is a
// harness or Postgres problem, not walstream's, but it would make the
// verdict meaningless.
func (l *load) crossCheck(ledger map[string]ledgerRow) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := append([]string(nil), l.errs...)
	missing, extra := 0, 0
	for id := range l.committed {
		if _, ok := ledger[id]; !ok {
			missing++
		}
	}
	for id := range l.rolledBack {
		if _, ok := ledger[id]; ok {
			extra++
		}
	}
	unaccounted := 0
	why := make(map[string]string) // the transactions of unaccounted ids
	for id, r := range ledger {
		if !l.committed[id] && !l.unresolved[r.Tx] {
			unaccounted++
			why[r.Tx] = cmp.Or(l.failed[r.Tx], "rolled back as planned, or not written")
		}
	}
	if missing > 0 {
		errs = append(errs, fmt.Sprintf("%d event ids the writers saw commit are not in the ledger", missing))
	}
	if extra > 0 {
		errs = append(errs, fmt.Sprintf("%d rolled-back event ids are in the ledger", extra))
	}
	if unaccounted > 0 {
		var txs []string
		for _, tx := range slices.Sorted(maps.Keys(why)) {
			txs = append(txs, fmt.Sprintf("%s (%s)", tx, why[tx]))
		}
		errs = append(errs, fmt.Sprintf("%d ledger ids no writer saw commit, of transactions %s", unaccounted, strings.Join(txs, "; ")))
	}
	return errs
}
