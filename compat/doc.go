// Package compat runs Debezium and walstream side by side on the same rows
// and compares their records byte for byte.
//
// Each case of the corpus (corpus_test.go) is an outbox table, a Debezium
// Postgres connector config with the outbox event router (and, for logical
// messages, DecodeLogicalDecodingMessageContent) and converters, and the
// SQL that writes its rows. The harness creates the table and a slot and a
// publication for each tool, writes the rows, then lets Kafka Connect
// 4.3 run Debezium 3.6 on them (internal/testenv.Connect) and, once that
// is done and stopped, walstream, given the very same connector config
// (`walstream run --config connector.json`) with its own slot. Both write
// to one Apache Kafka, one after the other, so that the records of each
// are told apart by their offsets. The records are compared by topic,
// partition, key bytes, value bytes, header names, order and bytes, and
// timestamp where it is deterministic (an event timestamp column); where
// Debezium stops (its task fails), walstream must stop too, after the same
// records. Every difference is fixed in walstream or listed, with its
// reason, in docs/debezium.md (Known differences), and the case says so.
//
// The Avro cases run Apicurio's AvroConverter in Confluent-compatible
// mode, with the settings Debezium's documentation gives it, and share one
// Apicurio Registry (internal/testenv.Registry), started at the first of
// them: Debezium's converter registers into it, then walstream, so equal
// bytes are equal schema ids too, and a schema walstream registers that
// the converter did not (a text differing in any byte) is a difference.
//
// `go test ./compat` (part of `make test`) runs the cases marked for CI;
// `make compat` runs them all:
//
//	go test ./compat -run TestCompat -count=1 -timeout 40m -v -args -compat.all
//
// -compat.mode=distributed runs Debezium in a distributed exactly-once
// worker instead of a standalone one; -compat.dump=DIR writes each case's
// records from both tools to DIR, in hex, with what Debezium warned of.
package compat
