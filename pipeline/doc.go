// Package pipeline runs walstream's stream: it wires replication, decode,
// publish and checkpoint into sessions, and supervises them. A session is
// one attempt at streaming; the supervisor restarts it from the checkpoint
// in Kafka after every transient failure, waits as a standby while another
// instance holds the slot, and stops on a permanent one. It holds the
// policy, and the stage packages the mechanisms: it names no flag (config
// and cmd/walstream map its fields and errors onto them), speaks to
// Postgres through replication, to Kafka through publish, checkpoint/store,
// kafka and group, and keeps no position of its own (the session's
// checkpoint.Tracker does).
//
// Settings: Config with its defaults beside it (Default… constants) and
// Validate (validate.go), whose errors name the field (SettingError).
// Supervision: Pipeline.Run (pipeline.go), with a backoff, a window of
// fencings that tells a transactional id shared with another stream
// (SharedIDError), and a standby's wait for the slot on one kept
// connection (awaitSlot, standby.go). failure.go classifies what ended a
// session (classifyFailure: peer, kind, permanent or not; Describe), and
// names unreachable peers plainly.
//
// A session (session.go) connects, checks the outbox tables against the
// catalog (tables.go), makes or checks the publication and the slot,
// starts replication, and decides where to resume: claim.go reads the
// checkpoint once before the first session (claim: under the key earlier
// versions wrote, LegacyKey, when only that holds one), then at every
// session fences the stream's older instances and reads it for good
// (fenceAndRead; a record it cannot decide is an
// UndecidedCheckpointError), place.go puts it in the server's history
// (Place, resolve, DivergedError; a checkpoint past the WAL end the
// server named before the fencing is placed against its WAL end asked
// again, walEndFor), and takeover.go makes the first
// checkpoint of a takeover from Debezium's offset, or refuses it
// (Takeover, StreamingError while Debezium's connector still holds the
// slot). Then it runs, in one errgroup, the stream (replication.Stream),
// the feed (feed.go: replication → decode → queue, with fileSpool,
// spool.go, as the Spool of a transaction streamed in progress: a
// temporary file unlinked at once), the producer, the slot monitor, the
// progress log, and the reemitter. The feed shows the tracker every
// transaction the server replays of the checkpoint's stretch; one that is
// not the history published (checkpoint.ReplayError) ends the session
// as a DivergedError of phantom events from the slot's position, which
// the next session places the checkpoint at when phantoms are accepted
// (earlier.rewritten).
//
// Re-emit requests: RequestReemit, CancelReemit and ListReemits
// (request.go) write requests to the WAL and list them; the reemitter
// (reemit.go) reads the rows of the requests the committed checkpoint
// records, chunk by chunk, for the producer.
//
// Several streams: a Fleet (fleet.go) runs one Pipeline per stream of the
// process, none stopping another; a shared fleet (NewSharedFleet,
// RunShared) runs only those its fleet's group gives the process, each
// started when given and released, its Run ended, when taken away, then
// run again as often as it is given back. CheckFleet refuses streams that
// would share a name, a checkpoint key, a transactional id or a slot, or
// a group on several Kafka clusters.
//
// What an operator sees: Healthz and Readyz (health.go, with the Kafka
// probe, the transactions holding the checkpoint topic, a standby's
// evidence, and what a wait waits for, logged at the progress interval by
// waits, wait.go), a line per stream in a fleet naming the member another
// stream is given to; the metrics' state; Inspect and its Report for
// walstream status (inspect.go, report.go: the slot, the checkpoint, its
// placement, whether Debezium's connector stopped, DebeziumStop;
// InspectFleet). CrashHook kills the process at named points for crash
// tests, only in builds tagged walstream_faults (crash_on.go).
package pipeline
