package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestKafkaSecurity: the secured listener speaks TLS from a PEM keystore,
// takes SCRAM users made at format time and OAUTHBEARER JWTs checked
// against a JWKS endpoint, and the StandardAuthorizer lets a super user do
// anything and a user without ACLs nothing.
func TestKafkaSecurity(t *testing.T) {
	ca := NewCA(t, "kafka-security-ca")
	cert, key := ca.Issue(t, "kafka", "127.0.0.1")
	idp := StartOIDC(t, time.Hour, map[string]string{"svc": "svc-secret"})
	k := StartKafka(t, KafkaConfig{Security: &KafkaSecurity{CertFile: cert, KeyFile: key,
		ScramUsers: map[string]string{"admin": "admin-secret", "alice": "alice-secret"},
		JWKSURL:    idp.JWKSURL, Authorizer: true, SuperUsers: []string{"User:admin"}}})
	roots := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.CertFile)
	roots.AppendCertsFromPEM(pem)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := func(opts ...kgo.Opt) *kadm.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.SecureAddr()),
			kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	admin := client(kgo.SASL(scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha512Mechanism()))
	if _, err := admin.CreateTopic(ctx, 1, 1, nil, "secured"); err != nil {
		t.Fatalf("super user creating a topic: %v", err)
	}
	tok, _, err := idp.Sign("svc", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, adm := range map[string]*kadm.Client{
		"SCRAM alice":     client(kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism())),
		"OAUTHBEARER svc": client(kgo.SASL(oauth.Auth{Token: tok}.AsMechanism())),
	} {
		resp, err := adm.CreateTopic(ctx, 1, 1, nil, "not-allowed")
		if err == nil {
			err = resp.Err
		}
		if !errors.Is(err, kerr.TopicAuthorizationFailed) && !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			t.Errorf("%s without ACLs creating a topic: %v, want an authorization error", name, err)
		}
	}
	_, err = client(kgo.SASL(scram.Auth{User: "alice", Pass: "wrong"}.AsSha256Mechanism())).BrokerMetadata(ctx)
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Errorf("wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	// Kafka allows 30 s of clock skew past exp. It refuses a token with
	// an RFC 7628 error message in the exchange, not an error code.
	expired, _, _ := idp.Sign("svc", -time.Minute)
	_, err = client(kgo.SASL(oauth.Auth{Token: expired}.AsMechanism())).BrokerMetadata(ctx)
	if err == nil || !strings.Contains(err.Error(), "unexpected data in oauth response") {
		t.Errorf("expired token: %v, want refused", err)
	}
}
