package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/replication"
)

// ReemitRequest is what an operator asks to publish again: the rows of one
// outbox table that satisfy Where, have one of IDs as their event id, and
// whose primary key lies from FromKey to ToKey (each bound optional; a
// key's columns' text, in key order). Empty fields select everything.
type ReemitRequest struct {
	Table          string
	Where          string
	IDs            []string
	FromKey, ToKey []string
}

// ReemitAccepted is a request written to the WAL: its id, the predicate
// it reads rows with, the planner's estimate of them, and where the
// request is in the WAL.
type ReemitAccepted struct {
	ID       string
	Where    string
	Estimate int64
	LSN      pglogrepl.LSN
	// Checkpoint is the stream's checkpoint when found, where the request
	// will be recorded once the stream meets it.
	Checkpoint *checkpoint.Checkpoint
}

// RequestReemit checks a re-emit request and, unless dryRun, writes it to
// the WAL as a transactional logical decoding message, which the stream
// meets in commit order. It refuses, with the reason, a table the stream
// does not publish (not one of its outbox tables, not in its publication,
// absent from its checkpoint), a table without a primary key, and a
// predicate that is not one expression or that Postgres cannot plan.
func RequestReemit(ctx context.Context, cfg Config, req ReemitRequest, dryRun bool) (*ReemitAccepted, error) {
	i := slices.IndexFunc(cfg.Outboxes, func(o *decode.Outbox) bool { return o.Name() == req.Table })
	if i < 0 {
		return nil, fmt.Errorf("table %s is not an outbox table of stream %s (%s)", req.Table, cfg.Stream, outboxList(cfg.Outboxes))
	}
	o := cfg.Outboxes[i]
	t, err := replication.ParseTable(req.Table)
	if err != nil {
		return nil, err
	}
	if err := decode.CheckPredicate(req.Where); err != nil {
		return nil, fmt.Errorf("the predicate: %w", err)
	}
	conn, err := replication.ConnectReader(ctx, cfg.Postgres)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The key's columns, which a range names, come with the table.
	rt, err := replication.DescribeReemit(ctx, conn, cfg.Names, t, req.Where)
	if err != nil {
		return nil, err
	}
	where, err := reemitPredicate(req, o, rt.Key)
	if err != nil {
		return nil, err
	}
	if err := decode.CheckPredicate(where); err != nil {
		return nil, fmt.Errorf("the predicate: %w", err)
	}
	if rt, err = replication.DescribeReemit(ctx, conn, cfg.Names, t, where); err != nil {
		return nil, err
	}
	a := &ReemitAccepted{ID: newReemitID(), Where: where}
	if a.Estimate, err = rt.Estimate(ctx, conn); err != nil {
		return nil, err
	}
	cp, _, found, _, err := findCheckpoint(ctx, &cfg, "")
	if err != nil {
		return nil, fmt.Errorf("reading the stream's checkpoint, to check that it publishes %s: %w", req.Table, err)
	}
	if found {
		if n := cp.Notes; n != nil && len(n.Tables) > 0 && n.Tables[req.Table] == 0 {
			return nil, fmt.Errorf("the checkpoint of stream %s records the tables %s, not %s: the stream does not publish it",
				cfg.Stream, strings.Join(slices.Sorted(maps.Keys(n.Tables)), ", "), req.Table)
		}
		a.Checkpoint = &cp
	}
	if dryRun {
		return a, nil
	}
	msg := decode.Request{Action: decode.ActionReemit, ID: a.ID, Stream: cfg.Stream, Table: req.Table, Where: where, Origin: decode.OriginCLI}
	if a.LSN, err = emit(ctx, conn, msg); err != nil {
		return nil, err
	}
	return a, nil
}

