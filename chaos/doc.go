// Package chaos is walstream's chaos suite. It runs the real walstream
// binary (built with -tags walstream_faults), a real Postgres 15 and the
// persistent local broker (cmd/devbroker) as separate processes, with
// walstream reaching both through toxiproxies on 127.0.0.1, under a
// concurrent load with ground truth, while walstream is killed (also at its
// named crash points), Postgres and the broker are restarted, the network
// is blackholed, reset and slowed, the walsender is terminated, a
// stopped instance comes back as a zombie, and partitions of the outbox,
// partitioned by time (-chaos.outbox=plain for a plain table), are
// attached, filled and dropped.
//
// The load (load.go) writes outbox rows in transactions of 1 to 500 rows,
// some rolled back, some rolled back to a savepoint, some with rows deleted
// again, and records every committed event id in a ledger table in the same
// transaction. The checker (checker.go) reads the outbox topics
// read_committed, continuously and at the end (with kcat), and requires:
// every ledger id exactly once, nothing else, sequence numbers strictly
// increasing per aggregate along its partition, every transaction that fits
// in one Kafka transaction visible whole or not at all, and, every 100 ms,
// the slot's confirmed_flush_lsn not past the checkpoint committed in Kafka.
// After the faults stop, the slot must confirm the end of the load within
// 30 s.
//
// TestChaos runs a short variant (one round of every fault, about 70 s)
// as part of `go test ./...`. `make chaos` runs the long one:
//
//	go test ./chaos -run TestChaos -timeout 40m -v -args -chaos.duration=10m -chaos.report=chaos-report.json
//
// A run ends with a summary line and a JSON report (-chaos.report, by
// default in the run's temp dir). Logs are kept when a run fails.
package chaos
