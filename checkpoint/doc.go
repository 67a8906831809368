// Package checkpoint owns walstream's positions: what is durable in Kafka,
// what may be confirmed to Postgres, and which replayed events to skip. It
// does no I/O: Kafka's copy of a stream's checkpoints is read by package
// store (checkpoint/store), and written by the producer (publish) in the
// Kafka transaction of the records it covers.
//
// A Postgres transaction is identified by the LSN of its commit record
// (Begin.FinalLSN == Commit.CommitLSN), which is known at BEGIN, before the
// transaction ends. That lets a transaction too large for one Kafka
// transaction be published in parts, each part's checkpoint naming the
// transaction and the ordinal of its last published event. Checkpoints are
// (commit LSN, ordinal), never a row's LSN: rows of one multi-row INSERT
// share an LSN.
//
// A Checkpoint is the position and its record format (Encode, EncodeIn,
// Decode, which keeps reading what earlier versions wrote). Besides the
// position a record names the stream that wrote it (Owner), the server
// history its LSNs belong to (Identity), the events published so far
// (Events), the last gap an operator accepted (Gap), the last transaction
// published (Last: its xid, commit LSN and time), and the topics its
// Kafka transaction wrote (EncodeIn, Wrote), by whose markers a record
// left open is decided. Its Notes carry what the next session and
// operators need: the outbox tables' OIDs, the event an operator skipped
// by name (Skip), a takeover from Debezium (Takeover: where the offset
// came from and the stretch of WAL whose events may be in Kafka already),
// and the re-emit requests the stream met with their progress (Reemits,
// reemit.go). EventsPast (history.go) counts the events a key's history
// published past a fork.
//
// A Tracker is the one owner of a session's positions: where it resumed,
// what it received, what Kafka committed and what was confirmed to
// Postgres. The producer, the feed and the replication loop ask it from
// their goroutines rather than keep copies. Confirm never passes what
// Kafka committed nor the server's WAL end, never moves backwards, and
// confirms nothing new while Kafka has not committed past a takeover's
// stretch, nor before the replay of the checkpoint's stretch from the
// slot showed the server's history to be the one published (replay.go:
// the last transaction comes again as it was, and no transaction with
// events lies between it and the checkpoint; otherwise a ReplayError).
package checkpoint
