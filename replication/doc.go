// Package replication speaks to Postgres: it checks and prepares the
// server, streams the slot over the logical replication protocol, and
// confirms positions back. Every connection walstream opens to Postgres is
// opened here (Connect, Dial, ConnectReader); the pipeline runs a few
// queries of its own on them (a takeover's WAL flush position, a re-emit
// request's pg_logical_emit_message, a takeover's publication), and
// nothing else speaks to Postgres. What the WAL means is package decode's,
// which positions may be confirmed the tracker's (checkpoint), and what to
// do when the server refuses or changes the pipeline's.
//
// Setup (setup.go, check.go, apply.go, provider.go): Prepare checks that
// the server can stream the outbox and creates the publication, then the
// slot, when they are missing and allowed to be; Check reports, without
// changing anything, what the role lacks, recognising managed services by
// their settings and how each lets a role replicate (Provider); init's
// SetupSteps are checked first by Preflight and run by Apply, the slot last
// and the rest in one transaction.
//
// Streaming (stream.go): Start sends START_REPLICATION (pgoutput's
// options: StreamConfig.pluginArgs) and Stream.Run hands each XLogData
// message and keepalive to a Consumer, declared here and implemented by
// the pipeline's feed, and confirms what a Confirmer (the tracker) allows
// in status updates: every StatusInterval, and ConfirmInterval after a
// Kafka commit asks for one (ConfirmSoon). A slot held by another process
// is a SlotHeldError, its holder described (DescribeHeld, wait.go) and
// read while a standby waits (ReadSlotHolder). lowat.go raises the
// socket's receive low-water mark while a backlog is read.
//
// Watching the server: Monitor (monitor.go) polls the slot (PollSlot, with
// the server's decoding statistics, DecodingStats) and the outbox tables'
// OIDs while streaming; Identify, History and Fork (timeline.go) place a
// checkpoint in the server's history; CheckFailover (failover.go) tells
// what a safe failover of the slot lacks; SlotCreationWait (wait.go) names
// the transactions a new slot waits for. The catalog: DescribeTables,
// DescribeRelation and UniqueColumn (tables.go). Re-emit requests
// (reemit.go) plan their predicate (DescribeReemit) and read their rows by
// primary key (ReemitTable.ReadChunk) on a read-only connection with the
// walsender's render settings.
//
// What a connection presents that may change while walstream runs
// (Credentials, credentials.go): the password file read per connection, an
// RDS IAM database authentication token signed per connection, the
// connection string's TLS files read per handshake, and a server
// certificate from an unknown CA named with AWS's bundle as the fix
// (UnknownCAError). Install puts them into the connection config, so that
// Connect, Dial and any connection made from it get them.
package replication
