// Package walstream holds no code: it is the root of the module, whose
// command, cmd/walstream, streams a transactional outbox from a Postgres
// logical replication slot into Kafka, exactly once. ARCHITECTURE.md walks
// its packages: replication reads the slot, decode makes its WAL into
// transactions of outbox events, publish writes them to Kafka with their
// checkpoint in one Kafka transaction, checkpoint owns the positions,
// pipeline wires them into sessions and supervises them, and config reads
// the settings. Each package's own documentation says what it owns.
//
// Its one test file, architecture_test.go, holds ARCHITECTURE.md's table
// of packages to the packages that exist, each package to the imports its
// row allows, and the files and declarations the document names to those
// that exist.
package walstream
