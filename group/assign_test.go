package group

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// streams names streams s01 to s<to>, from from.
func streams(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("s%02d", i))
	}
	return out
}

func TestAssign(t *testing.T) {
	all := streams(1, 12)
	for _, tc := range []struct {
		name    string
		members map[string]Metadata
		// want is each member's number of streams; moved the streams
		// given to another member than the one that ran them.
		want  map[string]int
		moved int
		// keep are streams that must stay where they are, by member.
		keep map[string][]string
	}{
		{name: "first join: 12 streams on 3 members",
			members: map[string]Metadata{"a": {Streams: all}, "b": {Streams: all}, "c": {Streams: all}},
			want:    map[string]int{"a": 4, "b": 4, "c": 4}},
		{name: "balanced stays as it is",
			members: map[string]Metadata{"a": {Streams: all, Owned: streams(1, 4)}, "b": {Streams: all, Owned: streams(5, 8)}, "c": {Streams: all, Owned: streams(9, 12)}},
			want:    map[string]int{"a": 4, "b": 4, "c": 4}, keep: map[string][]string{"a": streams(1, 4), "b": streams(5, 8), "c": streams(9, 12)}},
		{name: "a member left: only its streams move",
			members: map[string]Metadata{"a": {Streams: all, Owned: streams(1, 4)}, "b": {Streams: all, Owned: streams(5, 8)}},
			want:    map[string]int{"a": 6, "b": 6}, keep: map[string][]string{"a": streams(1, 4), "b": streams(5, 8)}},
		{name: "a member joined: it takes its share, and nothing else moves",
			members: map[string]Metadata{"a": {Streams: all, Owned: streams(1, 6)}, "b": {Streams: all, Owned: streams(7, 12)}, "c": {Streams: all}},
			want:    map[string]int{"a": 4, "b": 4, "c": 4}, moved: 4},
		{name: "13 streams on 3 members",
			members: map[string]Metadata{"a": {Streams: streams(1, 13)}, "b": {Streams: streams(1, 13)}, "c": {Streams: streams(1, 13)}},
			want:    map[string]int{"a": 5, "b": 4, "c": 4}},
		{name: "a member whose config lacks a stream is never given it",
			members: map[string]Metadata{"a": {Streams: streams(1, 3)}, "b": {Streams: streams(1, 2), Owned: streams(3, 3)}},
			want:    map[string]int{"a": 2, "b": 1}, moved: 1, keep: map[string][]string{"a": streams(3, 3)}},
		{name: "two members claim one stream: the first keeps it",
			members: map[string]Metadata{"a": {Streams: all, Owned: streams(1, 6)}, "b": {Streams: all, Owned: streams(6, 12)}},
			want:    map[string]int{"a": 6, "b": 6}, moved: 1, keep: map[string][]string{"a": streams(1, 6), "b": streams(7, 12)}},
		{name: "a stream being released stays with the member given it",
			members: map[string]Metadata{"a": {Streams: all, Owned: streams(1, 7), Releasing: streams(7, 7)}, "b": {Streams: all, Owned: streams(7, 12)}},
			want:    map[string]int{"a": 6, "b": 6}, moved: 1, keep: map[string][]string{"a": streams(1, 6), "b": streams(7, 12)}},
		{name: "a stream being released, claimed by none else, stays",
			members: map[string]Metadata{"a": {Streams: all, Owned: streams(1, 6), Releasing: streams(6, 6)}, "b": {Streams: all, Owned: streams(7, 12)}},
			want:    map[string]int{"a": 6, "b": 6}, keep: map[string][]string{"a": streams(1, 6), "b": streams(7, 12)}},
		{name: "a chain of two moves keeps a running stream where it runs",
			members: map[string]Metadata{"a": {Streams: streams(1, 3), Owned: streams(1, 2)}, "b": {Streams: streams(2, 4), Owned: streams(4, 4)}, "c": {Streams: streams(4, 5)}},
			want:    map[string]int{"a": 2, "b": 2, "c": 1}, keep: map[string][]string{"a": streams(1, 2), "b": streams(4, 4)}},
		{name: "the cheapest chains one by one are not the cheapest moves",
			members: map[string]Metadata{
				"m0": {Streams: []string{"s01", "s04", "s05", "s06"}, Owned: []string{"s01", "s04", "s05", "s06"}},
				"m1": {Streams: []string{"s01", "s02", "s05", "s06"}, Owned: []string{"s02"}},
				"m2": {Streams: []string{"s02", "s03"}, Owned: []string{"s03"}},
				"m3": {Streams: []string{"s01", "s06"}},
				"m4": {Streams: []string{"s01"}}},
			want: map[string]int{"m0": 2, "m1": 1, "m2": 1, "m3": 1, "m4": 1}, moved: 2,
			keep: map[string][]string{"m0": {"s04", "s05"}, "m1": {"s02"}, "m2": {"s03"}}},
		{name: "a stream no member lists is given to none",
			members: map[string]Metadata{"a": {Streams: streams(1, 2), Owned: []string{"gone"}}},
			want:    map[string]int{"a": 2}},
		{name: "two fleets in one group: each stream to a member of its own fleet",
			members: map[string]Metadata{"a": {Streams: streams(1, 4)}, "b": {Streams: streams(1, 4)}, "c": {Streams: streams(11, 12)}},
			want:    map[string]int{"a": 2, "b": 2, "c": 2}},
		{name: "a member of no stream",
			members: map[string]Metadata{"a": {Streams: streams(1, 2)}, "b": {}},
			want:    map[string]int{"a": 2, "b": 0}},
		{name: "overlapping configs: the streams of fewer candidates placed first",
			members: map[string]Metadata{"a": {Streams: streams(1, 4)}, "b": {Streams: streams(1, 2)}},
			want:    map[string]int{"a": 2, "b": 2}, keep: map[string][]string{"a": streams(3, 4)}},
		{name: "no member", members: map[string]Metadata{}, want: map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Assign(tc.members)
			owner := make(map[string]string)
			loads := make(map[string]int)
			if ids := slices.Sorted(maps.Keys(tc.members)); len(got) != len(ids) {
				t.Fatalf("Assign gave %d members, want %d: %v", len(got), len(ids), got)
			}
			for i, m := range got {
				if i > 0 && got[i-1].ID >= m.ID {
					t.Errorf("members not in id order: %v", got)
				}
				if !slices.IsSorted(m.Streams) {
					t.Errorf("member %s: streams %v not sorted", m.ID, m.Streams)
				}
				loads[m.ID] = len(m.Streams)
				for _, s := range m.Streams {
					if o, ok := owner[s]; ok {
						t.Errorf("stream %s given to %s and %s", s, o, m.ID)
					}
					owner[s] = m.ID
					if !slices.Contains(tc.members[m.ID].Streams, s) {
						t.Errorf("stream %s given to %s, whose config lacks it", s, m.ID)
					}
				}
			}
			for id, md := range tc.members {
				for _, s := range md.Streams {
					if _, ok := owner[s]; !ok {
						t.Errorf("stream %s (listed by %s) given to none", s, id)
					}
				}
			}
			if !maps.Equal(loads, tc.want) {
				t.Errorf("streams per member %v, want %v\n%v", loads, tc.want, got)
			}
			for id, ss := range tc.keep {
				for _, s := range ss {
					if owner[s] != id {
						t.Errorf("stream %s moved from %s to %s", s, id, owner[s])
					}
				}
			}
			moved := 0
			for id, md := range tc.members {
				for _, s := range md.Owned {
					if o, ok := owner[s]; ok && o != id {
						moved++
					}
				}
			}
			if moved != tc.moved {
				t.Errorf("%d streams moved, want %d", moved, tc.moved)
			}
		})
	}
}

