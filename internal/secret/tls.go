package secret

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// TLS is a TLS client configuration whose files are read again for each
// connection: the CA bundle the peer is verified against (none: the
// system's roots) and the client certificate and key of mutual TLS. Each
// connection gets a tls.Config of its own, verifying the peer's name
// (ServerName, else the host dialed) as crypto/tls always does.
type TLS struct {
	CAFile, CertFile, KeyFile string
	// ServerName is the name the peer's certificate must hold; empty: the
	// host dialed.
	ServerName string
	start      map[string][sha256.Size]byte // each file's content at NewTLS
}

// NewTLS reads the files once, so that a missing file, a bundle without a
// certificate or a key that does not match its certificate is an error at
// start. CertFile and KeyFile go together.
func NewTLS(caFile, certFile, keyFile, serverName string) (*TLS, error) {
	t := &TLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: serverName, start: map[string][sha256.Size]byte{}}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate and its key go together")
	}
	for _, path := range []string{caFile, certFile, keyFile} {
		if path == "" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		t.start[path] = sha256.Sum256(b)
	}
	if _, _, err := t.config(""); err != nil {
		return nil, err
	}
	return t, nil
}

// config is a tls.Config for one connection to host, made from the files
// as they are now, and what was read from each.
func (t *TLS) config(host string) (*tls.Config, []Use, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	var uses []Use
	read := func(path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		uses = append(uses, Use{Path: path, At: time.Now(), Changed: sha256.Sum256(b) != t.start[path]})
		return b, nil
	}
	if t.CAFile != "" {
		pem, err := read(t.CAFile)
		if err != nil {
			return nil, uses, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, uses, fmt.Errorf("CA bundle %s: no PEM certificate in it", t.CAFile)
		}
	}
	if t.CertFile != "" {
		certPEM, err := read(t.CertFile)
		if err != nil {
			return nil, uses, err
		}
		keyPEM, err := read(t.KeyFile)
		if err != nil {
			return nil, uses, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, uses, fmt.Errorf("client certificate %s and key %s: %w", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, uses, nil
}

// dialTimeout bounds connecting and the TLS handshake, as franz-go's own
// dialer does by default.
const dialTimeout = 10 * time.Second

// DialContext connects to addr and makes the TLS handshake with the files
// as they are now. A failed handshake names what was read from each file,
// so that a certificate rotated on one side only is told apart from a
// wrong one.
func (t *TLS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	cfg, uses, err := t.config(host)
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout}, Config: cfg}
	conn, err := d.DialContext(ctx, network, addr)
	var opErr *net.OpError
	if err != nil && len(uses) > 0 && !(errors.As(err, &opErr) && opErr.Op == "dial") {
		return nil, fmt.Errorf("%w (TLS files: %s)", err, joinUses(uses))
	}
	return conn, err
}

// joinUses joins uses for a message.
func joinUses(uses []Use) string {
	s := make([]string, len(uses))
	for i, u := range uses {
		s[i] = u.String()
	}
	return strings.Join(s, "; ")
}
