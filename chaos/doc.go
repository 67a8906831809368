// Package chaos is walstream's chaos suite. It runs the real walstream
// binary (built with -tags walstream_faults), a real Postgres 15 and Apache
// Kafka 4.x (transaction version 2) as separate processes, with walstream
// reaching Postgres and each broker through toxiproxies on 127.0.0.1 (each
// broker advertises its proxy), under a concurrent load with ground truth,
// while walstream is killed (also at its named crash points) and paused
// past its transaction timeout, Postgres and the broker are restarted, the
// network is blackholed, reset and slowed, the walsender is terminated and
// a stopped instance comes back as a zombie, and partitions of the outbox,
// partitioned by time (-chaos.outbox=plain for a plain table), are
// attached, filled and dropped. -chaos.broker=devbroker runs the same on
// the local broker (kfake, cmd/devbroker).
//
// -chaos.kafka-nodes=3 runs a cluster of three brokers (replication factor
// 3, min.insync.replicas 2, unclean leader election off) beside two
// controller-only nodes, and plays the cluster's faults instead of the one
// broker's: the transaction coordinator of walstream's transactional id,
// an outbox partition's leader, the checkpoint topic's leader and the
// active controller killed and started again, two brokers down at once
// (walstream must wait, commit nothing and say why in /readyz and
// `walstream status`), one broker cut off from the network.
//
// The load (load.go) writes outbox rows in transactions of 1 to 500 rows,
// some rolled back, some rolled back to a savepoint, some with rows deleted
// again, and records every committed event id in a ledger table in the same
// transaction. Re-emit requests (reemit.go) are made under the load, some
// cancelled, and the kill armed with the mid-chunk crash point makes one
// first. The checker (checker.go) reads the outbox topics
// read_committed, continuously and at the end (with kcat), and requires:
// every ledger id exactly once, nothing else, sequence numbers strictly
// increasing per aggregate along its partition, every transaction that fits
// in one Kafka transaction visible whole or not at all once Kafka has
// written its commit markers, and, every 100 ms, the slot's
// confirmed_flush_lsn neither past the server's WAL end nor past the
// checkpoint committed in Kafka; and of each re-emit request, every row
// it selected once, none twice, nothing else. After the faults stop, the
// slot must confirm the end of the load within 30 s.
//
// TestChaos runs a short variant (one round of every fault, about two
// minutes on one node) as part of `go test ./...`. `make chaos` and `make
// chaos-cluster` run the long ones:
//
//	go test ./chaos -run TestChaos -timeout 40m -v -args -chaos.duration=10m -chaos.report=chaos-report.json
//	go test ./chaos -run TestChaos -timeout 40m -v -args -chaos.duration=10m -chaos.kafka-nodes=3
//
// A run ends with a summary line and a JSON report (-chaos.report, by
// default in the run's temp dir), both naming the broker. Logs are kept
// when a run fails.
package chaos
