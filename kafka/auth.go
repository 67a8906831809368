package kafka

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/twmb/franz-go/pkg/sasl"
	kaws "github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/walstream/walstream/internal/secret"
	"github.com/walstream/walstream/publish/format"
)

// OAuthSettings say where OAUTHBEARER tokens come from: a file another
// process keeps fresh (TokenFile), or an OIDC token endpoint walstream asks
// with the client-credentials grant (TokenURL).
type OAuthSettings struct {
	// TokenFile holds one bearer token; it is read again for every
	// authentication, so a rotated token is used from the next one on.
	TokenFile string
	// TokenURL, ClientID and ClientSecret are the client-credentials
	// grant's; Scopes are asked for, none when empty. ClientSecretFile,
	// when set, holds the secret instead, read again for every token.
	TokenURL, ClientID string
	ClientSecret       string // never logged
	ClientSecretFile   *secret.File
	Scopes             []string
}

// tokenRefreshEarly is how long before a token expires walstream fetches
// the next one, so that no connection or re-authentication presents a
// token that lapses on its way to the broker; a token that lives less than
// twice that is renewed halfway.
const tokenRefreshEarly = 30 * time.Second

// mechanism returns the SASL mechanism c names, nil without SASL. Tokens
// and AWS credentials are cached inside it: clients that share one
// mechanism share them.
func (c Settings) mechanism() sasl.Mechanism {
	switch strings.ToUpper(c.SASLMechanism) {
	case SASLPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pass, err := c.password()
			return plain.Auth{User: c.SASLUser, Pass: pass}, err
		})
	case SASLScramSHA256:
		return scram.Sha256(func(context.Context) (scram.Auth, error) {
			pass, err := c.password()
			return scram.Auth{User: c.SASLUser, Pass: pass}, err
		})
	case SASLScramSHA512:
		return scram.Sha512(func(context.Context) (scram.Auth, error) {
			pass, err := c.password()
			return scram.Auth{User: c.SASLUser, Pass: pass}, err
		})
	case SASLOAuthBearer:
		return oauthMechanism(c.OAuth)
	case SASLAWSMSKIAM:
		return mskIAMMechanism()
	}
	return nil
}

// password is the SASL password: the file's content now, read for every
// authentication, or the one given.
func (c Settings) password() (string, error) {
	if c.SASLPasswordFile == nil {
		return c.SASLPassword, nil
	}
	pass, _, err := c.SASLPasswordFile.Read()
	if err != nil {
		return "", fmt.Errorf("SASL %s: %w", strings.ToUpper(c.SASLMechanism), err)
	}
	return pass, nil
}

// oauthMechanism is OAUTHBEARER with a token from o's file or token
// endpoint.
func oauthMechanism(o OAuthSettings) sasl.Mechanism {
	return refusals{oauthTokens(o)}
}

// refusals says what a broker's refusal of a token means. Kafka refuses
// an OAUTHBEARER token with an RFC 7628 error message in the exchange
// ({"status":"invalid_token"}), which franz-go reports only as
// "unexpected data in oauth response".
type refusals struct{ sasl.Mechanism }

func (m refusals) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	s, msg, err := m.Mechanism.Authenticate(ctx, host)
	if err != nil {
		return nil, nil, err
	}
	return refusal{s}, msg, nil
}

type refusal struct{ sasl.Session }

func (s refusal) Challenge(resp []byte) (bool, []byte, error) {
	if len(resp) > 0 {
		return false, nil, fmt.Errorf("%s: the broker refused the token (%s): check its expiry, issuer, audience and signing key "+
			"against the broker's sasl.oauthbearer.* settings", SASLOAuthBearer, strings.TrimSpace(string(resp)))
	}
	return s.Session.Challenge(resp)
}

