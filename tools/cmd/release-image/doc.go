// Command release-image builds walstream's OCI image from the Linux
// binaries of a release (goreleaser's dist/artifacts.json names them) and
// writes it to the release folder: the multi-platform OCI archive and one
// `docker save` archive per platform.
//
//	release-image -dist dist -version v0.1.0 -commit $(git rev-parse HEAD) -epoch $SOURCE_DATE_EPOCH
package main
