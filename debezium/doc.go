// Package debezium reads Debezium's Postgres connector as Kafka Connect
// runs it. It parses and fetches: what to do with the position is the
// pipeline's (a takeover, pipeline/takeover.go), and with the settings its
// caller's (config). Its errors name the connector's keys, never a flag.
//
// Where the connector stopped: the source offset Kafka Connect stored for
// it (Offset, offset.go, with what each field means for a reader that goes
// on from it, and Resume, where Debezium itself would), read from a Source
// (source.go): Connect's offsets REST endpoint (KIP-875), its offsets
// topic through a TopicReader the caller gives, or a file, a saved REST
// answer or a standalone worker's offsets file in Java serialization
// (javaser.go). Whether it stopped: its state in a distributed worker's
// status topic (ReadStatus, status.go), through the same TopicReader.
//
// Its connector config as its user has it (ReadConnector, connector.go):
// JSON, properties, a Strimzi KafkaConnector with the KafkaConnect that
// declares its config providers, or YAML; errors name the key and its line
// (Connector.At). References to Kafka Connect's config providers are
// resolved as far as a command asks (Connector.Resolve, providers.go,
// Resolving: ResolveAll for run, ResolveLocal for the config file init
// prints from a connector config, ResolveNone for validate unless asked,
// which lists them as Unresolved): Kafka's environment, file and directory
// providers, Strimzi's Kubernetes Secrets and ConfigMaps, AWS Secrets
// Manager and Parameter Store.
//
// Its keys mapped onto walstream's settings (Translate, translate.go): each
// setting named as its flag and its config file key, with the key that set
// it, the schema registry's secrets, and the keys ignored with the reason
// or refused. The tables walstream's config file shares are mapping.go's:
// RouterSettings (the setting of each outbox router key), ConnectKeys, and
// the Avro converters' RegistrySettings, taken by RegistryKeys.
package debezium
