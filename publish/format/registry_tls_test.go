package format

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/walstream/walstream/internal/secret"
	"github.com/walstream/walstream/internal/testenv"
)

// The schema registry's connections read the CA bundle and the client
// certificate anew: a certificate reissued into the same files is the
// one the next connection presents.
func TestRegistryTLSRotation(t *testing.T) {
	serverCA, clientCA := testenv.NewCA(t, "registry-ca"), testenv.NewCA(t, "registry-client-ca")
	seen := make(chan string, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.TLS.PeerCertificates[0].Subject.CommonName
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"compatibilityLevel":"BACKWARD"}`)
	}))
	srv.TLS = serverCA.ServerTLS(t, "127.0.0.1")
	srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	srv.TLS.ClientCAs = x509.NewCertPool()
	pem, _ := os.ReadFile(clientCA.CertFile)
	srv.TLS.ClientCAs.AppendCertsFromPEM(pem)
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	place := func(cert, key string) {
		for from, to := range map[string]string{cert: "tls.crt", key: "tls.key"} {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, to), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	place(clientCA.Issue(t, "walstream-1"))
	files, err := secret.NewTLS(serverCA.CertFile, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), "")
	if err != nil {
		t.Fatal(err)
	}
	s := RegistrySettings{URLs: []string{srv.URL}, TLS: files}
	for _, want := range []string{"walstream-1", "walstream-2"} {
		if _, err := CheckRegistry(context.Background(), s); err != nil {
			t.Fatalf("checking the registry as %s: %v", want, err)
		}
		if got := <-seen; got != want {
			t.Errorf("the registry saw %s, want %s", got, want)
		}
		place(clientCA.Issue(t, "walstream-2"))
	}
}
