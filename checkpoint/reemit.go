package checkpoint

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
)

// ReemitState is where a re-emit request stands.
type ReemitState string

// The states of a re-emit request. A request is queued when the stream
// meets it, running from its first chunk, and ends done, cancelled or
// failed; requests run one after another, in the order the stream met
// them.
const (
	ReemitQueued    ReemitState = "queued"
	ReemitRunning   ReemitState = "running"
	ReemitDone      ReemitState = "done"
	ReemitCancelled ReemitState = "cancelled"
	ReemitFailed    ReemitState = "failed"
)

// Active reports whether the request is still to run or running.
func (s ReemitState) Active() bool { return s == ReemitQueued || s == ReemitRunning }

// Reemit is a request to publish an outbox table's rows again, and how far
// it got. It is recorded in the checkpoint of the Kafka transaction that
// met it in the stream, and each chunk of rows it publishes moves Last and
// Rows in the checkpoint of the same Kafka transaction as the chunk's
// records: a restart goes on after the last chunk Kafka committed, so each
// row is published once per request.
type Reemit struct {
	// ID names the request in the records it publishes (the
	// walstream.reemit header) and to cancel it.
	ID string `json:"id"`
	// Table is the outbox table (schema.table) and Where the predicate
	// the rows must satisfy, SQL as the requester wrote it; empty: every
	// row.
	Table string `json:"table"`
	Where string `json:"where,omitempty"`
	// Origin says who asked: walstream reemit, or a Debezium signal with
	// its id.
	Origin string `json:"origin"`
	// LSN is the commit LSN of the transaction that made the request.
	LSN   pglogrepl.LSN `json:"-"`
	State ReemitState   `json:"state"`
	// Key names the primary key columns the rows are read in the order of.
	Key []string `json:"key,omitempty"`
	// Upper is the largest key of a matching row when the request started:
	// rows are read up to it, so that a request ends however fast rows are
	// inserted. Nil before the first chunk, or when no row matched.
	Upper []string `json:"upper_key,omitempty"`
	// Last is the key of the last row published; nil before the first.
	Last []string `json:"last_key,omitempty"`
	// Rows counts the rows published; Estimate is the planner's estimate
	// of the matching rows when the request started.
	Rows     int64 `json:"rows"`
	Estimate int64 `json:"estimate,omitempty"`
	// Accepted is when the stream met the request, Started when its first
	// chunk was published, Updated when its last one was, Ended when it
	// ended.
	Accepted time.Time `json:"accepted"`
	Started  time.Time `json:"started,omitzero"`
	Updated  time.Time `json:"updated,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	// Error says why a failed request failed, or was refused.
	Error string `json:"error,omitempty"`
}

// reemitJSON writes LSN in Postgres' text form.
type reemitJSON struct {
	*reemitAlias
	LSN string `json:"lsn"`
}

type reemitAlias Reemit

// MarshalJSON writes the request, its LSN as text.
func (r *Reemit) MarshalJSON() ([]byte, error) {
	return json.Marshal(reemitJSON{reemitAlias: (*reemitAlias)(r), LSN: r.LSN.String()})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *Reemit) UnmarshalJSON(b []byte) error {
	v := reemitJSON{reemitAlias: (*reemitAlias)(r)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	lsn, err := pglogrepl.ParseLSN(v.LSN)
	if err != nil {
		return fmt.Errorf("decoding re-emit request %s lsn %q: %w", r.ID, v.LSN, err)
	}
	r.LSN = lsn
	return nil
}

// Rate is the rows per second the request published from its first chunk
// to its last; zero before two chunks.
func (r *Reemit) Rate() float64 {
	d := r.Updated.Sub(r.Started).Seconds()
	if d <= 0 || r.Rows == 0 {
		return 0
	}
	return float64(r.Rows) / d
}

// Remaining is the estimated number of matching rows not yet published,
// never below zero; -1 while unknown (before the first chunk).
func (r *Reemit) Remaining() int64 {
	switch {
	case !r.State.Active():
		return 0
	case r.State == ReemitQueued:
		return -1
	}
	return max(r.Estimate-r.Rows, 0)
}

// ETA is the estimated time to the end of a running request at its rate so
// far; zero when unknown.
func (r *Reemit) ETA() time.Duration {
	rate, left := r.Rate(), r.Remaining()
	if rate <= 0 || left < 0 {
		return 0
	}
	return time.Duration(float64(left) / rate * float64(time.Second))
}

// KeptReemits is how many ended requests checkpoints keep, the newest, so
// that an operator can see how the last ones ended; active ones are all
// kept.
const KeptReemits = 5

// Reemits is the requests a checkpoint records, in the order the stream
// met them. A producer replaces it whole on each change, never changing a
// Reemit in place, so that a checkpoint handed to another goroutine stays
// as it was.
type Reemits []Reemit

// Find returns the index of the request with the id, or -1.
func (rs Reemits) Find(id string) int {
	return slices.IndexFunc(rs, func(r Reemit) bool { return r.ID == id })
}

// Next returns the index of the request to run now: the running one or
// else the first queued; -1 when none is active.
func (rs Reemits) Next() int {
	if i := slices.IndexFunc(rs, func(r Reemit) bool { return r.State == ReemitRunning }); i >= 0 {
		return i
	}
	return slices.IndexFunc(rs, func(r Reemit) bool { return r.State == ReemitQueued })
}

// Active counts the requests queued or running.
func (rs Reemits) Active() int {
	n := 0
	for _, r := range rs {
		if r.State.Active() {
			n++
		}
	}
	return n
}

// With returns the requests with r set in place of the request with its
// id, or added after the others, dropping ended requests beyond the
// newest KeptReemits.
func (rs Reemits) With(r Reemit) Reemits {
	out := slices.Clone(rs)
	if i := out.Find(r.ID); i >= 0 {
		out[i] = r
	} else {
		out = append(out, r)
	}
	ended := 0
	for i := len(out) - 1; i >= 0; i-- {
		if out[i].State.Active() {
			continue
		}
		if ended++; ended > KeptReemits {
			out = slices.Delete(out, i, i+1)
		}
	}
	return out
}
