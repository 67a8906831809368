package publish

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms walstream speaks.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// KafkaSettings say how to reach the Kafka cluster: brokers, TLS and SASL.
type KafkaSettings struct {
	Brokers []string
	// TLS, when not nil, encrypts every connection and verifies the
	// brokers against its roots and server name.
	TLS *tls.Config
	// SASLMechanism is empty (no SASL) or one of the SASL constants.
	SASLMechanism string
	SASLUser      string
	SASLPassword  string // never logged
}

// CheckBrokers reports a broker address that cannot be dialed. A missing
// port is Kafka's 9092.
func (c KafkaSettings) CheckBrokers() error {
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
func (c KafkaSettings) CheckSASL() error {
	switch strings.ToUpper(c.SASLMechanism) {
	case "":
		return nil
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASLUser == "" || c.SASLPassword == "" {
			return fmt.Errorf("SASL %s needs a user and a password", c.SASLMechanism)
		}
		return nil
	}
	return fmt.Errorf("SASL mechanism %q is not %s, %s or %s", c.SASLMechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
}

// opts are the franz-go options for connecting.
func (c KafkaSettings) opts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	var m sasl.Mechanism
	switch strings.ToUpper(c.SASLMechanism) {
	case SASLPlain:
		m = plain.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsMechanism()
	case SASLScramSHA256:
		m = scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha256Mechanism()
	case SASLScramSHA512:
		m = scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha512Mechanism()
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}
