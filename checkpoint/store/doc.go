// Package store reads what Kafka holds of a stream's checkpoints, with
// Kafka clients of its own. The record format and the positions are
// package checkpoint's, which stays pure; writing a checkpoint is the
// producer's (publish), in the transaction of the records it covers; and
// what a start does with what it reads is the pipeline's
// (pipeline/claim.go).
//
// Checkpoints (checkpoint.go) are one stream's: ReadCheckpoint returns
// the last checkpoint committed under its key, the transactional id that
// wrote it and the records under the key in transactions still open (a
// Read). The checkpoint topic is shared by every stream of a cluster, so
// the key is read back from the partition's end and past its last stable
// offset, each record decided by its producer's marker
// (kafka.LastUnderKey): a transaction left open on the partition holds no
// start up. The method is called after the producer's Fence, and creates
// the topic when it is missing; the function ReadCheckpoint changes
// nothing, for operators' commands. CheckpointHistory (history.go) is what
// the compacted topic still holds of the key.
//
// fence.go fences the other transactional ids that wrote the stream's
// checkpoints (FenceOthers: an instance deployed under another name), and
// decides a record left open after the fencing: by its transaction's
// coordinator, asked before the fencing (CoordinatorFate), or by its
// transaction's markers in the other topics it wrote (MarkerFate, through
// kafka.TransactionFate).
//
// After a takeover from Debezium, Lookup (takeover.go) finds the events
// already in Kafka: each topic is read once, read_committed and past its
// last stable offset by markers (kafka.ScanDecided), from the takeover's
// Since, and the records of each event id are counted, Debezium's as the
// most any one of its producer ids wrote and this stream's each, so that a
// record excuses one event at most. Claim takes a record for an event the
// checkpoint already covers (a replay within the stretch); Has does for a
// new one, which is published unless a record is left. An event without
// an id is never looked up.
package store
