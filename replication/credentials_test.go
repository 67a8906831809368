package replication

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"

	"github.com/walstream/walstream/internal/secret"
	"github.com/walstream/walstream/internal/testenv"
)

func TestRegionOf(t *testing.T) {
	for host, want := range map[string]string{
		"orders.c9akciq32.eu-west-1.rds.amazonaws.com":                  "eu-west-1",
		"orders.cluster-c9akciq32.us-east-2.rds.amazonaws.com":          "us-east-2",
		"orders.cluster-ro-c9akciq32.ap-southeast-1.rds.amazonaws.com.": "ap-southeast-1",
		"orders-proxy.proxy-c9akciq32.us-gov-west-1.rds.amazonaws.com":  "us-gov-west-1",
		"orders.c9akciq32.cn-north-1.rds.amazonaws.com.cn":              "cn-north-1",
		"ORDERS.C9AKCIQ32.EU-WEST-1.RDS.AMAZONAWS.COM":                  "eu-west-1",
		"rds.amazonaws.com": "",
		"db.example.com":    "",
		"127.0.0.1":         "",
		"eu-west-1.rds.amazonaws.com.example.com": "",
	} {
		if got := RegionOf(host); got != want {
			t.Errorf("RegionOf(%q) = %q, want %q", host, got, want)
		}
	}
}

// IAM tokens travel as the password: a connection string that may go
// without TLS, or to another host than the one a token was signed for, is
// refused before any connection.
func TestIAMRefusals(t *testing.T) {
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")
	for _, tc := range []struct{ url, want string }{
		{"postgres://walstream@db.abc.eu-west-1.rds.amazonaws.com/app?sslmode=disable", "needs TLS"},
		{"postgres://walstream@db.abc.eu-west-1.rds.amazonaws.com/app?sslmode=prefer", "needs TLS"},
		{"postgres://walstream@db.abc.eu-west-1.rds.amazonaws.com/app", "needs TLS"}, // libpq's default, prefer
		{"postgres://walstream@a.abc.eu-west-1.rds.amazonaws.com,b.abc.eu-west-1.rds.amazonaws.com/app?sslmode=require", "one endpoint"},
		{"postgres://walstream@db.example.com/app?sslmode=require", "no RDS endpoint"},
	} {
		cfg, err := pgx.ParseConfig(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Credentials{IAM: &IAMAuth{Credentials: creds}}.Install(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.url, err, tc.want)
		}
	}
	cfg, _ := pgx.ParseConfig("postgres://walstream@db.abc.eu-west-1.rds.amazonaws.com/app?sslmode=verify-full")
	if _, err := (Credentials{IAM: &IAMAuth{Credentials: creds}}).Install(context.Background(), cfg); err != nil {
		t.Errorf("verify-full: %v", err)
	}
}

// testKeys are the AWS credentials the RDS stand-ins take tokens of.
var testKeys = aws.Credentials{AccessKeyID: "AKIDWALSTREAMTEST", SecretAccessKey: "rds-Sekr1t-key"}

// rdsProxy is an RDS stand-in for region eu-west-1 in front of a new
// Postgres, with a certificate from a CA named caName.
func rdsProxy(t *testing.T, caName string) (*testenv.RDSProxy, *testenv.CA) {
	ca := testenv.NewCA(t, caName)
	return testenv.StartRDSProxy(t, testenv.StartPostgres(t), ca, "eu-west-1", testKeys), ca
}

