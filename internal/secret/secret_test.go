package secret

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walstream/walstream/internal/testenv"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	write(t, to, string(b))
}

func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "password")
	write(t, path, "first\r\n")
	f, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, u, err := f.Read(); err != nil || s != "first" || u.Changed || !strings.Contains(u.String(), "read from "+path+" at ") ||
		!strings.HasSuffix(u.String(), "(as at start)") {
		t.Errorf("Read = %q, %v, %v; want first, as at start", s, u, err)
	}
	write(t, path, "second\n")
	if s, u, err := f.Read(); err != nil || s != "second" || !u.Changed || !strings.HasSuffix(f.Last().String(), "(changed since start)") {
		t.Errorf("Read = %q, %v, %v; want second, changed since start", s, u, err)
	}
	if _, err := NewFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("NewFile of a missing file: no error")
	}
}

// TestTLSReload: every dial reads the CA bundle and the client certificate
// anew, so a replaced bundle verifies a server the old one did not, and
// the server sees the reissued client certificate; the host name is
// verified throughout.
func TestTLSReload(t *testing.T) {
	serverCA, otherCA := testenv.NewCA(t, "server-ca"), testenv.NewCA(t, "other-ca")
	clientCA := testenv.NewCA(t, "client-ca")
	srv := serverCA.ServerTLS(t, "127.0.0.1")
	srv.ClientAuth = tls.RequireAndVerifyClientCert
	srv.ClientCAs = x509.NewCertPool()
	pem, _ := os.ReadFile(clientCA.CertFile)
	srv.ClientCAs.AppendCertsFromPEM(pem)
	l, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seen := make(chan string, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				seen <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			c.Close()
		}
	}()

	dir := t.TempDir()
	ca, cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, otherCA.CertFile, ca)
	c1, k1 := clientCA.Issue(t, "walstream-1")
	copyFile(t, c1, cert)
	copyFile(t, k1, key)
	cfg, err := NewTLS(ca, cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dial := func(addr string) error {
		c, err := cfg.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	err = dial(l.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") || !strings.Contains(err.Error(), "read from "+ca) {
		t.Fatalf("with another CA's bundle: %v, want unknown authority naming %s", err, ca)
	}
	copyFile(t, serverCA.CertFile, ca)
	if err := dial(l.Addr().String()); err != nil {
		t.Fatalf("after the bundle was replaced: %v", err)
	}
	if got := <-seen; got != "walstream-1" {
		t.Errorf("server saw %s, want walstream-1", got)
	}
	c2, k2 := clientCA.Issue(t, "walstream-2")
	copyFile(t, c2, cert)
	copyFile(t, k2, key)
	if err := dial(l.Addr().String()); err != nil {
		t.Fatalf("after the client certificate was reissued: %v", err)
	}
	if got := <-seen; got != "walstream-2" {
		t.Errorf("server saw %s, want the reissued walstream-2", got)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	if err := dial(net.JoinHostPort("localhost", port)); err == nil || !strings.Contains(err.Error(), "wanted to match localhost") {
		t.Errorf("dialing a name the certificate lacks: %v, want the name refused", err)
	}
}
