// Package image builds walstream's OCI image from release binaries,
// without a container engine or a base image from a registry: a base
// layer made here (the nonroot user, Mozilla's CA certificates as Go's
// x509roots module ships them, /tmp) and the binary's layer, one image
// per platform under one index. The same inputs give the same bytes:
// every time in it is the commit's, and no file records who built it.
// It neither signs nor publishes the image: package release does, for
// cmd/release-sign and cmd/release-publish.
package image
