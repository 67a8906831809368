package release

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"

	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	csig "github.com/sigstore/cosign/v2/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature"
)

// Signer signs with a cosign private key. Its ECDSA signatures are RFC 6979's
// deterministic ones, where cosign's are randomized, so that two releases of
// one commit signed with one key are the same bytes; either verifies the same.
type Signer struct {
	signature.SignerVerifier
	ecdsa *ecdsa.PrivateKey
}

var _ signature.SignerVerifier = (*Signer)(nil)

// LoadKey reads a private key in cosign's encrypted PEM format, as cosign
// generate-key-pair writes it, with its password.
func LoadKey(key, password []byte) (*Signer, error) {
	sv, err := cosign.LoadPrivateKey(key, password, nil)
	if err != nil {
		return nil, fmt.Errorf("loading the signing key: %w", err)
	}
	s := &Signer{SignerVerifier: sv}
	// cosign.LoadPrivateKey decrypted it already; it keeps the key to itself.
	p, _ := pem.Decode(key)
	der, err := encrypted.Decrypt(p.Bytes, password)
	if err != nil {
		return nil, fmt.Errorf("loading the signing key: %w", err)
	}
	pk, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("loading the signing key: %w", err)
	}
	if k, ok := pk.(*ecdsa.PrivateKey); ok {
		s.ecdsa = k
	}
	return s, nil
}

// SignMessage signs the SHA-256 of message: with an ECDSA key
// deterministically, else as cosign does (Ed25519ph and RSA PKCS #1 v1.5
// are deterministic already).
func (s *Signer) SignMessage(message io.Reader, opts ...signature.SignOption) ([]byte, error) {
	if s.ecdsa == nil {
		return s.SignerVerifier.SignMessage(message, opts...)
	}
	h := sha256.New()
	if _, err := io.Copy(h, message); err != nil {
		return nil, err
	}
	// A nil random source asks crypto/ecdsa for RFC 6979.
	return s.ecdsa.Sign(nil, h.Sum(nil), crypto.SHA256)
}

// LoadVerifier reads a public key in PEM, as cosign verify --key does.
func LoadVerifier(pub []byte) (signature.Verifier, error) {
	v, err := csig.LoadPublicKeyRaw(pub, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("reading the public key: %w", err)
	}
	return v, nil
}
