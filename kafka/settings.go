package kafka

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/walstream/walstream/internal/secret"
	"github.com/walstream/walstream/publish/format"
)

// SASL mechanisms walstream speaks.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
	SASLOAuthBearer = "OAUTHBEARER"
	SASLAWSMSKIAM   = "AWS_MSK_IAM"
)

// saslMechanisms lists them for messages.
const saslMechanisms = SASLPlain + ", " + SASLScramSHA256 + ", " + SASLScramSHA512 + ", " + SASLOAuthBearer + " or " + SASLAWSMSKIAM

// Settings say how to reach the Kafka cluster: brokers, TLS and SASL.
type Settings struct {
	Brokers []string
	// TLS, when not nil, encrypts every connection and verifies the
	// brokers against its roots and server name; its files are read
	// again for each connection.
	TLS *secret.TLS
	// SASLMechanism is empty (no SASL) or one of the SASL constants.
	SASLMechanism string
	SASLUser      string
	SASLPassword  string // never logged
	// SASLPasswordFile, when set, holds the password instead, read again
	// for every authentication, so that a rotated password is used from
	// the next connection or re-authentication on.
	SASLPasswordFile *secret.File
	// OAuth is where OAUTHBEARER tokens come from.
	OAuth OAuthSettings
	// shared, once Shared set it, is the SASL mechanism every client made
	// from these settings uses, so that they share tokens and credentials.
	shared sasl.Mechanism
}

// Shared returns the settings with one SASL mechanism for every client
// made from them (and their copies): the producer, the probe and the
// checkpoint readers then share one token or set of AWS credentials
// instead of fetching their own.
func (c Settings) Shared() Settings {
	c.shared = c.mechanism()
	return c
}

// Cluster names the cluster the settings reach: the brokers as dialed
// (canonicalBroker), sorted and joined with commas, so that two lists of
// one cluster's brokers in different orders or spellings name it alike.
func (c Settings) Cluster() string {
	bs := make([]string, len(c.Brokers))
	for i, b := range c.Brokers {
		bs[i] = canonicalBroker(b)
	}
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(bs))), ",")
}

// Clusters names the cluster each of ss reaches, alike for those that
// reach one: settings that list a broker in common (as dialed), directly
// or through others, reach one cluster. Each cluster is named as the
// first of ss on it names it (Cluster).
func Clusters(ss []Settings) []string {
	root := make([]int, len(ss)) // union-find over ss, by shared brokers
	for i := range root {
		root[i] = i
	}
	find := func(i int) int {
		for root[i] != i {
			root[i], i = root[root[i]], root[i]
		}
		return i
	}
	first := make(map[string]int) // broker → the first settings listing it
	for i, s := range ss {
		for _, b := range s.Brokers {
			b = canonicalBroker(b)
			if j, ok := first[b]; ok {
				a, z := find(i), find(j)
				root[max(a, z)] = min(a, z)
			} else {
				first[b] = i
			}
		}
	}
	out := make([]string, len(ss))
	for i := range ss {
		out[i] = ss[find(i)].Cluster()
	}
	return out
}

// canonicalBroker is a bootstrap broker as walstream dials it: its host in
// lower case (DNS names are), and Kafka's port 9092 when none is given.
func canonicalBroker(b string) string {
	host, port, err := net.SplitHostPort(b)
	if err != nil {
		host, port = b, "9092"
	}
	return net.JoinHostPort(strings.ToLower(host), port)
}

// CheckBrokers reports a broker address that cannot be dialed. A missing
// port is Kafka's 9092.
func (c Settings) CheckBrokers() error {
	var errs []error
	for _, b := range c.Brokers {
		host, port, err := net.SplitHostPort(b)
		var ae *net.AddrError
		switch {
		case errors.As(err, &ae) && ae.Err == "missing port in address":
		case err != nil:
			errs = append(errs, fmt.Errorf("broker %q: want host:port", b))
		case host == "":
			errs = append(errs, fmt.Errorf("broker %q: no host", b))
		default:
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				errs = append(errs, fmt.Errorf("broker %q: port %q is not from 1 to 65535", b, port))
			}
		}
	}
	return errors.Join(errs...)
}

// CheckSASL reports an unknown SASL mechanism or missing credentials.
func (c Settings) CheckSASL() error {
	m := strings.ToUpper(c.SASLMechanism)
	switch m {
	case "":
		return nil
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASLUser == "" || (c.SASLPassword == "" && c.SASLPasswordFile == nil) {
			return fmt.Errorf("SASL %s needs a user and a password", c.SASLMechanism)
		}
		return nil
	case SASLOAuthBearer:
		o := c.OAuth
		switch {
		case o.TokenFile != "" && o.TokenURL != "":
			return fmt.Errorf("SASL %s takes a token file or a token endpoint, not both", m)
		case o.TokenFile != "":
			return nil
		case o.TokenURL == "":
			return fmt.Errorf("SASL %s needs a token file or a token endpoint with a client id and secret", m)
		case o.ClientID == "" || (o.ClientSecret == "" && o.ClientSecretFile == nil):
			return fmt.Errorf("SASL %s with token endpoint %s needs a client id and a client secret", m, format.RedactURL(o.TokenURL))
		}
		if u, err := url.Parse(o.TokenURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("SASL %s: token endpoint %q is not an http(s) URL", m, format.RedactURL(o.TokenURL))
		}
		return nil
	case SASLAWSMSKIAM:
		if c.TLS == nil {
			return fmt.Errorf("SASL %s needs TLS: MSK serves IAM only on its TLS listener", m)
		}
		return nil
	}
	return fmt.Errorf("SASL mechanism %q is not %s", c.SASLMechanism, saslMechanisms)
}

// Opts are the franz-go options for connecting, for the clients of the
// packages that talk to Kafka.
func (c Settings) Opts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.TLS != nil {
		// A dialer of walstream's own, not kgo.DialTLSConfig, so that each
		// connection reads the CA bundle and client certificate anew.
		opts = append(opts, kgo.Dialer(c.TLS.DialContext))
	}
	m := c.shared
	if m == nil {
		m = c.mechanism()
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}

// Explain adds to an error that says the broker refused SASL
// authentication which password file content was used, when the password
// comes from a file: after a rotation, a refusal with content changed
// since start points at the broker's side, one with the content at start
// at the file's.
func (c Settings) Explain(err error) error {
	if c.SASLPasswordFile == nil || !errors.Is(err, kerr.SaslAuthenticationFailed) {
		return err
	}
	u := c.SASLPasswordFile.Last()
	if u.Path == "" {
		return err
	}
	return fmt.Errorf("%w (SASL %s as %s with the password %s)", err, strings.ToUpper(c.SASLMechanism), c.SASLUser, u)
}
