package kafka

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	initial := func() string {
		t.Helper()
		_, msg, err := c.shared.Authenticate(context.Background(), "broker:9092")
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	if got := initial(); got != "\x00walstream\x00first" {
		t.Errorf("first authentication sent %q", got)
	}
	if err := os.WriteFile(path, []byte("second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := initial(); got != "\x00walstream\x00second" {
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
