package kafka

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// jwt is an unsigned JWT expiring at exp: enough for the client, which
// reads exp and never verifies.
func jwt(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc(fmt.Appendf(nil, `{"sub":"walstream","exp":%d}`, exp.Unix())) + ".sig"
}

func authenticate(t *testing.T, c Settings, host string) ([]byte, error) {
	t.Helper()
	_, msg, err := c.mechanism().Authenticate(context.Background(), host)
	return msg, err
}

// TestOAuthTokenFile: the token is read at every authentication, so a
// renewed file is used at once; an expired or missing token is an error
// that names the mechanism and the file.
func TestOAuthTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	c := Settings{SASLMechanism: "oauthbearer", OAuth: OAuthSettings{TokenFile: path}}
	if err := c.CheckSASL(); err != nil {
		t.Fatal(err)
	}
	m := c.mechanism() // one mechanism, as Shared keeps it
	for i, tok := range []string{jwt(time.Now().Add(time.Hour)), "opaque-token-2"} {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, msg, err := m.Authenticate(context.Background(), "k:9092")
		if err != nil {
			t.Fatalf("authentication %d: %v", i, err)
		}
		if want := "auth=Bearer " + tok + "\x01"; !strings.Contains(string(msg), want) {
			t.Errorf("authentication %d sent %q, want it to hold %q", i, msg, want)
		}
	}
	os.WriteFile(path, []byte(jwt(time.Now().Add(-time.Minute))), 0o600)
	if _, err := authenticate(t, c, "k:9092"); err == nil || !strings.Contains(err.Error(), "OAUTHBEARER: the token in "+path+" expired at") {
		t.Errorf("expired token: %v", err)
	}
	os.Remove(path)
	if _, err := authenticate(t, c, "k:9092"); err == nil || !strings.Contains(err.Error(), "OAUTHBEARER: reading the token file") {
		t.Errorf("missing token file: %v", err)
	}
}

// TestOAuthClientCredentials: tokens come from the endpoint with the
// client's id and secret, and are reused until shortly before they expire;
// a refusal names the mechanism, the endpoint and the client, never the
// secret.
func TestOAuthClientCredentials(t *testing.T) {
	const secret = "client-Sekr1t"
	var calls atomic.Int32
	lifetime := atomic.Int64{}
	lifetime.Store(int64(time.Hour))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, pass, _ := r.BasicAuth()
		r.ParseForm()
		if id != "walstream" || pass != secret || r.Form.Get("grant_type") != "client_credentials" || r.Form.Get("scope") != "kafka produce" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		n := calls.Add(1)
		d := time.Duration(lifetime.Load())
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":%d}`, fmt.Sprintf("token-%d", n), int(d.Seconds()))
	}))
	defer srv.Close()
	c := Settings{SASLMechanism: SASLOAuthBearer, OAuth: OAuthSettings{TokenURL: srv.URL + "/token", ClientID: "walstream",
		ClientSecret: secret, Scopes: []string{"kafka", "produce"}}}.Shared()
	if err := c.CheckSASL(); err != nil {
		t.Fatal(err)
	}
	auth := func() string {
		t.Helper()
		return saslStart(t, c, "k:9092")
	}
	if a, b := auth(), auth(); !strings.Contains(a, "token-1") || a != b || calls.Load() != 1 {
		t.Errorf("two authentications within the token's life: %q, %q, %d requests; want token-1 once", a, b, calls.Load())
	}
	// A token of 2 s is kept for 1 s, half its life.
	c = c.Shared()
	lifetime.Store(int64(2 * time.Second))
	if a, b := auth(), auth(); !strings.Contains(a, "token-2") || a != b {
		t.Errorf("a token of 2 s: %q then %q, want token-2 twice", a, b)
	}
	time.Sleep(1100 * time.Millisecond)
	if a := auth(); !strings.Contains(a, "token-3") {
		t.Errorf("after half the life of a token of 2 s: %q, want token-3", a)
	}

	bad := c
	bad.OAuth.ClientSecret = "wrong-" + secret
	_, err := authenticate(t, bad, "k:9092")
	if err == nil || !strings.Contains(err.Error(), "OAUTHBEARER: fetching a token from "+srv.URL+"/token for client walstream") ||
		!strings.Contains(err.Error(), "invalid_client") || strings.Contains(err.Error(), secret) {
		t.Errorf("refused client: %v", err)
	}
}

