// Command walstream streams a transactional outbox from a Postgres logical
// replication slot into Kafka, exactly once.
//
// This package is the command line only: each command (main.go, run.go,
// init.go, status.go, diff.go, reemit.go, validate.go) defines its
// config.Command, wires what it runs and prints what it found. Settings
// are read and validated by package config, streams run by package
// pipeline; run serves /metrics (newRegistry), /healthz and /readyz, joins
// the fleet's group (group.Membership) when its streams are shared, and
// names the flag that changes the outcome of a runtime error (flagHints).
// init prints or applies the Postgres setup and the Kafka ACLs (acls.go).
// default.pgo is the CPU profile every build of walstream is optimized
// with; make pgo takes it anew after changes to hot paths.
//
// Its tests own the documentation's checks: reference_test.go generates
// the tables of docs/configuration.md (from config's settings table, and
// each command's own flags from its --help) and docs/metrics.md (from the
// registry run builds, and the producer's kprom collectors) and fails
// when they are stale (make docs rewrites them); docs_test.go checks every
// link, anchor, flag, metric name and WALSTREAM_ variable in README.md,
// ARCHITECTURE.md and docs/, and every pointer into docs/ in the code.
package main
