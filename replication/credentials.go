package replication

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	rdsauth "github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walstream/walstream/internal/secret"
)

// Credentials are what walstream's connections to Postgres present that
// may change while it runs. Install puts them into a connection config, so
// that every connection made from it, by Connect, Dial or anything else,
// gets them anew: a rotated password, a fresh IAM token, the TLS files of
// the connection string as they are now.
type Credentials struct {
	// PasswordFile, when set, holds the password, read again for each
	// connection.
	PasswordFile *secret.File
	// IAM, when set, signs an RDS IAM database authentication token for
	// each connection instead of a password.
	IAM *IAMAuth
}

// IAMAuth is Amazon RDS and Aurora IAM database authentication: a token
// signed with the AWS credentials of the process (SigV4, service rds-db)
// for the endpoint, port and database user, sent as the password over TLS.
// A token lives 15 minutes and is only checked when a connection opens,
// so each connection gets a new one and none is kept.
type IAMAuth struct {
	// Region is the endpoint's AWS region; empty: the one its host name
	// holds (RegionOf).
	Region string
	// Credentials sign the tokens; nil: the AWS SDK's default chain
	// (environment, shared files, web identity as IRSA gives it, container
	// credentials as EKS Pod Identity and ECS give them, instance role),
	// which caches them and fetches new ones before they expire.
	Credentials aws.CredentialsProvider
}

// iamTokenLife is how long RDS accepts a token after it was signed.
const iamTokenLife = 15 * time.Minute

// RegionOf is the AWS region an RDS or Aurora endpoint's host name holds:
// <id>.<hash>.<region>.rds.amazonaws.com (instances, Aurora's cluster-,
// cluster-ro- and custom endpoints, RDS Proxy), .amazonaws.com.cn in
// China; "" for any other host.
func RegionOf(host string) string {
	labels := strings.Split(strings.ToLower(strings.TrimSuffix(host, ".")), ".")
	if n := len(labels); n > 0 && labels[n-1] == "cn" {
		labels = labels[:n-1]
	}
	n := len(labels)
	if n < 5 || labels[n-3] != "rds" || labels[n-2] != "amazonaws" || labels[n-1] != "com" {
		return ""
	}
	return labels[n-4]
}

// Install returns a copy of cfg whose every connection attempt reads the
// password file anew or signs a new IAM token, and whose TLS handshakes
// read the files the connection string names (sslrootcert, sslcert,
// sslkey) anew. IAM authentication is refused where it could send its
// token unencrypted (sslmode disable, allow or prefer, libpq's default) or
// to a host it was not signed for (more than one host).
func (c Credentials) Install(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.ConnConfig, error) {
	cfg = cfg.Copy()
	reloadTLS(cfg)
	var iam *iamSigner
	if c.IAM != nil {
		var err error
		if iam, err = c.IAM.signer(ctx, &cfg.Config); err != nil {
			return nil, err
		}
	}
	if c.PasswordFile == nil && iam == nil {
		return cfg, nil
	}
	next := cfg.AfterNetConnect
	cfg.AfterNetConnect = func(ctx context.Context, pc *pgconn.Config, conn net.Conn) (net.Conn, error) {
		// pc is the attempt's own config (Connect and Dial copy theirs,
		// pgx copies again), whose password pgconn sends next.
		if iam != nil {
			if err := iam.sign(ctx, pc); err != nil {
				return nil, err
			}
		} else {
			pass, u, err := c.PasswordFile.Read()
			if err != nil {
				return nil, err
			}
			pc.Password = pass
			noteUse(ctx, "with the password "+u.String())
		}
		if next != nil {
			return next(ctx, pc, conn)
		}
		return conn, nil
	}
	return cfg, nil
}

// iamSigner signs the tokens of one endpoint.
type iamSigner struct {
	region string
	creds  aws.CredentialsProvider
}

func (a *IAMAuth) signer(ctx context.Context, cfg *pgconn.Config) (*iamSigner, error) {
	for _, fb := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...) {
		if fb.TLSConfig == nil {
			return nil, errors.New("IAM database authentication sends its token as the password and needs TLS, but the connection string's sslmode " +
				"(disable, allow or prefer, the default) may connect without it: set sslmode=verify-full and sslrootcert to AWS's CA bundle " +
				"(see docs/postgres.md, Amazon RDS and Aurora)")
		}
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			return nil, fmt.Errorf("IAM database authentication signs its token for one endpoint, but the connection string names %s and %s: give the cluster's writer endpoint alone",
				net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))))
		}
	}
	s := &iamSigner{region: a.Region, creds: a.Credentials}
	if s.region == "" {
		if s.region = RegionOf(cfg.Host); s.region == "" {
			return nil, fmt.Errorf("IAM database authentication needs the AWS region, and host %s is no RDS endpoint (<id>.<hash>.<region>.rds.amazonaws.com) to take it from: set it", cfg.Host)
		}
	}
	if s.creds == nil {
		ac, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) {
			// Renewed a minute early: a token signed with credentials
			// about to lapse could be refused on its way.
			o.ExpiryWindow = time.Minute
		}))
		if err != nil {
			return nil, fmt.Errorf("IAM database authentication: loading the AWS configuration: %w", err)
		}
		if s.creds = ac.Credentials; s.creds == nil {
			return nil, errors.New("IAM database authentication: no AWS credentials: none in the environment, the shared files, web identity, container or instance metadata")
		}
	}
	return s, nil
}

