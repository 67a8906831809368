// Package release signs, attests, verifies and publishes what make release
// builds, in the formats cosign reads: SHA256SUMS signed as cosign
// sign-blob signs a file, and the image index signed and attested (SLSA v1
// provenance, CycloneDX SBOMs) as cosign sign and cosign attest do, kept
// in an OCI layout as cosign save writes it. Nothing here needs a network:
// the key is a cosign key pair and no transparency log is written to, so a
// platform team verifies a release offline with cosign's --key and
// --insecure-ignore-tlog (docs/development.md, Releases). It builds
// nothing: the binaries are goreleaser's, the image package image's.
package release
