#!/usr/bin/env bash
# make release: walstream's release from a clean tree, into dist/:
#   walstream_<v>_<os>_<arch>.tar.gz   linux/amd64, linux/arm64, darwin/arm64 (goreleaser)
#   walstream_<v>_<os>_<arch>.cdx.json CycloneDX SBOM of each binary (cyclonedx-gomod)
#   walstream_<v>_oci.tar              the OCI image, linux/amd64 and linux/arm64 in one index
#   walstream_<v>_linux_<arch>.docker.tar  the same images, one per platform, for docker load
#   walstream-<v>.tgz                  the Helm chart
#   RELEASE_NOTES.md                   the version's section of CHANGELOG.md
#   SHA256SUMS                         of all of the above
#   SHA256SUMS.sig                     its signature, as cosign sign-blob writes it
#   walstream_<v>_signed_oci.tar       the image index signed and attested (SLSA v1
#                                      provenance, the CycloneDX SBOMs), as cosign save writes it
# On a commit tagged vX.Y.Z the version is the tag; on any other commit it
# is git describe's name for it (v0.1.0-3-gabc1234), and the notes are the
# Unreleased section. Every tool is pinned here and comes from the Go
# module proxy; every time in the output is the commit's, so two runs on
# one commit give the same SHA256SUMS. The signing key is a cosign key
# pair: COSIGN_KEY names the private key's file, COSIGN_PASSWORD holds its
# password; with one key, two runs give the same signatures too
# (make verify-release checks them; docs/development.md, Releases).
set -euo pipefail
cd "$(dirname "$0")/.."
GORELEASER=${GORELEASER:-github.com/goreleaser/goreleaser/v2@v2.15.1}
export CYCLONEDX_GOMOD=${CYCLONEDX_GOMOD:-github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0}

if [ -z "${COSIGN_KEY:-}" ] || [ ! -r "$COSIGN_KEY" ]; then
  echo "make release: COSIGN_KEY must name the file of the cosign private key that signs the release" >&2
  echo "(and COSIGN_PASSWORD hold its password); docs/development.md, Releases" >&2
  exit 1
fi
if [ -n "$(git status --porcelain)" ]; then
  echo "make release: the tree has changes; a release is built from a commit:" >&2
  git status --short >&2
  exit 1
fi
commit=$(git rev-parse HEAD)
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export SOURCE_DATE_EPOCH
notes_flags=()
if version=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null); then
  kind=release
else
  version=$(git describe --tags --match 'v[0-9]*' 2>/dev/null || echo "v0.0.0-0-g$(git rev-parse --short=12 HEAD)")
  kind=snapshot
  notes_flags=(-snapshot)
fi
export WALSTREAM_VERSION=$version
v=${version#v}
echo "walstream $version ($kind) from $commit, dated $(date -u -d "@$SOURCE_DATE_EPOCH" +%FT%TZ)"

tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
go build -C tools -o "$tools/" ./cmd/release-notes ./cmd/release-image ./cmd/release-chart ./cmd/release-sign
# A key that does not load (a wrong password) stops here, not after the build.
"$tools/release-sign" -check-key
# The notes first: a tag whose changes CHANGELOG.md does not list stops here.
"$tools/release-notes" -changelog CHANGELOG.md -version "$version" "${notes_flags[@]}" >"$tools/RELEASE_NOTES.md"

go run "$GORELEASER" release --snapshot --clean
cp "$tools/RELEASE_NOTES.md" dist/
"$tools/release-image" -dist dist -root . -version "$version" -commit "$commit" -epoch "$SOURCE_DATE_EPOCH"
"$tools/release-chart" -chart deploy/helm/walstream -version "$version" -epoch "$SOURCE_DATE_EPOCH" -out dist
# The image as a release ships it, both platforms, checked as make test
# checks the one it builds.
go test -C tools ./image -run '^TestImage$' -count=1 -args -image.archive="$PWD/dist/walstream_${v}_oci.tar" \
  -image.version="$version" -image.commit="$commit" -image.epoch="$SOURCE_DATE_EPOCH"

# The image signed and attested, SHA256SUMS of every file, and its signature.
"$tools/release-sign" -dist dist -version "$version" -commit "$commit" -epoch "$SOURCE_DATE_EPOCH" \
  -tool "$GORELEASER" -tool "$CYCLONEDX_GOMOD"
echo "dist/SHA256SUMS:"
cat dist/SHA256SUMS
