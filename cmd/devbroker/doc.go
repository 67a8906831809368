// Command devbroker runs franz-go's kfake, an in-process Kafka-protocol
// broker with transactions and read_committed, for local development, the
// demo and tests. It is a stand-in, not a Kafka: run real Apache Kafka in
// production (docker-compose.yml shows one).
//
// It listens on -addr (and tells clients -advertise, so that a proxy may
// sit in front), creates topics of -partitions on first use, and with
// -data-dir keeps topics, offsets and transactions across restarts. It
// answers as Kafka 3.9, without transaction version 2, and writes an abort
// marker for every transaction a crash left open before any client
// connects: kfake alone would take their records for committed at its
// next recovery. It is no part of walstream the program and imports none
// of its packages.
package main
