package kafka

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walstream/walstream/internal/secret"
)

// The SASL password file is read for every authentication, and a refusal
// says which content was sent, when it was read and that it changed.
func TestSASLPasswordFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(path, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := secret.NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := Settings{SASLMechanism: "plain", SASLUser: "walstream", SASLPasswordFile: f}.Shared()
	if err := c.CheckSASL(); err != nil {
		t.Fatal(err)
	}
	if got := saslStart(t, c, "broker:9092"); got != "\x00walstream\x00first" {
		t.Errorf("first authentication sent %q", got)
	}
	if err := os.WriteFile(path, []byte("second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := saslStart(t, c, "broker:9092"); got != "\x00walstream\x00second" {
		t.Errorf("after the rotation sent %q, want the new password", got)
	}
	refused := fmt.Errorf("producing: %w", kerr.SaslAuthenticationFailed)
	msg := c.Explain(refused).Error()
	for _, w := range []string{"SASL_AUTHENTICATION_FAILED", "SASL PLAIN as walstream with the password read from " + path, "(changed since start)"} {
		if !strings.Contains(msg, w) {
			t.Errorf("Explain = %q, want it to say %q", msg, w)
		}
	}
	if strings.Contains(msg, "second") {
		t.Errorf("Explain = %q holds the password", msg)
	}
	if other := fmt.Errorf("dialing: refused"); c.Explain(other) != other {
		t.Error("Explain changed an error that is no SASL refusal")
	}
}

// The OAuth client secret file is read for every token fetched: a secret
// rotated at the identity provider and in the file is used by the next
// fetch, and a refusal names the file.
func TestOAuthClientSecretFile(t *testing.T) {
	var want atomic.Value
	want.Store("first-client-Sekr1t")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pass, _ := r.BasicAuth(); pass != want.Load().(string) {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"tok","token_type":"Bearer"}`) // no expiry: fetched for every authentication
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "client-secret")
	os.WriteFile(path, []byte("first-client-Sekr1t\n"), 0o600)
	f, err := secret.NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := Settings{SASLMechanism: SASLOAuthBearer, OAuth: OAuthSettings{TokenURL: srv.URL, ClientID: "walstream", ClientSecretFile: f}}.Shared()
	if err := c.CheckSASL(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.shared.Authenticate(context.Background(), "k:9092"); err != nil {
		t.Fatal(err)
	}
	want.Store("second-client-Sekr1t")
	_, _, err = c.shared.Authenticate(context.Background(), "k:9092")
	if err == nil || !strings.Contains(err.Error(), "invalid_client") || !strings.Contains(err.Error(), "client secret read from "+path) ||
		!strings.Contains(err.Error(), "(as at start)") {
		t.Errorf("rotated at the provider only: %v, want the refusal naming the file as at start", err)
	}
	os.WriteFile(path, []byte("second-client-Sekr1t\n"), 0o600)
	if _, _, err := c.shared.Authenticate(context.Background(), "k:9092"); err != nil {
		t.Errorf("after the file was rotated too: %v", err)
	}
}
