package secret

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// TLS is a TLS client configuration whose files are read again for each
// connection: the CA bundle the peer is verified against (none: the
// system's roots) and the client certificate and key of mutual TLS. Each
// connection gets a tls.Config of its own, verifying the peer's name
// (ServerName, else the host dialed) as crypto/tls always does.
type TLS struct {
	CA, Cert, Key *File // nil: none
	// ServerName is the name the peer's certificate must hold; empty: the
	// host dialed.
	ServerName string
}

// NewTLS reads the files once, so that a missing file, a bundle without a
// certificate or a key that does not match its certificate is an error at
// start. An empty path is no file; certFile and keyFile go together.
func NewTLS(caFile, certFile, keyFile, serverName string) (*TLS, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate and its key go together")
	}
	t := &TLS{ServerName: serverName}
	for _, f := range []struct {
		path string
		to   **File
	}{{caFile, &t.CA}, {certFile, &t.Cert}, {keyFile, &t.Key}} {
		if f.path == "" {
			continue
		}
		var err error
		if *f.to, err = NewFile(f.path); err != nil {
			return nil, err
		}
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
	read := func(f *File) ([]byte, error) {
		b, u, err := f.content()
		if err == nil {
			uses = append(uses, u)
		}
		return b, err
	}
	if t.CA != nil {
		pem, err := read(t.CA)
		if err != nil {
			return nil, uses, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, uses, fmt.Errorf("CA bundle %s: no PEM certificate in it", t.CA.Path)
		}
	}
	if t.Cert != nil {
		certPEM, err := read(t.Cert)
		if err != nil {
			return nil, uses, err
		}
		keyPEM, err := read(t.Key)
		if err != nil {
			return nil, uses, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, uses, fmt.Errorf("client certificate %s and key %s: %w", t.Cert.Path, t.Key.Path, err)
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