func oauthTokens(o OAuthSettings) sasl.Mechanism {
	if o.TokenFile != "" {
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := readToken(o.TokenFile, time.Now())
			if err != nil {
				return oauth.Auth{}, fmt.Errorf("%s: %w", SASLOAuthBearer, err)
			}
			return oauth.Auth{Token: tok}, nil
		})
	}
	src := &tokenSource{cfg: clientcredentials.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret,
		TokenURL: o.TokenURL, Scopes: o.Scopes, AuthStyle: oauth2.AuthStyleInHeader}, secret: o.ClientSecretFile}
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		tok, err := src.token(ctx)
		if err != nil {
			return oauth.Auth{}, fmt.Errorf("%s: fetching a token from %s for client %s: %w", SASLOAuthBearer, format.RedactURL(o.TokenURL), o.ClientID, err)
		}
		return oauth.Auth{Token: tok}, nil
	})
}

// readToken reads a bearer token from path and refuses a JWT that expired
// before now, which the broker would refuse with less to say.
func readToken(path string, now time.Time) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	if exp, ok := jwtExpiry(tok); ok && !exp.After(now) {
		return "", fmt.Errorf("the token in %s expired at %s: whatever writes the file has not renewed it", path, exp.UTC().Format(time.RFC3339))
	}
	return tok, nil
}

// jwtExpiry reads the exp claim of a JWT without verifying it (the broker
// verifies); ok is false for a token that is not a JWT or has no exp.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(int64(*claims.Exp), 0), true
}

// tokenSource fetches client-credentials tokens and keeps one until
// tokenRefreshEarly before it expires, or half its lifetime. It takes the
// token's lifetime from expires_in and, failing that, from the JWT's exp.
type tokenSource struct {
	cfg clientcredentials.Config
	// secret, when set, holds the client secret, read again for every
	// token fetched.
	secret *secret.File
	mu     sync.Mutex
	tok    string
	exp    time.Time // zero: no expiry known, fetch for every authentication
	renew  time.Time // when to fetch the next one
}

func (s *tokenSource) token(ctx context.Context) (_ string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != "" && !s.exp.IsZero() && time.Now().Before(s.renew) {
		return s.tok, nil
	}
	if s.secret != nil {
		cs, u, rerr := s.secret.Read()
		if rerr != nil {
			return "", rerr
		}
		s.cfg.ClientSecret = cs
		defer func() {
			if err != nil {
				err = fmt.Errorf("%w (client secret %s)", err, u)
			}
		}()
	}
	t, err := s.cfg.Token(ctx)
	if err != nil {
		return "", err
	}
	now := time.Now()
	s.tok, s.exp = t.AccessToken, t.Expiry
	if exp, ok := jwtExpiry(t.AccessToken); ok && (s.exp.IsZero() || exp.Before(s.exp)) {
		s.exp = exp
	}
	s.renew = s.exp.Add(-min(tokenRefreshEarly, s.exp.Sub(now)/2))
	return s.tok, nil
}

// mskIAMMechanism is AWS_MSK_IAM with credentials from the AWS SDK's
// default chain: environment, shared config and credentials files (with
// AWS_PROFILE), web identity (IRSA on EKS), container credentials (ECS,
// EKS Pod Identity) and the instance role. The SDK caches them and fetches
// new ones before they expire; each connection signs with the current ones.
// A configuration that cannot be loaded (a profile named that does not
// exist) fails every authentication, saying so.
func mskIAMMechanism() sasl.Mechanism {
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) {
		// Refresh five minutes early: a connection signs at most once per
		// authentication, and MSK checks the signature's time.
		o.ExpiryWindow = 5 * time.Minute
	}))
	creds := cfg.Credentials
	return kaws.ManagedStreamingIAM(func(ctx context.Context) (kaws.Auth, error) {
		if err != nil {
			return kaws.Auth{}, fmt.Errorf("%s: loading the AWS configuration: %w", SASLAWSMSKIAM, err)
		}
		if creds == nil {
			return kaws.Auth{}, errors.New(SASLAWSMSKIAM + ": no AWS credentials: none in the environment, the shared files, web identity, container or instance metadata")
		}
		c, rerr := creds.Retrieve(ctx)
		if rerr != nil {
			return kaws.Auth{}, fmt.Errorf("%s: retrieving AWS credentials (environment, shared profile, web identity, container or instance role): %w", SASLAWSMSKIAM, rerr)
		}
		return kaws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken, UserAgent: "walstream"}, nil
	})
}
