// Package diff compares two sets of Kafka topics event by event, for
// walstream diff: Debezium's topics and those walstream writes beside them
// in a shadow run (its own slot, other topic names). Compare reads both
// sides read_committed, tells events apart by format.EventKey (the id
// header, or key and value where the id is null), and compares each
// event's first record on one side with its first on the other:
// partition, key, value, headers in order, and timestamps when asked.
// Pairs pairs Debezium's topics with walstream's by a name prefix. It
// reads and reports; what the command prints is cmd/walstream's.
package diff
