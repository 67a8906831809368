package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/walstream/walstream/tools/image"
)

// Options are what SignRelease signs.
type Options struct {
	// Dist is the release's folder, as make release fills it.
	Dist string
	// Version is the release's (v0.1.0); its files are named without the v.
	Version string
	// Repository is the image's name without tag, which the signature
	// and the attestations' subject carry.
	Repository string
	// Created is the commit's time, which the signed archive's entries
	// carry.
	Created time.Time
	// Key signs; Provenance is attested.
	Key        *Signer
	Provenance Provenance
}

// SignRelease signs a release in o.Dist, with the image archive, the
// CycloneDX SBOM of each Linux binary and the other files made, and
// writes beside them:
//
//	walstream_<v>_signed_oci.tar  the image index signed and attested (SLSA v1
//	                               provenance, the SBOM of each platform's binary)
//	SHA256SUMS                    of every other file of the release
//	SHA256SUMS.sig                its signature
//
// SHA256SUMS covers what does not depend on the key, so that anyone's
// build of the commit gives the same; the signatures are the same on
// every run for one commit and one key.
func SignRelease(o Options) error {
	v := strings.TrimPrefix(o.Version, "v")
	tmp, err := os.MkdirTemp("", "walstream-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	idx, err := ReadIndex(filepath.Join(o.Dist, "walstream_"+v+ImageSuffix), tmp)
	if err != nil {
		return err
	}
	pred, err := o.Provenance.Predicate()
	if err != nil {
		return err
	}
	atts := []Attestation{{Type: TypeProvenance, Predicate: pred}}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		if d.Platform == nil {
			return fmt.Errorf("image %s has a manifest for no platform: %s", o.Version, d.Digest)
		}
		sbom := filepath.Join(o.Dist, "walstream_"+v+"_"+d.Platform.OS+"_"+d.Platform.Architecture+".cdx.json")
		b, err := os.ReadFile(sbom)
		if err != nil {
			return fmt.Errorf("the SBOM of the %s/%s image: %w", d.Platform.OS, d.Platform.Architecture, err)
		}
		atts = append(atts, Attestation{Type: TypeCycloneDX, Predicate: b})
	}
	sii, err := SignIndex(o.Key, idx, o.Repository, atts)
	if err != nil {
		return err
	}
	if err := WriteSignedArchive(filepath.Join(o.Dist, "walstream_"+v+SignedSuffix), sii, o.Created); err != nil {
		return err
	}
	sums, err := Checksums(o.Dist, v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dist, Sums), sums, 0o644); err != nil {
		return err
	}
	sig, err := SignBlob(o.Key, sums)
	if err != nil {
		return fmt.Errorf("signing %s: %w", Sums, err)
	}
	return os.WriteFile(filepath.Join(o.Dist, SumsSig), sig, 0o644)
}

// ReadIndex unpacks the OCI archive at file, as image.WriteArchive writes
// it, into dir and returns the one index its index.json names, which
// reads its blobs from dir.
func ReadIndex(file, dir string) (v1.ImageIndex, error) {
	lp, err := image.ReadArchive(file, dir)
	if err != nil {
		return nil, err
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s names %d images, want the release's index alone", file, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}

// releaseFiles are the patterns of a release's files, version v without
// the v, that SHA256SUMS covers: goreleaser's archives and SBOMs, the
// image, the chart, the notes. Not the signed image, which its signatures
// make depend on the key, and which cosign verifies.
func releaseFiles(v string) []string {
	return []string{
		"walstream_" + v + "_*.tar.gz",
		"walstream_" + v + "_*.cdx.json",
		"walstream_" + v + "_*.docker.tar",
		"walstream_" + v + ImageSuffix,
		"walstream-" + v + ".tgz",
		"RELEASE_NOTES.md",
	}
}

// Checksums returns SHA256SUMS of the release of version v (without the v)
// in dist, as sha256sum writes it, in name order.
func Checksums(dist, v string) ([]byte, error) {
	var names []string
	for _, p := range releaseFiles(v) {
		m, err := filepath.Glob(filepath.Join(dist, p))
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s has no %s", dist, p)
		}
		for _, f := range m {
			names = append(names, filepath.Base(f))
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range slices.Compact(names) {
		sum, err := fileSHA256(filepath.Join(dist, n))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return []byte(b.String()), nil
}

// fileSHA256 returns the SHA-256 of the file at path, in hex.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
