// Package group shares a fleet's streams among its processes: each process
// is a member of a Kafka group of walstream's own protocol type, run by the
// coordinator of the Kafka cluster the streams write to, through the
// classic group protocol Kafka Connect's distributed workers use
// (JoinGroup, SyncGroup, Heartbeat, LeaveGroup). At each generation the
// group's leader decides which member runs which stream (Assign, pure) and
// sends every member the whole decision; a member runs the streams given
// to it (Handler). No lease or lock of walstream's own is involved, and the
// group is no safety: a stream's slot, which one walsender holds at a
// time, and its transactional id keep two processes from streaming it at
// once, so an assignment gone wrong (a zombie, a split group) may delay a
// stream, never duplicate or lose a row.
//
// A Membership (group.go) is one process's: it joins with its Metadata
// (the host it runs on, the streams its config has, those it runs now),
// syncs, as the leader with the assignment it made, and hands each
// generation's Assignment to its Handler, a shared pipeline.Fleet. It
// heartbeats also while it joins again, and keeps its streams through a
// rebalance until the next assignment moves them. When the coordinator no
// longer knows it, or has not answered for most of the session timeout
// (two heartbeats and at least a quarter of it before the end), it hands
// the Handler the zero Assignment, which stops every stream, before the
// coordinator gives them to the others. It leaves the group as its
// process stops.
//
// Assign (assign.go) is the leader's assignor, pure: each stream to
// exactly one member whose config lists it, sticky (a stream stays where
// it runs; a claim of a stream being released yields to that of the member
// given it), then balanced (no member runs two streams more than another
// it can reach by a chain of moves), handing over the fewest running
// streams a balanced assignment can; Metadata and Assignment travel as
// JSON.
// Describe (describe.go) asks the coordinator for the group, for
// walstream status. Running a stream, releasing it, and waiting for its
// slot are the pipeline's (pipeline/fleet.go).
package group
