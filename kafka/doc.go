// Package kafka sets up walstream's Kafka clients and what several of them
// share. It knows nothing of checkpoints or events: checkpoint/store,
// publish, diff and group build on it, and they, it and publish/format
// (which builds records) alone import franz-go.
//
// Connection settings (Settings, settings.go: brokers, TLS, SASL; auth.go:
// OAUTHBEARER tokens from a file or an OIDC token endpoint, and AWS
// credentials for MSK IAM); the topics walstream creates and checks
// (topics.go: the checkpoint topic, made to outlive a broker, and the
// outbox topics under TopicCreation); the least-privilege ACLs of a stream
// (ACLs, acls.go, for walstream init --kafka-acls); the readiness Prober
// (probe.go), whose client never initializes a producer id and whose
// answers serve the streams of a process that ask within moments; which
// partitions cannot take writes now (Writability, writable.go, with the
// transaction state partition of the stream's transactional id); which
// transactions hold back a topic's last stable offset (Hold, held.go);
// franz-go's client metrics (kprom.go).
//
// Reading past the last stable offset (decided.go): the checkpoint topic
// is shared by every stream of a cluster, and one transaction left open on
// it hides every later record from read_committed readers until it ends.
// So a partition is read read_uncommitted past it, each record decided by
// the next marker of its producer: a key's last record read back from the
// end (LastUnderKey, lastkey.go), every record of a key (ScanKey) or of a
// topic from a time (ScanDecided, for a takeover's lookup; ScanTopic and
// ReadTopic read_committed, read.go), and a transaction decided by its
// markers in other partitions (TransactionFate). Markers (markers.go)
// decides records waited for as they are committed: one loop per
// partition serves every waiter there, so the streams of a process that
// reach a cluster as one principal (Settings.SameAccess) share one reader
// of the checkpoint partition for their commits' markers.
package kafka
