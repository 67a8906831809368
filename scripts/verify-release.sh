#!/usr/bin/env bash
# make verify-release: verifies a release folder offline, with the public
# key in COSIGN_PUB (default: cosign.pub), with cosign (pinned here, from
# the Go module proxy) as anyone would verify it (docs/development.md,
# Releases):
#   SHA256SUMS.sig   SHA256SUMS signed with the key      (cosign verify-blob)
#   SHA256SUMS       every file it lists unchanged       (sha256sum -c)
#   the signed image signed with the key                 (cosign verify --local-image)
#                    attested: SLSA v1 provenance, CycloneDX SBOM
#                                                        (cosign verify-attestation)
#                    the one the image archive holds
# No transparency log is written to at signing, so none is asked
# (--insecure-ignore-tlog); cosign only warns that it cannot reach
# Sigstore's TUF repository.
#   scripts/verify-release.sh [dist]
set -euo pipefail
dist=${1:-dist}
pub=${COSIGN_PUB:-cosign.pub}
COSIGN_MODULE=${COSIGN_MODULE:-github.com/sigstore/cosign/v2/cmd/cosign@v2.6.5}

fail() {
  echo "verify-release: $*" >&2
  exit 1
}
[ -r "$pub" ] || fail "no public key at $pub (COSIGN_PUB)"
if [ ! -r "$dist/SHA256SUMS" ] || [ ! -r "$dist/SHA256SUMS.sig" ]; then
  fail "$dist has no SHA256SUMS and SHA256SUMS.sig"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
GOBIN="$work/bin" go install "$COSIGN_MODULE"
cosign=$work/bin/cosign

"$cosign" verify-blob --key "$pub" --insecure-ignore-tlog --signature "$dist/SHA256SUMS.sig" "$dist/SHA256SUMS" ||
  fail "$dist/SHA256SUMS.sig: SHA256SUMS is not signed with $pub"
(cd "$dist" && sha256sum --strict --quiet -c SHA256SUMS) || fail "$dist: a file differs from SHA256SUMS (FAILED above)"

image=$(awk '$2 ~ /_oci\.tar$/ {print $2}' "$dist/SHA256SUMS")
[ -n "$image" ] || fail "SHA256SUMS lists no image archive"
signed=${image%_oci.tar}_signed_oci.tar
[ -r "$dist/$signed" ] || fail "$dist has no $signed beside $image"
mkdir "$work/layout"
tar -xf "$dist/$signed" -C "$work/layout"
"$cosign" verify --key "$pub" --insecure-ignore-tlog --local-image "$work/layout" >"$work/claims.json" ||
  fail "$dist/$signed: the image is not signed with $pub"
for type in slsaprovenance1 cyclonedx; do
  "$cosign" verify-attestation --key "$pub" --insecure-ignore-tlog --type "$type" --local-image "$work/layout" >/dev/null ||
    fail "$dist/$signed: the image has no $type attestation signed with $pub"
done

# The image signed is the one the image archive holds.
signed_digest=$(grep -o '"docker-manifest-digest":"sha256:[0-9a-f]*"' "$work/claims.json" | head -1 | cut -d'"' -f4)
image_digest=$(tar -xOf "$dist/$image" index.json | grep -o '"digest": *"sha256:[0-9a-f]*"' | head -1 | grep -o 'sha256:[0-9a-f]*')
if [ -z "$signed_digest" ] || [ "$signed_digest" != "$image_digest" ]; then
  fail "$dist/$image holds image $image_digest, but $signed signs ${signed_digest:-none}"
fi
echo "verify-release: $dist verified with $pub: $(wc -l <"$dist/SHA256SUMS") files, image $signed_digest signed, with SLSA v1 provenance and CycloneDX SBOM"
