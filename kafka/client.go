package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// ErrAuthorization means the broker refused walstream an operation.
var ErrAuthorization = errors.New("not authorized by the Kafka cluster")

// Authorization wraps in ErrAuthorization the errors that say the broker
// refused the principal, which no retry can fix. A refused transactional
// id is named, when transactionalID is not empty, as the one the
// principal needs the Write ACL on.
func Authorization(err error, transactionalID string) error {
	switch {
	case errors.Is(err, ErrAuthorization):
		return err
	case transactionalID != "" && errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return fmt.Errorf("%w: the principal needs the Write ACL on transactional id %s: %w", ErrAuthorization, transactionalID, err)
	case errors.Is(err, kerr.SaslAuthenticationFailed),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed),
		errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.GroupAuthorizationFailed):
		return fmt.Errorf("%w: %w", ErrAuthorization, err)
	}
	return err
}

// TransactionTimeout is the transaction timeout walstream asks the broker
// for: twice the commit timeout, at least 10 s, so that a commit that
// times out on walstream's side is never cut short by the broker.
func TransactionTimeout(commitTimeout time.Duration) time.Duration {
	return max(commitTimeout*2, 10*time.Second)
}

// WithLogger is the client option that logs franz-go's warnings and errors
// to log, quietly (quietLogger).
func WithLogger(log *slog.Logger) kgo.Opt { return kgo.WithLogger(newQuietLogger(kslog.New(log))) }

// quietLogger passes on franz-go's warnings and errors only (at info it
// logs every transaction), and each message at most once per logEvery:
// while a broker is down, franz-go warns at every connection attempt.
// The warnings of retries franz-go makes by itself go out at info: an
// operator acts on the session's own message when they do not succeed.
type quietLogger struct {
	kgo.Logger
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

const logEvery = 30 * time.Second

func newQuietLogger(l kgo.Logger) *quietLogger {
	return &quietLogger{Logger: l, last: make(map[string]time.Time), held: make(map[string]int)}
}

var _ kgo.Logger = (*quietLogger)(nil)

func (l *quietLogger) Level() kgo.LogLevel { return min(l.Logger.Level(), kgo.LogLevelWarn) }

func (l *quietLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l.mu.Lock()
	if time.Since(l.last[msg]) < logEvery {
		l.held[msg]++
		l.mu.Unlock()
		return
	}
	l.last[msg] = time.Now()
	if n := l.held[msg]; n > 0 {
		keyvals = append(keyvals, "repeats_suppressed", n)
		l.held[msg] = 0
	}
	l.mu.Unlock()
	if level == kgo.LogLevelWarn && retrying(msg) {
		level = kgo.LogLevelInfo
	}
	l.Logger.Log(level, msg, keyvals...)
}

// retries are the starts of franz-go's warnings about a request it retries
// by itself, or a broker it cannot reach yet; a session that fails because
// of them says so at warn.
var retries = []string{
	"produce partition load error",
	"unable to load producer ID",
	"unable to AddPartitionsToTxn due to retryable",
	"random error while producing",
	"unable to open connection to broker",
}

func retrying(msg string) bool {
	for _, r := range retries {
		if strings.HasPrefix(msg, r) && !strings.Contains(msg, "TLS") {
			return true
		}
	}
	return false
}