// sign sets the attempt's password to a new token.
func (s *iamSigner) sign(ctx context.Context, pc *pgconn.Config) error {
	endpoint := net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))
	signed := time.Now()
	tok, err := rdsauth.BuildAuthToken(ctx, endpoint, s.region, pc.User, s.creds)
	if err != nil {
		return fmt.Errorf("signing an IAM database authentication token for user %s at %s in region %s: %w", pc.User, endpoint, s.region, err)
	}
	pc.Password = tok
	noteUse(ctx, fmt.Sprintf("with an IAM token for user %s at %s signed for region %s at %s by this machine's clock; RDS takes a token for %s after its signing time, by its own clock",
		pc.User, endpoint, s.region, signed.UTC().Format("15:04:05 UTC"), iamTokenLife))
	return nil
}

// use is what a connection attempt authenticated with, for its error:
// never the secret itself. Connect and Dial put one in the context they
// connect with; Install's hook fills it in.
type use struct{ what string }

type useKey struct{}

func withUse(ctx context.Context) (context.Context, *use) {
	u := &use{}
	return context.WithValue(ctx, useKey{}, u), u
}

func noteUse(ctx context.Context, what string) {
	if u, ok := ctx.Value(useKey{}).(*use); ok {
		u.what = what
	}
}

// reloadTLS replaces each TLS config of cfg that verifies the server or
// presents a client certificate with one that reads the files anew for
// each handshake: pgconn reads sslrootcert, sslcert and sslkey once, when
// it parses the connection string, so walstream parses it again per
// handshake and takes the TLS config of the same attempt (the primary
// host's, then each fallback's, in the order the string gives them).
func reloadTLS(cfg *pgx.ConnConfig) {
	connString := cfg.ConnString()
	if connString == "" {
		return
	}
	configs := []**tls.Config{&cfg.TLSConfig}
	for _, fb := range cfg.Fallbacks {
		configs = append(configs, &fb.TLSConfig)
	}
	for i, p := range configs {
		orig := *p
		if orig == nil || (orig.InsecureSkipVerify && orig.VerifyPeerCertificate == nil && len(orig.Certificates) == 0) {
			continue // no TLS, or sslmode=require without files: nothing to read
		}
		fresh := func() (*tls.Config, error) {
			pc, err := pgconn.ParseConfig(connString)
			if err != nil {
				return nil, fmt.Errorf("reading the TLS files of the connection string again: %w", err)
			}
			all := []*tls.Config{pc.TLSConfig}
			for _, fb := range pc.Fallbacks {
				all = append(all, fb.TLSConfig)
			}
			if i >= len(all) || all[i] == nil {
				return nil, errors.New("reading the TLS files of the connection string again: its TLS settings changed")
			}
			return all[i], nil
		}
		shell := orig.Clone() // keeps the name sent (SNI) and the protocol settings
		shell.InsecureSkipVerify = true
		shell.VerifyPeerCertificate = nil
		shell.Certificates = nil
		shell.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			f, err := fresh()
			if err != nil || len(f.Certificates) == 0 {
				return &tls.Certificate{}, err
			}
			return &f.Certificates[0], nil
		}
		shell.VerifyConnection = func(cs tls.ConnectionState) error {
			f, err := fresh()
			if err != nil {
				return err
			}
			return verifyServer(f, cs)
		}
		*p = shell
	}
}

// verifyServer verifies the server's certificate as f, a config pgconn
// made from the connection string, would: the chain against its roots
// (sslrootcert; none: the system's) for sslmode=verify-ca and
// verify-full, and the host name too for verify-full.
func verifyServer(f *tls.Config, cs tls.ConnectionState) error {
	if f.InsecureSkipVerify && f.VerifyPeerCertificate == nil {
		return nil // sslmode=require: encrypted, not verified, as libpq
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: f.RootCAs, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if !f.InsecureSkipVerify {
		opts.DNSName = f.ServerName // verify-full
	}
	leaf := cs.PeerCertificates[0]
	_, err := leaf.Verify(opts)
	var unknown x509.UnknownAuthorityError
	if errors.As(err, &unknown) {
		return &UnknownCAError{Issuer: leaf.Issuer.String(), Subject: leaf.Subject.String(), Err: err}
	}
	return err
}

// UnknownCAError is a server certificate issued by a CA that the roots
// it was verified against (sslrootcert, or the system's) lack.
type UnknownCAError struct {
	Issuer, Subject string
	Err             error
}

func (e *UnknownCAError) Error() string {
	return fmt.Sprintf("%v: the server's certificate (%s) is issued by %q, which is not in sslrootcert (the system's roots when it is unset); "+
		"for Amazon RDS and Aurora, mount AWS's bundle of every region's CAs, https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem, "+
		"and set sslrootcert to it with sslmode=verify-full (see docs/postgres.md, Amazon RDS and Aurora)", e.Err, e.Subject, e.Issuer)
}

func (e *UnknownCAError) Unwrap() error { return e.Err }