func TestCheckSASL(t *testing.T) {
	for _, tc := range []struct {
		c    Settings
		want string
	}{
		{Settings{SASLMechanism: "OAUTHBEARER"}, "needs a token file or a token endpoint"},
		{Settings{SASLMechanism: "OAUTHBEARER", OAuth: OAuthSettings{TokenFile: "f", TokenURL: "https://idp/token"}}, "not both"},
		{Settings{SASLMechanism: "OAUTHBEARER", OAuth: OAuthSettings{TokenURL: "https://u:p@idp/token?k=v"}}, "token endpoint https://idp/token needs a client id and a client secret"},
		{Settings{SASLMechanism: "OAUTHBEARER", OAuth: OAuthSettings{TokenURL: "idp/token", ClientID: "a", ClientSecret: "b"}}, "is not an http(s) URL"},
		{Settings{SASLMechanism: "AWS_MSK_IAM"}, "needs TLS"},
		{Settings{SASLMechanism: "GSSAPI"}, "is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM"},
	} {
		if err := tc.c.CheckSASL(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

// clearAWS empties every AWS variable of the environment for the test and
// points the shared files at nothing, so that only what the test sets is
// found.
func clearAWS(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// saslStart authenticates with c's SASL mechanism to the broker at addr
// and returns the first message it sends.
func saslStart(t *testing.T, c Settings, addr string) string {
	t.Helper()
	_, msg, err := c.shared.Authenticate(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return string(msg)
}

// mskChallenge authenticates as AWS_MSK_IAM to an MSK broker name and
// returns the payload's fields.
func mskChallenge(t *testing.T) map[string]string {
	t.Helper()
	msg := saslStart(t, Settings{SASLMechanism: SASLAWSMSKIAM}.Shared(), "b-1.walstream.abc123.c2.kafka.eu-west-1.amazonaws.com:9098")
	var fields map[string]string
	if err := json.Unmarshal([]byte(msg), &fields); err != nil {
		t.Fatalf("AWS_MSK_IAM payload %q: %v", msg, err)
	}
	return fields
}

// TestSigV4Vectors: the AWS SDK's signer, which TestMSKIAMSignature takes
// as the reference, reproduces AWS's published Signature Version 4 test
// suite (get-vanilla and get-vanilla-query-order-key-case).
func TestSigV4Vectors(t *testing.T) {
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
	at := time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)
	empty := sha256.Sum256(nil)
	for _, tc := range []struct{ name, url, sig string }{
		{"get-vanilla", "https://example.amazonaws.com/", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
		{"get-vanilla-query-order-key-case", "https://example.amazonaws.com/?Param2=value2&Param1=value1", "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
	} {
		req, _ := http.NewRequest("GET", tc.url, nil)
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(empty[:]), "service", "us-east-1", at); err != nil {
			t.Fatal(err)
		}
		want := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + tc.sig
		if got := req.Header.Get("Authorization"); got != want {
			t.Errorf("%s: Authorization %q, want %q", tc.name, got, want)
		}
	}
}

// TestMSKIAMSignature: franz-go's AWS_MSK_IAM payload, with credentials
// from the environment, carries the signature the AWS SDK's presigner
// computes for kafka-cluster:Connect at the same time, host and region.
// (No MSK cluster can be reached from the tests: this and the credential
// chain below are what is tested of AWS_MSK_IAM.)
func TestMSKIAMSignature(t *testing.T) {
	clearAWS(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_SESSION_TOKEN", "session-token/+=")
	f := mskChallenge(t)
	if got, want := f["x-amz-credential"], "AKIDEXAMPLE/"+f["x-amz-date"][:8]+"/eu-west-1/kafka-cluster/aws4_request"; got != want {
		t.Fatalf("credential %q, want %q", got, want)
	}
	if f["action"] != "kafka-cluster:Connect" || f["version"] != "2020_10_22" || f["user-agent"] != "walstream" {
		t.Errorf("payload %v: want action kafka-cluster:Connect, version 2020_10_22, user-agent walstream", f)
	}
	at, err := time.Parse("20060102T150405Z", f["x-amz-date"])
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://"+f["host"]+"/?Action=kafka-cluster%3AConnect&X-Amz-Expires=300", nil)
	empty := sha256.Sum256(nil)
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: "session-token/+="},
		req, hex.EncodeToString(empty[:]), "kafka-cluster", "eu-west-1", at)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(signed)
	if got, want := f["x-amz-signature"], u.Query().Get("X-Amz-Signature"); got != want || got == "" {
		t.Errorf("franz-go signed %q, the AWS SDK %q (%s)", got, want, signed)
	}
	if f["x-amz-security-token"] != "session-token/+=" {
		t.Errorf("session token %q, want it passed", f["x-amz-security-token"])
	}
}

// TestMSKIAMCredentialChain: credentials come from each source of the
// default chain; ones that expire are fetched anew before they do.
func TestMSKIAMCredentialChain(t *testing.T) {
	t.Run("shared profile", func(t *testing.T) {
		clearAWS(t)
		os.WriteFile(os.Getenv("AWS_SHARED_CREDENTIALS_FILE"), []byte("[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s1\n"+
			"[outbox]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = s2\n"), 0o600)
		t.Setenv("AWS_PROFILE", "outbox")
		if got := mskChallenge(t)["x-amz-credential"]; !strings.HasPrefix(got, "AKIDPROFILE/") {
			t.Errorf("credential %q, want profile outbox's key", got)
		}
	})
	t.Run("missing profile", func(t *testing.T) {
		clearAWS(t)
		t.Setenv("AWS_PROFILE", "nowhere")
		_, err := authenticate(t, Settings{SASLMechanism: SASLAWSMSKIAM}, "b-1.x.kafka.eu-west-1.amazonaws.com:9098")
		if err == nil || !strings.Contains(err.Error(), "AWS_MSK_IAM: loading the AWS configuration") || !strings.Contains(err.Error(), "nowhere") {
			t.Errorf("missing profile: %v", err)
		}
	})
	t.Run("web identity", func(t *testing.T) {
		clearAWS(t)
		var calls atomic.Int32
		sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.ParseForm()
			if r.Form.Get("Action") != "AssumeRoleWithWebIdentity" || r.Form.Get("WebIdentityToken") != "projected-sa-token" ||
				r.Form.Get("RoleArn") != "arn:aws:iam::123456789012:role/walstream" {
				http.Error(w, "unexpected request "+r.Form.Encode(), http.StatusBadRequest)
				return
			}
			n := calls.Add(1)
			fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult>
<Credentials><AccessKeyId>AKIDIRSA%d</AccessKeyId><SecretAccessKey>s</SecretAccessKey><SessionToken>tok</SessionToken>
<Expiration>%s</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>`,
				n, time.Now().Add(10*time.Minute).UTC().Format(time.RFC3339))
		}))
		defer sts.Close()
		tokenFile := filepath.Join(t.TempDir(), "token")
		os.WriteFile(tokenFile, []byte("projected-sa-token"), 0o600)
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/walstream")
		t.Setenv("AWS_REGION", "eu-west-1")
		t.Setenv("AWS_ENDPOINT_URL_STS", sts.URL)
		c := Settings{SASLMechanism: SASLAWSMSKIAM}.Shared()
		for i := 0; i < 2; i++ {
			msg := saslStart(t, c, "b-1.x.kafka.eu-west-1.amazonaws.com:9098")
			// Ten minutes to live is outside the five-minute window: the
			// first credentials are kept.
			if !strings.Contains(msg, "AKIDIRSA1/") {
				t.Errorf("authentication %d: %s, want AKIDIRSA1", i, msg)
			}
		}
		if calls.Load() != 1 {
			t.Errorf("%d calls to STS for two authentications, want 1", calls.Load())
		}
	})
	t.Run("container role refreshed before expiry", func(t *testing.T) {
		clearAWS(t)
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "pod-identity-token" {
				http.Error(w, "no token", http.StatusUnauthorized)
				return
			}
			n := calls.Add(1)
			// Four minutes to live: inside the five-minute window, so
			// every authentication fetches new ones.
			fmt.Fprintf(w, `{"AccessKeyId":"AKIDPOD%d","SecretAccessKey":"s","Token":"t","Expiration":%q}`, n,
				time.Now().Add(4*time.Minute).UTC().Format(time.RFC3339))
		}))
		defer srv.Close()
		t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/v1/credentials")
		t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-identity-token")
		c := Settings{SASLMechanism: SASLAWSMSKIAM}.Shared()
		for i := 1; i <= 2; i++ {
			msg := saslStart(t, c, "b-1.x.kafka.eu-west-1.amazonaws.com:9098")
			if want := fmt.Sprintf("AKIDPOD%d/", i); !strings.Contains(msg, want) {
				t.Errorf("authentication %d: %s, want %s", i, msg, want)
			}
		}
	})
	t.Run("instance role", func(t *testing.T) {
		clearAWS(t)
		imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == "PUT" && r.URL.Path == "/latest/api/token":
				w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
				fmt.Fprint(w, "imds-session")
			case r.Header.Get("X-Aws-Ec2-Metadata-Token") != "imds-session":
				http.Error(w, "no session", http.StatusUnauthorized)
			case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
				fmt.Fprint(w, "walstream-role")
			case r.URL.Path == "/latest/meta-data/iam/security-credentials/walstream-role":
				fmt.Fprintf(w, `{"Code":"Success","AccessKeyId":"AKIDEC2","SecretAccessKey":"s","Token":"t","Expiration":%q}`,
					time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
			default:
				http.NotFound(w, r)
			}
		}))
		defer imds.Close()
		t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
		t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)
		if got := mskChallenge(t)["x-amz-credential"]; !strings.HasPrefix(got, "AKIDEC2/") {
			t.Errorf("credential %q, want the instance role's", got)
		}
	})
	t.Run("none", func(t *testing.T) {
		clearAWS(t)
		_, err := authenticate(t, Settings{SASLMechanism: SASLAWSMSKIAM}, "b-1.x.kafka.eu-west-1.amazonaws.com:9098")
		if err == nil || !strings.HasPrefix(err.Error(), "AWS_MSK_IAM: ") {
			t.Errorf("no credentials anywhere: %v", err)
		}
	})
}
