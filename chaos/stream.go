package chaos

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// stream is one outbox walstream streams to Kafka: a database of the one
// Postgres cluster with its outbox, ledger and slot, its own topics, its
// load and its share of the checks. The streams share Postgres, Kafka,
// the proxies in front of them and the checkpoint topic, as the streams of
// a fleet share a cluster.
//
// Each stream runs at walstream's defaults but for its database, slot and
// topics, so its name (<database>/<slot>) is its checkpoint key and
// walstream-<name> its transactional id.
type stream struct {
	name  string // <database>/<slot>
	db    string
	slot  string // slots belong to the server: each stream its own
	txnID string
	// prefix starts the stream's topic names: <prefix><aggregate type>.
	prefix string
	url    string // direct, the harness's
	wsURL  string // through the Postgres proxy, walstream's
	// sup is the supervisor of the stream's process; in a fleet
	// (-chaos.fleet), sups are those of every process of the fleet, any of
	// which may stream it, and sup is the first.
	sup  *supervisor
	sups []*supervisor
	load *load
	atom *atomicity
	cp   *cpCheck // owned by the sampler, under its lock
	// gap are the event ids committed to a recreated outbox table before
	// it was in the publication (guarded by the faults' lock).
	gap map[string]bool
	// reemits are the re-emit requests made on the stream, which the
	// checker judges.
	reemits reemits
}

// newStreams names n streams, chaos0/walstream0 and on, of the cluster on
// pgAddr (direct) and proxyAddr (walstream's way to it).
func newStreams(n int, pgAddr, proxyAddr string) []*stream {
	var ss []*stream
	for i := range n {
		db, slot := fmt.Sprintf("chaos%d", i), fmt.Sprintf("walstream%d", i)
		name := db + "/" + slot
		ss = append(ss, &stream{name: name, db: db, slot: slot, txnID: "walstream-" + name, prefix: db + ".outbox.event.",
			url: pgURL(pgAddr, db), wsURL: pgURL(proxyAddr, db), cp: &cpCheck{}, gap: make(map[string]bool)})
	}
	return ss
}

func pgURL(addr, db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", addr, db)
}

// proc is the walstream process that streams st now: its process, or in a
// fleet the one whose metrics last said it streams st; nil when none does.
func (st *stream) proc() *wsProc {
	if len(st.sups) == 1 {
		return st.sup.current()
	}
	for _, s := range st.sups {
		if p := s.current(); p != nil && p.streams(st.name) {
			return p
		}
	}
	return nil
}

// lines returns re's submatches in the lines about st of every process
// that ran it.
func (st *stream) lines(re *regexp.Regexp) [][]string {
	var out [][]string
	for _, s := range st.sups {
		out = append(out, s.lines(re, st)...)
	}
	return out
}

// processLines returns re's submatches in every line of every process that
// ran st, whichever of its streams the line is about: what a process logs
// once for all of its streams (a hold of the checkpoint topic) is logged
// by whichever stream saw it first.
func (st *stream) processLines(re *regexp.Regexp) [][]string {
	var out [][]string
	for _, s := range st.sups {
		out = append(out, s.lines(re, nil)...)
	}
	return out
}

// sessionRestarts counts st's session restarts in every process that ran
// it, by peer.
func (st *stream) sessionRestarts() map[string]int {
	n := make(map[string]int)
	for _, m := range st.lines(reSessionEnds) {
		n[m[1]]++
	}
	return n
}

// process names what runs st: its process's streams, or its fleet.
func (st *stream) process() string {
	if len(st.sups) == 1 {
		return st.sup.String()
	}
	return fmt.Sprintf("a fleet of %d processes", len(st.sups))
}

// args are walstream's settings of the stream.
func (st *stream) args() []string {
	return []string{"--pg-url", st.wsURL, "--slot", st.slot, "--topic-template", st.prefix + "${routedByValue}"}
}

// topics are the stream's outbox topics.
func (st *stream) topics() []string {
	var ts []string
	for _, typ := range aggregateTypes {
		ts = append(ts, st.prefix+typ)
	}
	return ts
}

// owns reports whether topic is one of the stream's.
func (st *stream) owns(topic string) bool { return strings.HasPrefix(topic, st.prefix) }

// outboxTopics are the outbox topics of every stream.
func outboxTopics(ss []*stream) []string {
	var ts []string
	for _, st := range ss {
		ts = append(ts, st.topics()...)
	}
	return ts
}

// create creates the stream's database, and in it the outbox from ddlFile
// and the ledger; admin is the cluster's postgres database.
func (st *stream) create(ctx context.Context, admin, ddlFile string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("connecting to create database %s: %w", st.db, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+st.db); err != nil {
		return fmt.Errorf("creating database %s: %w", st.db, err)
	}
	return createSchema(ctx, st.url, ddlFile)
}
