// Package publish writes outbox events to Kafka with a transactional
// producer. Each Kafka transaction carries, besides its events, a
// checkpoint record naming the stream position it completes, so the
// position and the events become visible to read_committed consumers
// together, or not at all. What a record holds is package format's
// (publish/format), the checkpoint's encoding and the session's positions
// package checkpoint's (the producer reports each commit to a tracker it
// keeps no copy of), and reading checkpoints back at a start package
// store's.
//
// The Producer (producer.go) takes transactions from a Queue (queue.go,
// bounded by bytes, so that a slow broker stops WAL from being read
// rather than filling memory) in commit order and batches them into Kafka
// transactions: begin, produce, flush, commit. A commit is settled only
// once its COMMIT marker is read back after its checkpoint record on the
// checkpoint partition (visible, failure.go), and only then told to the
// tracker, which may confirm it to Postgres. It alone decides what to do
// with bad input, met in commit order: stop at the first bad event,
// dead-letter it, or dead-letter the one event an operator named. Each
// event's own partition, when its row names one, is placed by the
// partitioner (partition.go), the others by the murmur2 hash of their key
// as Debezium's are. Within the stretch of a takeover from Debezium it
// looks events up among those already published (store.Lookup) and does
// not publish them again.
//
// Re-emit requests (reemit.go): the producer records the requests and
// cancels a transaction made in the checkpoint that completes it, and
// publishes each chunk of re-emitted rows with the walstream.reemit header
// in the Kafka transaction that moves the request's progress.
//
// What a failed Kafka transaction operation was (failure.go): its cause,
// named in the log and in a metric; a fencing by another producer
// (FencedError) told apart, by asking the transaction coordinator, from
// the coordinator aborting a transaction that outlived its timeout
// (AbortedError); a commit whose marker shows it aborted or undecided
// (InvisibleError).
package publish
