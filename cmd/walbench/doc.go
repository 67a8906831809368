// Command walbench is walstream's end-to-end benchmark. It starts a
// throwaway Postgres 15 (or uses -pg-url) and a broker on loopback (Apache
// Kafka, one node, by default; -broker kfake for franz-go's fake broker in
// a process of its own), builds walstream, and measures the scenarios
// -scenarios names:
//
//   - backlog: the ceiling, pg_recvlogical draining a backlog of outbox
//     rows from a pgoutput slot, which is as fast as Postgres can decode
//     and send it; the Go client walstream uses receiving the same
//     (walbench recv); and walstream draining it into Kafka, with its CPU
//     time and peak RSS, and the ratio to the ceiling;
//   - huge: one huge Postgres transaction, drained the same way;
//   - latency: live latency from a row's insert to its read_committed
//     visibility at fixed offered loads, beside Kafka's own latency floor
//     for the same transactions committed by a bare producer (walbench
//     kafka-txn);
//   - foreign: large transactions on a table outside the publication, with
//     streaming of in-progress transactions off and on;
//   - debezium: Debezium's Postgres connector in Kafka Connect as the peer,
//     on the same Postgres and Kafka, one tool at a time;
//   - reemit: a re-emit request beside a live load.
//
// It prints a markdown table and writes every figure as JSON; -pgo writes
// walstream's CPU profile over the measured phases, which becomes
// cmd/walstream/default.pgo. See docs/benchmarks.md for the method and the
// results. It is no part of walstream the program: it runs walstream as a
// process, with the harness (internal/testenv), and imports of walstream
// only what reads its checkpoints (checkpoint, pipeline.StreamName).
package main
