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
// runs now, which the leader leaves where they are when it can. Releasing
// are those of Owned it is releasing, given to another member by the last
// assignment: the leader leaves them with that member if it claims them
// (a member of an earlier build sends none).
type Metadata struct {
	Version   int      `json:"version"`
	Name      string   `json:"name"`
	Streams   []string `json:"streams"`
	Owned     []string `json:"owned"`
	Releasing []string `json:"releasing,omitempty"`
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
// (after a split of the group, the one of two claimants that keeps it); a
// member's claim of a stream it is releasing yields to another's. Then
// the streams nobody runs go, fewest candidates first, to the least
// loaded member that can run them; then, while a member runs two streams
// more than another it can reach, a chain of moves evens the two (see
// rebalance), and last, moves that keep the loads hand over fewer streams
// (improve). With every member listing every stream, the members' loads
// end within one of each other (12 streams on 3 members: 4 each), and
// only the streams that must move do: those of a member that left, or the
// excess of the others when one joins.
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
	a := assignment{
		owner:    make(map[string]string),
		running:  make(map[string]string),
		load:     make(map[string]int),
		eligible: eligible,
	}
	for _, id := range ids {
		a.load[id] = 0
	}
	// Claims of streams a member runs first, then of those it releases.
	for _, releasing := range []bool{false, true} {
		for _, id := range ids {
			for _, s := range slices.Sorted(slices.Values(members[id].Owned)) {
				if slices.Contains(members[id].Releasing, s) != releasing {
					continue
				}
				if _, taken := a.owner[s]; !taken && slices.Contains(eligible[s], id) {
					a.owner[s], a.running[s] = id, id
					a.load[id]++
				}
			}
		}
	}
	var free []string
	for s := range eligible {
		if _, ok := a.owner[s]; !ok {
			free = append(free, s)
		}
	}
	slices.SortFunc(free, func(x, y string) int {
		return cmp.Or(cmp.Compare(len(eligible[x]), len(eligible[y])), cmp.Compare(x, y))
	})
	for _, s := range free {
		best := eligible[s][0]
		for _, id := range eligible[s][1:] {
			if a.load[id] < a.load[best] {
				best = id
			}
		}
		a.owner[s] = best
		a.load[best]++
	}
	// Each chain lowers the sum of the loads' squares, so this ends.
	for a.rebalance(ids) {
	}
	// Each improvement hands over one stream fewer, so this ends.
	for a.improve(ids) {
	}
	out := make([]Member, len(ids))
	for i, id := range ids {
		out[i] = Member{ID: id, Name: members[id].Name, Streams: []string{}}
	}
	for _, s := range slices.Sorted(maps.Keys(a.owner)) {
		i, _ := slices.BinarySearch(ids, a.owner[s])
		out[i].Streams = append(out[i].Streams, s)
	}
	return out
}

// assignment is Assign's work in progress.
type assignment struct {
	owner   map[string]string // stream → the member given it
	running map[string]string // stream → the member that runs it and keeps it, if one does
	load    map[string]int    // member → its streams
	// eligible are, by stream, the members that list it, in id order.
	eligible map[string][]string
}

// link is the last move of the cheapest chain found to a member: stream,
// moved from member from.
type link struct{ from, stream string }

// rebalance evens a member that runs at least two streams more than
// another: along a chain of members, each gives one stream to the next,
// which lists it, so that only the ends' loads change. Of the chains from
// the most loaded members, the one taken moves the fewest streams away
// from the member running them (a stream placed by this assignment moves
// for free), then ends at the least loaded member, so that a chain of
// free moves is preferred to a hand-over. False when no chain is left.
func (a *assignment) rebalance(ids []string) bool {
	byOwner := make(map[string][]string)
	for _, s := range slices.Sorted(maps.Keys(a.owner)) {
		byOwner[a.owner[s]] = append(byOwner[a.owner[s]], s)
	}
	levels := slices.Compact(slices.SortedFunc(maps.Values(a.load), func(x, y int) int { return cmp.Compare(y, x) }))
	for _, top := range levels {
		if top-2 < levels[len(levels)-1] {
			break // no member runs two fewer
		}
		var best struct {
			cost, load int
			src, dst   string
			prev       map[string]link
		}
		best.cost = -1
		for _, src := range ids {
			if a.load[src] != top {
				continue
			}
			cost, prev := a.chains(src, ids, byOwner, func(id string) bool { return a.load[id] <= top-2 })
			for _, dst := range ids {
				c, ok := cost[dst]
				if !ok || a.load[dst] > top-2 {
					continue
				}
				if best.cost < 0 || c < best.cost || c == best.cost && a.load[dst] < best.load {
					best.cost, best.load, best.src, best.dst, best.prev = c, a.load[dst], src, dst, prev
				}
			}
		}
		if best.cost < 0 {
			continue
		}
		for at := best.dst; at != best.src; {
			l := best.prev[at]
			a.owner[l.stream] = at
			at = l.from
		}
		a.load[best.src]--
		a.load[best.dst]++
		return true
	}
	return false
}

