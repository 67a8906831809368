// Package secret reads the files walstream's secrets and certificates are
// mounted as, again each time a new connection uses them, so that a
// rotated password, CA bundle or client certificate takes effect without a
// restart. Kubernetes updates a mounted Secret by swapping a symbolic link
// (..data) in its directory, which a watch on the file itself misses:
// reading the path anew at each use always finds the current content.
// Connections are made rarely (per session, per broker), so reading a few
// small files for each costs nothing that matters.
//
// A File (secret.go) holds one secret, such as a password; its Use says
// when a connection read it and whether it changed since start, for the
// errors of refused connections, and never holds the secret. A TLS
// (tls.go) is a client configuration made anew for each connection from a
// CA bundle and a client certificate and key, the peer's name verified.
// It knows nothing of Postgres or Kafka: replication, kafka and
// publish/format install these into their connections, and config reads
// the settings that name the files.
package secret
