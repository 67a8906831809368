package release

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign/attestation"
	"github.com/sigstore/cosign/v2/pkg/oci"
	ocilayout "github.com/sigstore/cosign/v2/pkg/oci/layout"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	"github.com/sigstore/cosign/v2/pkg/oci/signed"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/cosign/v2/pkg/types"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/walstream/walstream/tools/image"
)

// The predicate types of the image's attestations, as cosign
// verify-attestation --type names them and as the in-toto statements
// state them.
const (
	TypeProvenance = "slsaprovenance1"
	TypeCycloneDX  = "cyclonedx"

	PredicateProvenance = "https://slsa.dev/provenance/v1"
	PredicateCycloneDX  = "https://cyclonedx.org/bom"
)

// SignBlob returns the signature of data as cosign sign-blob writes it to
// --output-signature: base64, which cosign verify-blob --signature reads.
func SignBlob(s *Signer, data []byte) ([]byte, error) {
	sig, err := s.SignMessage(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return []byte(base64.StdEncoding.EncodeToString(sig)), nil
}

// Attestation is a predicate to attest of the image, of a type cosign
// attest --type takes.
type Attestation struct {
	Type      string
	Predicate []byte
}

// SignIndex signs idx, named repo (ghcr.io/walstream/walstream), as cosign
// sign signs an image by digest, and attests it with each of atts as cosign
// attest does: what cosign verify and cosign verify-attestation check in
// the OCI layout WriteSignedArchive writes (cosign verify --local-image),
// or in a registry once PushImage has pushed it.
func SignIndex(s *Signer, idx v1.ImageIndex, repo string, atts []Attestation) (oci.SignedImageIndex, error) {
	h, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	ref, err := name.NewDigest(repo + "@" + h.String())
	if err != nil {
		return nil, fmt.Errorf("naming the image %s@%s: %w", repo, h, err)
	}
	claim, err := (&payload.Cosign{Image: ref}).MarshalJSON()
	if err != nil {
		return nil, err
	}
	b64, err := SignBlob(s, claim)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", ref, err)
	}
	sig, err := static.NewSignature(claim, string(b64))
	if err != nil {
		return nil, err
	}
	sii, err := mutate.AttachSignatureToImageIndex(signed.ImageIndex(idx), sig)
	if err != nil {
		return nil, err
	}
	wrapped := dsse.WrapSigner(s, types.IntotoPayloadType)
	for _, a := range atts {
		stmt, err := attestation.GenerateStatement(attestation.GenerateOpts{
			Predicate: bytes.NewReader(a.Predicate),
			Type:      a.Type,
			Digest:    h.Hex,
			Repo:      repo,
		})
		if err != nil {
			return nil, fmt.Errorf("the %s attestation of %s: %w", a.Type, ref, err)
		}
		body, err := json.Marshal(stmt)
		if err != nil {
			return nil, err
		}
		env, err := wrapped.SignMessage(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("signing the %s attestation of %s: %w", a.Type, ref, err)
		}
		var head struct {
			PredicateType string `json:"predicateType"`
		}
		if err := json.Unmarshal(body, &head); err != nil {
			return nil, err
		}
		att, err := static.NewAttestation(env,
			static.WithLayerMediaType(types.DssePayloadType),
			static.WithAnnotations(map[string]string{"predicateType": head.PredicateType}))
		if err != nil {
			return nil, err
		}
		if sii, err = mutate.AttachAttestationToImageIndex(sii, att); err != nil {
			return nil, err
		}
	}
	return sii, nil
}

// WriteSignedArchive writes sii, its signatures and attestations as an OCI
// layout in the form cosign save writes (read by cosign load and cosign
// verify --local-image), in a tar archive at file dated created.
func WriteSignedArchive(file string, sii oci.SignedImageIndex, created time.Time) error {
	dir, err := os.MkdirTemp("", "walstream-signed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := ocilayout.WriteSignedImageIndex(dir, sii); err != nil {
		return fmt.Errorf("writing the signed image's layout: %w", err)
	}
	return image.TarLayout(file, dir, created)
}