// installed is the config of url with creds installed.
func installed(t *testing.T, url string, creds Credentials) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = creds.Install(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// iam signs with testKeys for region.
func iam(region string) Credentials {
	return Credentials{IAM: &IAMAuth{Region: region, Credentials: credentials.StaticCredentialsProvider{Value: testKeys}}}
}

// TestIAMAuth: through a stand-in that checks tokens as RDS does, both
// kinds of connection authenticate with a token each; a wrong region and a
// clock that disagrees are refused, the error naming what walstream signed
// and never the token.
func TestIAMAuth(t *testing.T) {
	proxy, ca := rdsProxy(t, "rds-test-ca")
	ctx := context.Background()
	url := fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=verify-full&sslrootcert=%s", proxy.Host, proxy.Port, ca.CertFile)
	install := func(region string) *pgx.ConnConfig { return installed(t, url, iam(region)) }

	cfg := install("eu-west-1")
	conn, err := Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connecting with an IAM token: %v", err)
	}
	conn.Close(ctx)
	rconn, err := Dial(ctx, &cfg.Config)
	if err != nil {
		t.Fatalf("replication connection with an IAM token: %v", err)
	}
	if _, err := rconn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll(); err != nil {
		t.Fatalf("IDENTIFY_SYSTEM through the stand-in: %v", err)
	}
	rconn.Close(ctx)
	if n := proxy.Accepted(); n != 2 {
		t.Errorf("%d connections accepted, want 2", n)
	}

	refused := func(cfg *pgx.ConnConfig, want ...string) {
		t.Helper()
		_, err := Connect(ctx, cfg)
		var ce *ConnectError
		if !errors.As(err, &ce) {
			t.Fatalf("err = %v, want a ConnectError", err)
		}
		for _, w := range append(want, `PAM authentication failed for user "postgres"`, "IAM token for user postgres at "+proxy.Host) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "X-Amz-Signature") || strings.Contains(err.Error(), testKeys.SecretAccessKey) {
			t.Errorf("error %q holds the token", err)
		}
	}
	refused(install("us-east-1"), "signed for region us-east-1")
	proxy.SetSkew(20 * time.Minute)
	refused(install("eu-west-1"), "signed for region eu-west-1 at ", "by this machine's clock")
	proxy.SetSkew(0)
	refusals := proxy.Refusals()
	if len(refusals) != 2 || !strings.Contains(refusals[0], "credential scope") || !strings.Contains(refusals[1], "expired") {
		t.Errorf("the stand-in refused %q, want a wrong credential scope, then an expired token", refusals)
	}
	conn, err = Connect(ctx, install("eu-west-1"))
	if err != nil {
		t.Fatalf("after the clock agrees again: %v", err)
	}
	conn.Close(ctx)
}

// TestPasswordFileRotation: each connection reads the password file anew;
// one refused after a change names the file, when it was read and that it
// changed since start.
func TestPasswordFileRotation(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.Settings("password_encryption = 'scram-sha-256'"))
	pg.Exec("postgres", "CREATE ROLE rotated LOGIN REPLICATION PASSWORD 'first-Sekr1t'")
	pg.PrependHBA("host all rotated 127.0.0.1/32 scram-sha-256")
	file := filepath.Join(t.TempDir(), "password")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first-Sekr1t")
	f, err := secret.NewFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg := installed(t, pg.URL("rotated", "postgres"), Credentials{PasswordFile: f})
	ctx := context.Background()
	connect := func() error {
		c, err := Connect(ctx, cfg)
		if err == nil {
			c.Close(ctx)
		}
		return err
	}
	if err := connect(); err != nil {
		t.Fatal(err)
	}
	write("second-Sekr1t")
	err = connect()
	for _, w := range []string{"password authentication failed", "with the password read from " + file, "(changed since start)"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("with the file rotated before the role: %v, want it to say %q", err, w)
		}
	}
	pg.Exec("postgres", "ALTER ROLE rotated PASSWORD 'second-Sekr1t'")
	if err := connect(); err != nil {
		t.Errorf("after the rotation: %v", err)
	}
	rconn, err := Dial(ctx, &cfg.Config)
	if err != nil {
		t.Fatalf("replication connection after the rotation: %v", err)
	}
	rconn.Close(ctx)
}

// TestRDSCABundle: a server certificate from a CA that sslrootcert lacks
// fails naming the CA and where AWS's bundle is; the bundle mounted in
// its place (as Kubernetes swaps a Secret's ..data link) is read by the
// next connection, without a new config.
func TestRDSCABundle(t *testing.T) {
	proxy, ca := rdsProxy(t, "rds-ca-rsa2048-g1")
	dir := t.TempDir()
	mount := func(caFile, name string) {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(dir, name)
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "global-bundle.pem"), pem, 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	mount(testenv.NewCA(t, "some-other-ca").CertFile, "..2026_01")
	if err := os.Symlink("..data/global-bundle.pem", filepath.Join(dir, "global-bundle.pem")); err != nil {
		t.Fatal(err)
	}
	cfg := installed(t, fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=verify-full&sslrootcert=%s",
		proxy.Host, proxy.Port, filepath.Join(dir, "global-bundle.pem")), iam("eu-west-1"))
	ctx := context.Background()
	_, err := Connect(ctx, cfg)
	var unknown *UnknownCAError
	if !errors.As(err, &unknown) || unknown.Issuer != "CN=rds-ca-rsa2048-g1" {
		t.Fatalf("err = %v, want an UnknownCAError naming CN=rds-ca-rsa2048-g1", err)
	}
	for _, w := range []string{"certificate signed by unknown authority", `issued by "CN=rds-ca-rsa2048-g1"`,
		"https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem", "sslrootcert"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	mount(ca.CertFile, "..2026_02")
	conn, err := Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("after the bundle was replaced: %v", err)
	}
	conn.Close(ctx)
}
