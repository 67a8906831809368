package testenv

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// OIDC is an identity provider on loopback for OAUTHBEARER tests: a JWKS
// endpoint a broker checks tokens against, and a token endpoint that
// grants client credentials with RS256 JWTs whose sub is the client id.
type OIDC struct {
	JWKSURL, TokenURL string
	key               *rsa.PrivateKey
	srv               *httptest.Server
	clients           map[string]string
	// Lifetime of the tokens the endpoint grants; tests may change it.
	lifetime atomic.Int64
	mu       sync.Mutex
	issued   []time.Time // expiry of each token granted
}

// StartOIDC serves the endpoints until the test ends. clients are client
// ids with their secrets; tokens live for lifetime.
func StartOIDC(t testing.TB, lifetime time.Duration, clients map[string]string) *OIDC {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	o := &OIDC{key: key, clients: clients}
	o.lifetime.Store(int64(lifetime))
	mux := http.NewServeMux()
	mux.HandleFunc("/jwks", o.jwks)
	mux.HandleFunc("/token", o.token)
	o.srv = httptest.NewServer(mux)
	t.Cleanup(o.srv.Close)
	o.JWKSURL, o.TokenURL = o.srv.URL+"/jwks", o.srv.URL+"/token"
	return o
}

// SetLifetime changes the lifetime of the tokens granted from now on.
func (o *OIDC) SetLifetime(d time.Duration) { o.lifetime.Store(int64(d)) }

// Issued is the expiry of every token granted so far, in order.
func (o *OIDC) Issued() []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Time(nil), o.issued...)
}

const oidcKeyID = "walstream-test"

// OIDCAudience and OIDCIssuer are the aud and iss claims of OIDC's
// tokens, which a broker of KafkaSecurity.JWKSURL expects (Kafka 4.4
// refuses to start without an expected audience and issuer).
const (
	OIDCAudience = "walstream-test-kafka"
	OIDCIssuer   = "walstream-test-idp"
)

func (o *OIDC) jwks(w http.ResponseWriter, _ *http.Request) {
	enc := base64.RawURLEncoding.EncodeToString
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": oidcKeyID,
		"n": enc(o.key.N.Bytes()), "e": enc(big.NewInt(int64(o.key.E)).Bytes()),
	}}})
}

func (o *OIDC) token(w http.ResponseWriter, r *http.Request) {
	id, secret, ok := r.BasicAuth()
	if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") != "client_credentials" {
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	if !ok {
		id, secret = r.Form.Get("client_id"), r.Form.Get("client_secret")
	}
	if want, known := o.clients[id]; !known || want != secret {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client"}`)
		return
	}
	lifetime := time.Duration(o.lifetime.Load())
	tok, exp, err := o.Sign(id, lifetime)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	o.mu.Lock()
	o.issued = append(o.issued, exp)
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(lifetime.Seconds())})
}

// Sign makes a JWT for sub that expires after lifetime.
func (o *OIDC) Sign(sub string, lifetime time.Duration) (string, time.Time, error) {
	now := time.Now()
	exp := now.Add(lifetime)
	enc := base64.RawURLEncoding.EncodeToString
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": oidcKeyID})
	claims, _ := json.Marshal(map[string]any{"sub": sub, "iss": OIDCIssuer, "aud": OIDCAudience, "iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(),
		"exp": exp.Unix(), "jti": fmt.Sprintf("%d", now.UnixNano()), "scope": "kafka"})
	signing := enc(header) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, o.key, crypto.SHA256, digest[:])
	if err != nil {
		return "", time.Time{}, err
	}
	return signing + "." + enc(sig), exp, nil
}
