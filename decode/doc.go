// Package decode turns pgoutput messages into outbox events grouped by
// Postgres transaction. It is pure: bytes in, transactions and events out,
// no I/O and no logging. What it needs of the catalog (tables' OIDs,
// column defaults and NOT NULL, which table a partition belongs to) its
// caller reads and gives it as data (pipeline); what becomes of an event,
// its record and its Kafka transaction, is publish's.
//
// A Decoder (decode.go) decodes protocol version 1 in commit order, a Tx
// per transaction, handed on in parts when it holds more events than a
// Kafka transaction should (Config.MaxPartEvents, MaxPartBytes), so that
// memory stays bounded whatever a transaction's size. Events are placed by
// (commit LSN, ordinal) and named everywhere by their Identity; the replay
// filter (Config.Skip) drops what an earlier session published. Bad input
// never stops decoding nor drops a row: a row that cannot become a record
// is an Event with Bad set, and input the stream cannot go on past (an
// undecodable message, a recreated outbox table: TableRecreatedError) is a
// Tx with Stop set, each after everything decoded before it. Rows Postgres
// sends under a partition's name are made the outbox table's (Unclassified,
// PartitionOf), and those of a relation that may have been one are bad
// events (Unattached, UnattachedError).
//
// Streams (stream.go) keeps each transaction Postgres streams in progress
// (protocol version 2) in a Spool, an interface declared here and kept
// outside memory by the caller, until it commits, when it is decoded as a
// transaction sent whole (BeginStreamed, CommitStreamed), or aborts, which
// discards it or, for a subtransaction, truncates it.
//
// An Outbox (outbox.go) maps a table's rows onto Debezium's outbox event
// router, built from the router's keys by NewOutbox (router.go:
// RouterKeys, CanonicalRouterKey, the topic route), which checks them as
// Debezium does and names the key in its errors (SettingError). Columns
// and what the catalog says of them are column.go's (Column, Catalog,
// ParseDefault); logical messages as events message.go's. Re-emit
// requests and their cancels (request.go) are control messages
// (ControlPrefix) or rows of Debezium's signal table (SignalRequests),
// kept for the last part of their transaction (Tx.Requests); the rows a
// request reads are mapped as their inserts were by Rows (rows.go), into
// a Tx with Chunk set.
package decode
