// Package testenv starts the outside systems integration tests, the chaos
// suite and walbench need, on loopback: a throwaway Postgres cluster of a
// chosen major version (and a physical standby of it), a Kafka-protocol
// broker, walstream and other binaries of this module as child processes,
// and read_committed readers of what landed in Kafka. When CI is set, a
// system that cannot start fails the test instead of skipping. It is a
// test harness only: no package of walstream the program imports it.
//
// Postgres of any major (postgres.go, standby.go; Majors, BinDir), from a
// cluster template StartPostgres copies. Brokers behind one Broker
// interface, named by BrokerKind (broker.go): Apache Kafka (Kafka,
// kafka.go: KRaft nodes as JVM child processes, one node or three,
// optionally beside controller-only voters, any transaction version, from
// the jars scripts/deps.sh installs at the versions of
// scripts/java/versions.env; KafkaSecurity adds a listener with TLS, SCRAM
// users, OAUTHBEARER against an OIDC the test serves, and the
// StandardAuthorizer), kfake in the process (Kfake) and the local broker
// as a process (Devbroker). Kafka Connect with Debezium's Postgres
// connector and Apicurio's AvroConverter (Connect, connect.go: standalone
// or distributed exactly-once, a JVM child process with its REST API), and
// Apicurio Registry (Registry, apicurio.go, behind a Gate a test can cut).
//
// What the tests of one test binary share under Main (build.go): a broker
// of each kind (SharedBroker, shared.go; each test under names from
// TopicPrefix), the cluster templates, the binaries built (Binary,
// WalstreamBuild), and the class data archives Java servers start from
// (jvm.go). Besides: the walstream process wrapper (Process,
// StartWalstream, walstream.go, process.go), read_committed readers
// (reader.go), kfake clusters and a transaction left open (topics.go),
// certificate authorities (tls.go), an RDS IAM proxy (rds.go), and the
// code blocks of the docs a test runs (DocsBlock, docs.go).
package testenv
