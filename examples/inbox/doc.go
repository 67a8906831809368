// Command inbox is an example consumer of walstream's topics that applies
// each event to Postgres exactly once. For every batch of records it runs
// one Postgres transaction that records each event id in a dedup table,
// applies the business effect only for ids not seen before, and stores the
// consumer's next offset per partition. Offsets live in Postgres, not in
// Kafka, so a crash either keeps a batch's effects and its offsets or
// neither. README.md explains why that is exactly once; schema.sql holds
// the tables. It is an example beside walstream, not a part of it: it
// imports none of walstream's packages.
package main
