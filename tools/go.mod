// The tools of a walstream release and the tests of what it ships: the
// third-party notice, the OCI image, the Helm chart and the release notes.
// A module of its own, so that walstream's go.mod, and the binary, link
// none of Helm, Kubernetes or the image libraries.
module github.com/walstream/walstream/tools

go 1.26.8

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/google/licenseclassifier/v2 v2.0.0
	golang.org/x/crypto/x509roots/fallback v0.0.0-20261030153154-30a33513ff6d
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sergi/go-diff v1.1.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
