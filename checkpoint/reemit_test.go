package checkpoint

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A re-emit request and its progress round-trip in the checkpoint record,
// its LSN as text, and a record without requests decodes without them.
func TestEncodeDecodeReemits(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
	r := Reemit{ID: "r-1a2b3c4d", Table: "public.outbox", Where: "aggregatetype = 'Order'", Origin: "walstream reemit", LSN: 0x16B3748,
		State: ReemitRunning, Key: []string{"id"}, Upper: []string{"ff"}, Last: []string{"7a"}, Rows: 2048, Estimate: 5000,
		Accepted: now, Started: now.Add(time.Second), Updated: now.Add(3 * time.Second)}
	cp := Checkpoint{LSN: 0x16B3800, Notes: &Notes{Reemits: Reemits{r}}}
	b := cp.Encode(Owner{Slot: "walstream"}, now)
	for _, want := range []string{`"reemits":[{"id":"r-1a2b3c4d","table":"public.outbox","where":"aggregatetype = 'Order'"`,
		`"lsn":"0/16B3748"`, `"last_key":["7a"]`, `"rows":2048`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("record %s lacks %s", b, want)
		}
	}
	if strings.Contains(string(b), `"ended"`) {
		t.Errorf("record %s writes a zero end time", b)
	}
	got, _, err := Decode(b)
	if err != nil || got.Notes == nil || len(got.Notes.Reemits) != 1 {
		t.Fatalf("round trip of %s = %+v, %v", b, got, err)
	}
	g := got.Notes.Reemits[0]
	if g.LSN != r.LSN || !g.Accepted.Equal(r.Accepted) || !g.Updated.Equal(r.Updated) {
		t.Fatalf("round trip = %+v, want %+v", g, r)
	}
	g.Accepted, g.Started, g.Updated = r.Accepted, r.Started, r.Updated
	if !reflect.DeepEqual(g, r) {
		t.Fatalf("round trip = %+v, want %+v", g, r)
	}
	if _, _, err := Decode([]byte(`{"lsn":"0/1","reemits":[{"id":"x","lsn":"nope"}]}`)); err == nil {
		t.Error("a request with a bad LSN decoded")
	}
}

// Rate, remaining rows and ETA follow the progress a request recorded.
func TestReemitProgress(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Reemit{State: ReemitRunning, Rows: 1000, Estimate: 3000, Started: start, Updated: start.Add(2 * time.Second)}
	if got := r.Rate(); got != 500 {
		t.Errorf("Rate = %v, want 500", got)
	}
	if got := r.Remaining(); got != 2000 {
		t.Errorf("Remaining = %d, want 2000", got)
	}
	if got := r.ETA(); got != 4*time.Second {
		t.Errorf("ETA = %s, want 4s", got)
	}
	r.Rows = 4000 // the estimate was low
	if got := r.Remaining(); got != 0 {
		t.Errorf("Remaining past the estimate = %d, want 0", got)
	}
	if q := (Reemit{State: ReemitQueued}); q.Remaining() != -1 || q.ETA() != 0 || q.Rate() != 0 {
		t.Errorf("queued request: remaining %d, ETA %s, rate %v", q.Remaining(), q.ETA(), q.Rate())
	}
}

// With replaces a request by id or adds it, and keeps only the newest
// KeptReemits ended requests, every active one, without changing the
// slice it was called on.
func TestReemitsWith(t *testing.T) {
	var rs Reemits
	for i := range KeptReemits + 3 {
		rs = rs.With(Reemit{ID: fmt.Sprint(i), State: ReemitDone})
	}
	rs = rs.With(Reemit{ID: "active", State: ReemitQueued})
	before := rs
	rs = rs.With(Reemit{ID: "late", State: ReemitCancelled})
	if got, want := len(rs), KeptReemits+1; got != want {
		t.Fatalf("%d requests kept, want %d: %+v", got, want, rs)
	}
	if rs.Find("active") < 0 || rs.Find("late") < 0 || rs.Find("3") >= 0 || rs.Find("4") < 0 {
		t.Errorf("kept %+v", rs)
	}
	if before.Find("3") < 0 {
		t.Error("With changed the slice it was called on")
	}
	rs = rs.With(Reemit{ID: "active", State: ReemitRunning})
	if i := rs.Next(); i < 0 || rs[i].ID != "active" || rs.Active() != 1 {
		t.Errorf("Next = %d, Active = %d in %+v", i, rs.Active(), rs)
	}
}
