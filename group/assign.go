package group

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// formatVersion is the version of Metadata and Assignment as this build
// writes them. A later version adds fields; a reader ignores those it does
// not know, so members of two versions share a group during a rollout.
const formatVersion = 1

// Metadata is what a member tells the group at each join: the host it runs
// on, the streams its config has, which it may be given, and the streams it
// runs now, which the leader leaves where they are when it can.
type Metadata struct {
	Version int      `json:"version"`
	Name    string   `json:"name"`
	Streams []string `json:"streams"`
	Owned   []string `json:"owned"`
}

// Member is one member of an assignment: its member id, the host it runs
// on, and the streams it runs.
type Member struct {
	ID      string   `json:"id"`
	Name    string   `json:"name"`
	Streams []string `json:"streams"`
}

// Assignment is the leader's decision for one generation of the group:
// every member, and the streams each runs. Every member is sent all of
// it, so that each can say who runs the streams it does not. The zero
// Assignment is none: this process is not in the group now.
type Assignment struct {
	Version    int      `json:"version"`
	Generation int32    `json:"generation"`
	Leader     string   `json:"leader"`
	Members    []Member `json:"members"`
	// Self is this process's member id, set on receipt; Lost, in the zero
	// Assignment a process is given when it is no member any more, says
	// why.
	Self string `json:"-"`
	Lost string `json:"-"`
}

// Known reports whether a is an assignment, not the zero one.
func (a Assignment) Known() bool { return a.Self != "" }

// Mine are the streams a gives this process.
func (a Assignment) Mine() []string {
	if m, ok := a.member(a.Self); ok {
		return m.Streams
	}
	return nil
}

// Owner is the member a gives stream to; false when it gives it to none.
func (a Assignment) Owner(stream string) (Member, bool) {
	for _, m := range a.Members {
		if slices.Contains(m.Streams, stream) {
			return m, true
		}
	}
	return Member{}, false
}

func (a Assignment) member(id string) (Member, bool) {
	i := slices.IndexFunc(a.Members, func(m Member) bool { return m.ID == id })
	if i < 0 {
		return Member{}, false
	}
	return a.Members[i], true
}

// encode is the JSON of v; it cannot fail for these types.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encoding %T: %v", v, err))
	}
	return b
}

// decodeMetadata reads a member's metadata. A member whose metadata does
// not decode (another program's, in a group of the same name and protocol)
// is given no stream.
func decodeMetadata(b []byte) (Metadata, error) {
	var md Metadata
	if err := json.Unmarshal(b, &md); err != nil {
		return Metadata{}, fmt.Errorf("decoding a member's metadata: %w", err)
	}
	return md, nil
}

// decodeAssignment reads the leader's assignment.
func decodeAssignment(b []byte) (Assignment, error) {
	var a Assignment
	if err := json.Unmarshal(b, &a); err != nil {
		return Assignment{}, fmt.Errorf("decoding the fleet's assignment: %w", err)
	}
	return a, nil
}

// Assign decides which member runs which stream, from the members'
// metadata by member id. Each stream a member lists goes to exactly one
// member that lists it (a member whose config lacks a stream is never
// given it). It is sticky: a stream stays with the member that runs it,
// when that member lists it and no member sorted before it claims it too
// (after a split of the group, the one of two claimants that keeps it).
// Then the streams nobody runs go, fewest candidates first, to the least
// loaded member that can run them; then, while a member runs two streams
// more than another that can run one of them, one such stream moves.
// With every member listing every stream, the members' loads end within
// one of each other (12 streams on 3 members: 4 each), and only the
// streams that must move do: those of a member that left, or the excess
// of the others when one joins.
func Assign(members map[string]Metadata) []Member {
	ids := slices.Sorted(maps.Keys(members))
	eligible := make(map[string][]string) // stream → the members that list it, in id order
	for _, id := range ids {
		for _, s := range members[id].Streams {
			if !slices.Contains(eligible[s], id) {
				eligible[s] = append(eligible[s], id)
			}
		}
	}
	owner := make(map[string]string) // stream → member
	load := make(map[string]int)
	for _, id := range ids {
		for _, s := range slices.Sorted(slices.Values(members[id].Owned)) {
			if _, taken := owner[s]; !taken && slices.Contains(eligible[s], id) {
				owner[s] = id
				load[id]++
			}
		}
	}
	var free []string
	for s := range eligible {
		if _, ok := owner[s]; !ok {
			free = append(free, s)
		}
	}
	slices.SortFunc(free, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(eligible[a]), len(eligible[b])), cmp.Compare(a, b))
	})
	for _, s := range free {
		best := eligible[s][0]
		for _, id := range eligible[s][1:] {
			if load[id] < load[best] {
				best = id
			}
		}
		owner[s] = best
		load[best]++
	}
	// Each move lowers the sum of the loads' squares, so this ends.
	for balance(ids, owner, load, eligible) {
	}
	out := make([]Member, len(ids))
	for i, id := range ids {
		out[i] = Member{ID: id, Name: members[id].Name, Streams: []string{}}
	}
	for _, s := range slices.Sorted(maps.Keys(owner)) {
		i, _ := slices.BinarySearch(ids, owner[s])
		out[i].Streams = append(out[i].Streams, s)
	}
	return out
}

// balance moves one stream from a member to another that runs at least
// two fewer and can run it, the most loaded giving to the least loaded
// first; false when no stream can move.
func balance(ids []string, owner map[string]string, load map[string]int, eligible map[string][]string) bool {
	byLoad := slices.Clone(ids)
	slices.SortStableFunc(byLoad, func(a, b string) int { return cmp.Compare(load[b], load[a]) })
	streams := slices.Sorted(maps.Keys(owner))
	for _, from := range byLoad {
		for j := len(byLoad) - 1; j >= 0; j-- {
			to := byLoad[j]
			if load[from]-load[to] < 2 {
				break // the others run at least as many as to
			}
			for k := len(streams) - 1; k >= 0; k-- {
				s := streams[k]
				if owner[s] == from && slices.Contains(eligible[s], to) {
					owner[s] = to
					load[from]--
					load[to]++
					return true
				}
			}
		}
	}
	return false
}