// chains finds the cheapest chains of moves from src (Dijkstra's, members
// as nodes): cost by member reached, and the last move of each chain. It
// stops once every chain as cheap as the cheapest to a member dst accepts
// is found; the costs of members reached then are upper bounds, exact for
// those dst accepts at the least cost.
func (a *assignment) chains(src string, ids []string, byOwner map[string][]string, dst func(string) bool) (map[string]int, map[string]link) {
	cost := map[string]int{src: 0}
	prev := make(map[string]link)
	done := make(map[string]bool)
	found := -1 // the least cost of a chain to a member dst accepts
	for {
		at := ""
		for _, id := range ids {
			if c, ok := cost[id]; ok && !done[id] && (at == "" || c < cost[at]) {
				at = id
			}
		}
		if at == "" || found >= 0 && cost[at] > found {
			return cost, prev
		}
		done[at] = true
		for _, s := range byOwner[at] {
			step := 0
			if a.running[s] == at {
				step = 1 // a hand-over
			}
			for _, to := range a.eligible[s] {
				if c, ok := cost[to]; to != at && (!ok || cost[at]+step < c) {
					cost[to] = cost[at] + step
					prev[to] = link{from: at, stream: s}
					if dst(to) && (found < 0 || cost[to] < found) {
						found = cost[to]
					}
				}
			}
		}
	}
}

// improve hands over fewer streams for the same loads, once balanced: the
// chains rebalance takes, each the cheapest then, may together hand over
// more than needed. It looks for a cycle of moves, members as nodes, whose
// moves leave fewer streams away from the members running them (Bellman
// and Ford's search for a negative cycle): each member on it gives one
// stream to the next, so no load changes; or the same along a path from a
// member to one that runs one stream fewer, which then swap loads (an edge
// of cost zero back closes it into a cycle). It moves the streams of the
// first such cycle found; false when there is none.
func (a *assignment) improve(ids []string) bool {
	n := len(ids)
	at := make(map[string]int, n)
	for i, id := range ids {
		at[id] = i
	}
	// away is 1 when stream s given to member m is away from the member
	// running it.
	away := func(s, m string) int {
		if k := a.running[s]; k != "" && k != m {
			return 1
		}
		return 0
	}
	type edge struct {
		ok     bool
		cost   int
		stream string // empty: the edge back of a swap, no move
	}
	edges := make([][]edge, n) // from, to → the cheapest move
	for i := range edges {
		edges[i] = make([]edge, n)
	}
	for _, s := range slices.Sorted(maps.Keys(a.owner)) {
		from := a.owner[s]
		for _, to := range a.eligible[s] {
			if to == from {
				continue
			}
			c := away(s, to) - away(s, from)
			if e := edges[at[from]][at[to]]; !e.ok || c < e.cost {
				edges[at[from]][at[to]] = edge{ok: true, cost: c, stream: s}
			}
		}
	}
	for i, x := range ids {
		for j, y := range ids {
			if !edges[i][j].ok && a.load[y] == a.load[x]+1 {
				edges[i][j] = edge{ok: true} // y gives x its extra load back
			}
		}
	}
	// Bellman-Ford from a source linked to every member at cost zero.
	dist := make([]int, n)
	pred := make([]int, n)
	for i := range pred {
		pred[i] = -1
	}
	last := -1
	for range n {
		last = -1
		for i := range n {
			for j, e := range edges[i] {
				if e.ok && dist[i]+e.cost < dist[j] {
					dist[j], pred[j], last = dist[i]+e.cost, i, j
				}
			}
		}
		if last < 0 {
			return false
		}
	}
	if last < 0 {
		return false // no member
	}
	// A member relaxed at the n-th round is on a negative cycle, or
	// downstream of one: n steps back is on it.
	for range n {
		last = pred[last]
	}
	cycle := []int{last}
	for v := pred[last]; v != last; v = pred[v] {
		cycle = append(cycle, v)
	}
	// cycle lists the members backwards: pred[cycle[k]] is cycle[k+1].
	for k, to := range cycle {
		from := cycle[(k+1)%len(cycle)]
		e := edges[from][to]
		if e.stream == "" {
			continue
		}
		a.owner[e.stream] = ids[to]
		a.load[ids[from]]--
		a.load[ids[to]]++
	}
	return true
}
