// Package chaos is walstream's chaos suite. It runs the real walstream
// binary (built with -tags walstream_faults), a real Postgres 15 and Apache
// Kafka 4.x (transaction version 2) as separate processes, with walstream
// reaching Postgres and each broker through toxiproxies on 127.0.0.1 (each
// broker advertises its proxy), under a concurrent load with ground truth.
//
// It runs several streams (-chaos.streams, 4 by default) on one Postgres,
// one Kafka and one checkpoint topic, as a fleet shares a cluster (stream.go):
// each its own database (chaos0, ...), slot (walstream0, ...), outbox and
// ledger, topics (chaos0.outbox.event.<type>, ...) and load, at walstream's
// defaults otherwise, so that its name <database>/<slot> is its checkpoint
// key and walstream-<name> its transactional id. Each stream has a
// walstream process of its own but the last two (-chaos.shared), which
// share one, from a config file's streams: list.
//
// -chaos.fleet=3 (what make chaos and make chaos-cluster run, with
// -chaos.streams=8) runs a fleet instead (fleet.go): three processes of one
// config of every stream, which they share through their fleet's Kafka
// group, each supervised. A fault on a stream acts on whichever process its
// metrics say streams it: killed (also at its crash points), paused past
// the group's session timeout (it must stop its streams and join again)
// and within it, stopped and started again (a leave and a join); and every
// process replaced in turn, as a rollout does. The fleet must settle after
// each: every stream streamed by one process, evenly. The report records how
// long streams took to move. The faults below that hold one stream's
// process, and the recreated outbox, are the other layout's.
//
// Faults on one stream pick it at random: its walstream process killed
// (also at its named crash points), stopped with SIGTERM, paused past its
// transaction timeout, a zombie (streaming, or as it takes its slot); its
// walsender terminated; its outbox table recreated; partitions of its
// outbox, partitioned by time (-chaos.outbox=plain for a plain table),
// attached, filled and dropped.
// The others hit every stream at once: Postgres and the broker restarted,
// the network blackholed, reset and slowed. -chaos.broker=devbroker runs
// the same on the local broker (kfake, cmd/devbroker).
//
// Two faults hold the checkpoint partition every stream shares (hold.go):
// a stream paused mid-commit, its transaction open, past its transaction
// timeout, and another producer's transaction on the checkpoint topic left
// open until its coordinator aborts it (30 to 90 s). Meanwhile the other
// streams must go on: no session may end, each must confirm what its load
// writes every 10 s, /readyz must name each holder, a stream killed right
// after a commit must resume from that commit, and the sampler's checks
// deferred through the hold are judged after it.
//
// -chaos.kafka-nodes=3 runs a cluster of three brokers (replication factor
// 3, min.insync.replicas 2, unclean leader election off) beside two
// controller-only nodes, and plays the cluster's faults instead of the one
// broker's: the transaction coordinator of a stream's transactional id,
// an outbox partition's leader, the checkpoint topic's leader and the
// active controller killed and started again, two brokers down at once
// (walstream must wait, commit nothing and say why in /readyz and
// `walstream status`), one broker cut off from the network.
//
// Each stream's load (load.go) writes outbox rows in transactions of 1 to
// 500 rows, some rolled back, some rolled back to a savepoint, some with
// rows deleted again, and records every committed event id in its ledger
// table in the same transaction. Re-emit requests (reemit.go) are made on
// a stream under the load, some cancelled, and the kill armed with the
// mid-chunk crash point makes one first. The checker (checker.go) reads
// every stream's topics and the checkpoint topic read_committed,
// continuously and at the end (with kcat), and requires of each stream:
// every ledger id exactly once, nothing else, sequence numbers strictly
// increasing per aggregate along its partition, every transaction that fits
// in one Kafka transaction visible whole or not at all once Kafka has
// written its commit markers, and, every 100 ms, the stream's slot
// confirmed neither past the server's WAL end nor past the stream's
// checkpoint committed in Kafka (found in the shared topic by its key); and
// of each re-emit request, every row it selected once, none twice, nothing
// else. After the faults stop, every slot must confirm the end of the load
// within 30 s.
//
// TestChaos runs a short variant (one round of every fault, the pause
// inside the foreign transaction's hold, about three minutes on one node)
// as part of `go test ./...`. `make chaos` and `make chaos-cluster` run
// the long ones:
//
//	go test ./chaos -run TestChaos -timeout 40m -v -args -chaos.duration=10m -chaos.fleet=3 -chaos.streams=8 -chaos.report=chaos-report.json
//	go test ./chaos -run TestChaos -timeout 40m -v -args -chaos.duration=10m -chaos.fleet=3 -chaos.streams=8 -chaos.kafka-nodes=3
//
// A run ends with a summary line and a JSON report (-chaos.report, by
// default in the run's temp dir), both naming the broker, with totals and
// each stream's results. Logs are kept when a run fails.
package chaos