// Assign is sticky over a sequence of joins and leaves: each step moves
// only what must move, and the loads stay within one of each other.
func TestAssignSequence(t *testing.T) {
	all := streams(1, 12)
	members := map[string]Metadata{}
	owned := map[string][]string{}
	step := func(what string, wantMoved int) {
		t.Helper()
		for id, md := range members {
			md.Owned = owned[id]
			members[id] = md
		}
		got := Assign(members)
		moved := 0
		lo, hi := len(all), 0
		next := map[string][]string{}
		for _, m := range got {
			for _, s := range m.Streams {
				if !slices.Contains(owned[m.ID], s) {
					moved++
				}
			}
			next[m.ID] = m.Streams
			lo, hi = min(lo, len(m.Streams)), max(hi, len(m.Streams))
		}
		if moved != wantMoved || hi-lo > 1 {
			t.Errorf("%s: %d streams started anew (want %d), loads from %d to %d", what, moved, wantMoved, lo, hi)
		}
		owned = next
	}
	members["a"] = Metadata{Streams: all}
	step("a alone", 12)
	members["b"] = Metadata{Streams: all}
	step("b joins", 6)
	members["c"] = Metadata{Streams: all}
	step("c joins", 4)
	delete(members, "b")
	delete(owned, "b")
	step("b leaves", 4)
	members["d"] = Metadata{Streams: all}
	step("d joins", 4)
	step("nothing changes", 0)
}

// A large fleet's assignment takes the leader little time: 1,000 streams
// on 100 members, after one joined.
func BenchmarkAssign(b *testing.B) {
	all := streams(1, 1000)
	members := map[string]Metadata{}
	for i := range 99 {
		members[fmt.Sprintf("m%02d", i)] = Metadata{Streams: all}
	}
	for _, m := range Assign(members) {
		md := members[m.ID]
		md.Owned = m.Streams
		members[m.ID] = md
	}
	members["m99"] = Metadata{Streams: all}
	for b.Loop() {
		Assign(members)
	}
}

