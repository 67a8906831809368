package release

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/oci"
	ocilayout "github.com/sigstore/cosign/v2/pkg/oci/layout"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/walstream/walstream/tools/image"
)

// The files of a release that name and sign the others.
const (
	Sums         = "SHA256SUMS"
	SumsSig      = "SHA256SUMS.sig"
	SignedSuffix = "_signed_oci.tar"
	ImageSuffix  = "_oci.tar"
)

// Verified is what VerifyDist checked.
type Verified struct {
	// Files is how many files SHA256SUMS lists, each found unchanged.
	Files int
	// Index is the digest of the image index, signed and attested.
	Index v1.Hash
	// Predicates are the predicate types of the attestations verified.
	Predicates []string
}

// VerifyDist verifies a release folder offline with the public key pub, as
// scripts/verify-release.sh does with cosign: SHA256SUMS.sig over
// SHA256SUMS, every file SHA256SUMS lists against its checksum, and the
// signed image's archive beside them: its index the one of the image
// archive, signed, and attested with SLSA v1 provenance and a CycloneDX
// SBOM. An error names the file that fails.
func VerifyDist(ctx context.Context, dist string, pub []byte) (Verified, error) {
	var res Verified
	v, err := LoadVerifier(pub)
	if err != nil {
		return res, err
	}
	sums, err := os.ReadFile(filepath.Join(dist, Sums))
	if err != nil {
		return res, err
	}
	sig, err := os.ReadFile(filepath.Join(dist, SumsSig))
	if err != nil {
		return res, err
	}
	if err := VerifyBlob(v, sums, sig); err != nil {
		return res, fmt.Errorf("%s: %w", filepath.Join(dist, SumsSig), err)
	}
	files, err := checkSums(dist, sums)
	if err != nil {
		return res, err
	}
	res.Files = len(files)
	var imageFile string
	for _, f := range files {
		if strings.HasSuffix(f, ImageSuffix) {
			imageFile = f
		}
	}
	if imageFile == "" {
		return res, fmt.Errorf("%s lists no image archive (*%s): %q", Sums, ImageSuffix, files)
	}
	signedFile := strings.TrimSuffix(imageFile, ImageSuffix) + SignedSuffix
	res.Index, res.Predicates, err = VerifyImage(ctx, filepath.Join(dist, signedFile), v)
	if err != nil {
		return res, err
	}
	tmp, err := os.MkdirTemp("", "walstream-verify-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	idx, err := ReadIndex(filepath.Join(dist, imageFile), tmp)
	if err != nil {
		return res, err
	}
	if h, err := idx.Digest(); err != nil || h != res.Index {
		return res, fmt.Errorf("%s: its image is not %s, the one %s signs", filepath.Join(dist, imageFile), res.Index, signedFile)
	}
	return res, nil
}

// VerifyBlob checks sig, base64 as SignBlob and cosign sign-blob write
// it, of data with v, as cosign verify-blob --key --signature does.
func VerifyBlob(v signature.Verifier, data, sig []byte) error {
	raw, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(sig)))
	if err != nil {
		return fmt.Errorf("the signature is not base64: %w", err)
	}
	if err := v.VerifySignature(bytes.NewReader(raw), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("the signature does not verify with the key: %w", err)
	}
	return nil
}

// checkSums compares every file sums lists, in sha256sum's format, with
// its SHA-256 and returns their names.
func checkSums(dist string, sums []byte) ([]string, error) {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for n := 1; sc.Scan(); n++ {
		want, file, ok := strings.Cut(sc.Text(), "  ")
		file = strings.TrimPrefix(file, "*")
		if _, err := hex.DecodeString(want); !ok || len(want) != 64 || err != nil || !filepath.IsLocal(file) {
			return nil, fmt.Errorf("%s line %d: %q is not <sha256>  <file in the folder>", Sums, n, sc.Text())
		}
		got, err := fileSHA256(filepath.Join(dist, file))
		if err != nil {
			return nil, fmt.Errorf("%s lists %s: %w", Sums, file, err)
		}
		if got != want {
			return nil, fmt.Errorf("%s: SHA-256 %s, but %s says %s: the file is not the one released", filepath.Join(dist, file), got, Sums, want)
		}
		names = append(names, file)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s lists no file", Sums)
	}
	return names, sc.Err()
}

// VerifyImage verifies the signed image archive at file with v, as cosign
// verify --local-image and cosign verify-attestation --local-image do
// (--insecure-ignore-tlog: no transparency log), and returns the index's
// digest and the predicate types attested, which must include SLSA v1
// provenance and CycloneDX.
func VerifyImage(ctx context.Context, file string, v signature.Verifier) (v1.Hash, []string, error) {
	dir, err := os.MkdirTemp("", "walstream-verify-")
	if err != nil {
		return v1.Hash{}, nil, err
	}
	defer os.RemoveAll(dir)
	if _, err := image.ReadArchive(file, dir); err != nil {
		return v1.Hash{}, nil, err
	}
	sii, err := ocilayout.SignedImageIndex(dir)
	if err != nil {
		return v1.Hash{}, nil, fmt.Errorf("%s: %w", file, err)
	}
	idx, err := sii.SignedImageIndex(v1.Hash{})
	if err != nil || idx == nil {
		return v1.Hash{}, nil, fmt.Errorf("%s holds no image index as cosign save writes it (%v)", file, err)
	}
	h, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, nil, err
	}
	co := &cosign.CheckOpts{SigVerifier: v, IgnoreTlog: true, ClaimVerifier: cosign.SimpleClaimVerifier}
	if _, _, err := cosign.VerifyLocalImageSignatures(ctx, dir, co); err != nil {
		return h, nil, fmt.Errorf("%s: the signature of image %s: %w", file, h, err)
	}
	// cosign's VerifyLocalImageAttestations dereferences a layout's
	// attestations without looking: none would panic.
	if atts, err := sii.Attestations(); err != nil || atts == nil {
		return h, nil, fmt.Errorf("%s: image %s has no attestations (%v)", file, h, err)
	}
	co.ClaimVerifier = cosign.IntotoSubjectClaimVerifier
	atts, _, err := cosign.VerifyLocalImageAttestations(ctx, dir, co)
	if err != nil {
		return h, nil, fmt.Errorf("%s: the attestations of image %s: %w", file, h, err)
	}
	types, err := PredicateTypes(atts)
	if err != nil {
		return h, nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, want := range []string{PredicateProvenance, PredicateCycloneDX} {
		if !slices.Contains(types, want) {
			return h, types, fmt.Errorf("%s: image %s has no verified attestation of %s, only of %q", file, h, want, types)
		}
	}
	return h, types, nil
}

// PredicateTypes returns the predicate type of each attestation, as its
// in-toto statement states it.
func PredicateTypes(atts []oci.Signature) ([]string, error) {
	var types []string
	for _, a := range atts {
		p, err := a.Payload()
		if err != nil {
			return nil, err
		}
		var env struct{ Payload []byte }
		var stmt struct {
			PredicateType string `json:"predicateType"`
		}
		if err := json.Unmarshal(p, &env); err != nil {
			return nil, fmt.Errorf("an attestation is no DSSE envelope: %w", err)
		}
		if err := json.Unmarshal(env.Payload, &stmt); err != nil {
			return nil, fmt.Errorf("an attestation holds no in-toto statement: %w", err)
		}
		types = append(types, stmt.PredicateType)
	}
	return types, nil
}