// CancelReemit writes the cancel of request id to the WAL; the stream
// ends the request where it meets the cancel, in commit order. A request
// the checkpoint records as ended is refused; one it does not record yet
// (just requested) is cancelled when the stream meets it, before the
// cancel.
func CancelReemit(ctx context.Context, cfg Config, id string) (lsn pglogrepl.LSN, known bool, err error) {
	cp, _, found, _, err := findCheckpoint(ctx, &cfg, "")
	if err != nil {
		return 0, false, fmt.Errorf("reading the stream's checkpoint: %w", err)
	}
	if found {
		rs := reemitsOf(cp)
		if i := rs.Find(id); i >= 0 {
			if !rs[i].State.Active() {
				return 0, true, fmt.Errorf("re-emit request %s already ended: %s", id, rs[i].State)
			}
			known = true
		}
	}
	conn, err := replication.Connect(ctx, cfg.Postgres)
	if err != nil {
		return 0, known, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lsn, err = emit(ctx, conn, decode.Request{Action: decode.ActionCancel, ID: id, Stream: cfg.Stream, Origin: decode.OriginCLI})
	return lsn, known, err
}

// ListReemits returns the re-emit requests the stream's checkpoint
// records; found is false when Kafka holds no checkpoint of it.
func ListReemits(ctx context.Context, cfg Config) (reports []ReemitReport, found bool, err error) {
	cp, _, found, _, err := findCheckpoint(ctx, &cfg, "")
	if err != nil {
		return nil, false, fmt.Errorf("reading the stream's checkpoint: %w", err)
	}
	return ReemitReports(cp), found, nil
}

// emit writes a request as a transactional logical decoding message, in
// a transaction of its own.
func emit(ctx context.Context, conn *pgx.Conn, r decode.Request) (pglogrepl.LSN, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	var lsn pglogrepl.LSN
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
		var text string
		if err := tx.QueryRow(ctx, "SELECT pg_logical_emit_message(true, $1, $2::text)::text", decode.ControlPrefix, string(b)).Scan(&text); err != nil {
			return err
		}
		lsn, err = pglogrepl.ParseLSN(text)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("writing the %s request to the WAL (pg_logical_emit_message): %w", r.Action, err)
	}
	return lsn, nil
}

// reemitPredicate joins the parts of a request into one predicate: the
// event ids as literals of the id column, the key range as row
// comparisons of the key's columns.
func reemitPredicate(req ReemitRequest, o *decode.Outbox, key []string) (string, error) {
	parts := []string{req.Where}
	if len(req.IDs) > 0 {
		lits := make([]string, len(req.IDs))
		for i, id := range req.IDs {
			lits[i] = literal(id)
		}
		parts = append(parts, fmt.Sprintf("%s IN (%s)", pgx.Identifier{o.Columns.ID}.Sanitize(), strings.Join(lits, ", ")))
	}
	cols := make([]string, len(key))
	for i, k := range key {
		cols[i] = pgx.Identifier{k}.Sanitize()
	}
	for _, b := range []struct {
		op  string
		key []string
	}{{">=", req.FromKey}, {"<=", req.ToKey}} {
		if b.key == nil {
			continue
		}
		if len(b.key) != len(key) {
			return "", fmt.Errorf("the key range gives %d values; the primary key of %s has %d columns (%s)", len(b.key), req.Table, len(key), strings.Join(key, ", "))
		}
		lits := make([]string, len(b.key))
		for i, v := range b.key {
			lits[i] = literal(v)
		}
		parts = append(parts, fmt.Sprintf("(%s) %s (%s)", strings.Join(cols, ", "), b.op, strings.Join(lits, ", ")))
	}
	return decode.And(parts...), nil
}

// literal quotes s as an SQL string literal, its type left to Postgres.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// newReemitID is a request id: r- and eight random hex digits, short to
// type and unique among a stream's requests.
func newReemitID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "r-" + hex.EncodeToString(b[:])
}

func outboxList(outboxes []*decode.Outbox) string {
	names := make([]string, len(outboxes))
	for i, o := range outboxes {
		names[i] = o.Name()
	}
	return strings.Join(names, ", ")
}