// Metadata and assignments read back as written, and unknown fields of a
// later version are ignored.
func TestFormat(t *testing.T) {
	md := Metadata{Version: formatVersion, Name: "host-1", Streams: []string{"a", "b"}, Owned: []string{"a"}}
	got, err := decodeMetadata(encode(md))
	if err != nil || !slices.Equal(got.Streams, md.Streams) || !slices.Equal(got.Owned, md.Owned) || got.Name != md.Name {
		t.Fatalf("metadata read back as %+v (%v), want %+v", got, err, md)
	}
	a, err := decodeAssignment([]byte(`{"version":2,"generation":7,"leader":"m1","members":[{"id":"m1","name":"h1","streams":["a"]},{"id":"m2","name":"h2","streams":["b"]}],"later":true}`))
	if err != nil {
		t.Fatal(err)
	}
	a.Self = "m2"
	if o, ok := a.Owner("a"); !ok || o.Name != "h1" || !slices.Equal(a.Mine(), []string{"b"}) || a.Generation != 7 {
		t.Errorf("assignment %+v: owner of a %+v, mine %v", a, o, a.Mine())
	}
	if _, ok := a.Owner("c"); ok {
		t.Error("a stream of no member has an owner")
	}
	if _, err := decodeMetadata([]byte("\x00\x01consumer")); err == nil {
		t.Error("another program's metadata decoded")
	}
	if (Assignment{}).Known() || len((Assignment{}).Mine()) != 0 {
		t.Error("the zero assignment is known or gives streams")
	}
}

// Assign against every assignment of small random fleets: its loads are
// as even as any (the least sum of their squares), and of the assignments
// as even, none keeps more streams where they run. Members list random
// streams, and claim random ones, some listed by none or by several, some
// being released.
func TestAssignOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 3000 {
		members := map[string]Metadata{}
		nm, ns := 1+rng.IntN(5), 1+rng.IntN(7)
		all := streams(1, ns)
		lists, runs := 1+rng.IntN(3), 1+rng.IntN(3) // in 4
		for i := range nm {
			var md Metadata
			for _, s := range all {
				if rng.IntN(4) < lists {
					md.Streams = append(md.Streams, s)
				}
				if rng.IntN(4) < runs {
					md.Owned = append(md.Owned, s)
					if rng.IntN(4) == 0 {
						md.Releasing = append(md.Releasing, s)
					}
				}
			}
			members[fmt.Sprintf("m%d", i)] = md
		}
		got := Assign(members)
		owner := map[string]string{}
		for _, m := range got {
			for _, s := range m.Streams {
				owner[s] = m.ID
			}
		}
		keeper := keepers(members)
		squares, kept := score(got, owner, keeper)
		bestSquares, bestKept := -1, 0
		ids := slices.Sorted(maps.Keys(members))
		var listed []string
		for _, s := range all {
			for _, id := range ids {
				if slices.Contains(members[id].Streams, s) {
					listed = append(listed, s)
					break
				}
			}
		}
		// Every assignment of the listed streams to members that list them.
		var walk func(i int, o map[string]string)
		walk = func(i int, o map[string]string) {
			if i == len(listed) {
				var ms []Member
				for _, id := range ids {
					m := Member{ID: id}
					for _, s := range listed {
						if o[s] == id {
							m.Streams = append(m.Streams, s)
						}
					}
					ms = append(ms, m)
				}
				sq, k := score(ms, o, keeper)
				if bestSquares < 0 || sq < bestSquares || sq == bestSquares && k > bestKept {
					bestSquares, bestKept = sq, k
				}
				return
			}
			for _, id := range ids {
				if slices.Contains(members[id].Streams, listed[i]) {
					o[listed[i]] = id
					walk(i+1, o)
				}
			}
		}
		walk(0, map[string]string{})
		if len(owner) != len(listed) || squares != bestSquares || kept != bestKept {
			t.Errorf("fleet %d %v:\nassigned %v: %d of %d streams, loads' squares %d (best %d), %d kept where they run (best %d)",
				n, members, got, len(owner), len(listed), squares, bestSquares, kept, bestKept)
		}
	}
}

// keepers are, by stream, the member whose claim of it Assign honours:
// the first in id order that lists it and runs it, else the first that
// lists it and releases it.
func keepers(members map[string]Metadata) map[string]string {
	out := map[string]string{}
	for _, releasing := range []bool{false, true} {
		for _, id := range slices.Sorted(maps.Keys(members)) {
			md := members[id]
			for _, s := range md.Owned {
				if _, ok := out[s]; !ok && slices.Contains(md.Releasing, s) == releasing && slices.Contains(md.Streams, s) {
					out[s] = id
				}
			}
		}
	}
	return out
}

// score is an assignment's sum of the loads' squares, and how many
// streams stay with their keeper.
func score(ms []Member, owner, keeper map[string]string) (squares, kept int) {
	for _, m := range ms {
		squares += len(m.Streams) * len(m.Streams)
	}
	for s, k := range keeper {
		if owner[s] == k {
			kept++
		}
	}
	return squares, kept
}
