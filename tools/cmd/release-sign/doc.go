// Command release-sign signs a release that make release built in -dist:
// the image index, signed and attested with SLSA v1 provenance and the
// SBOM of each platform's binary, into walstream_<v>_signed_oci.tar (an
// OCI layout as cosign save writes it); SHA256SUMS of every file and its
// signature SHA256SUMS.sig; the public key as cosign.pub. The key is a
// cosign key pair (cosign generate-key-pair): the private key's file in
// COSIGN_KEY, its password in COSIGN_PASSWORD.
//
//	release-sign -dist dist -version v0.1.0 -commit $(git rev-parse HEAD) -epoch $SOURCE_DATE_EPOCH \
//	  -tool github.com/goreleaser/goreleaser/v2@v2.15.1
package main
