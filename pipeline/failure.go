package pipeline

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"

	"github.com/walstream/walstream/decode"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/publish"
	"github.com/walstream/walstream/publish/format"
	"github.com/walstream/walstream/replication"
)

// Kinds of failure, the label of walstream_errors_total.
const (
	kindEpochBumped   = "epoch_bumped"
	kindTxnAborted    = "transaction_aborted"
	kindBadInput      = "bad_input"
	kindSlotAhead     = "slot_ahead"
	kindSlotMissing   = "slot_missing"
	kindSetup         = "setup"
	kindFenced        = "fenced"
	kindAuthorization = "authorization"
	kindTLS           = "tls"
	kindKafka         = "kafka"
	kindSlotInUse     = "slot_in_use"
	kindPostgres      = "postgres"
	kindSharedKey     = "shared_checkpoint_key"
	kindTopicMissing  = "topic_missing"
	kindRegistry      = "schema_registry"
	kindSchemaRefused = "schema_refused"
	kindTakeover      = "takeover"
	kindUndecided     = "undecided_checkpoint"
)

// failureKinds are every kind classifyFailure gives, the placement
// verdicts among them: each has a series of walstream_errors_total from
// the start (TestFailureKinds holds every kind constant to it).
var failureKinds = []string{kindEpochBumped, kindTxnAborted, kindBadInput, kindSlotAhead, kindSlotMissing, kindSetup, kindFenced,
	kindAuthorization, kindTLS, kindKafka, kindSlotInUse, kindPostgres, kindSharedKey, kindTopicMissing, kindRegistry,
	kindSchemaRefused, kindTakeover, kindUndecided, Phantoms.String(), OffHistory.String(), SystemChanged.String()}

// Peers a failure is blamed on, the label of walstream_reconnects_total.
const (
	peerPostgres = "postgres"
	peerKafka    = "kafka"
	peerRegistry = "schema_registry"
)

// failurePeers are every peer, each with a series of
// walstream_reconnects_total from the start.
var failurePeers = []string{peerPostgres, peerKafka, peerRegistry}

// failure is what the supervisor makes of the error that ended a session.
type failure struct {
	peer, kind string
	// permanent: no new session can succeed, so walstream stops.
	permanent bool
}

// classifyFailure names the peer an error came from, its kind for the
// error metric, and whether retrying can help. Setup problems, bad input,
// fencing and authorization are permanent.
func classifyFailure(err error) failure {
	var de *decode.Error
	var ke *kafkaError
	var eb *epochBumpedError
	var dv *DivergedError
	var sk *SharedKeyError
	var re *format.RegistryError
	var aborted *publish.AbortedError
	var undecided *UndecidedCheckpointError
	switch {
	case errors.As(err, &undecided):
		// An operator decides the record's transaction.
		return failure{peerKafka, kindUndecided, true}
	case errors.As(err, &sk):
		return failure{peerKafka, kindSharedKey, true}
	case errors.As(err, &eb):
		return failure{peerKafka, kindEpochBumped, false}
	case errors.As(err, &re) && re.Permanent:
		return failure{peerRegistry, kindSchemaRefused, true}
	case errors.As(err, &re):
		// Nothing was produced without a schema id; the session's
		// transaction is aborted and the next one starts from the
		// checkpoint once the registry answers.
		return failure{peerRegistry, kindRegistry, false}
	case errors.As(err, &aborted):
		// Kafka aborted a transaction that outlived its timeout: a new
		// session replays it. No other producer is involved, so it does
		// not count towards a shared transactional id.
		return failure{peerKafka, kindTxnAborted, false}
	case errors.As(err, &dv):
		// The kind is the verdict: phantoms, system_changed, off_history.
		return failure{peerPostgres, dv.Placement.Verdict.String(), true}
	case errors.Is(err, ErrSlotMissing):
		return failure{peerPostgres, kindSlotMissing, true}
	case errors.As(err, &de):
		return failure{peerPostgres, kindBadInput, true}
	case errors.Is(err, ErrSlotAhead):
		return failure{peerPostgres, kindSlotAhead, true}
	case errors.Is(err, ErrTakeover):
		// The operator is at hand during a cutover, and nothing retrying
		// would change is better said at once.
		return failure{peerPostgres, kindTakeover, true}
	case errors.Is(err, replication.ErrSetup):
		return failure{peerPostgres, kindSetup, true}
	case errors.Is(err, publish.ErrFenced):
		return failure{peerKafka, kindFenced, true}
	case errors.Is(err, kafka.ErrAuthorization):
		return failure{peerKafka, kindAuthorization, true}
	case errors.Is(err, kafka.ErrTopicMissing):
		return failure{peerKafka, kindTopicMissing, true}
	case publish.Permanent(err):
		return failure{peerKafka, kindBadInput, true}
	case tlsRefused(err):
		if errors.As(err, &ke) {
			return failure{peerKafka, kindTLS, true}
		}
		return failure{peerPostgres, kindTLS, true}
	case errors.As(err, &ke):
		// Anything else from Kafka: a new session with a fresh producer is
		// the rebuild from the checkpoint it needs.
		return failure{peerKafka, kindKafka, false}
	case replication.SlotInUse(err):
		return failure{peerPostgres, kindSlotInUse, false}
	case !replication.Permanent(err):
		return failure{peerPostgres, kindPostgres, false}
	}
	// An error from the server that reconnecting will not change: a wrong
	// password, a missing privilege.
	return failure{peerPostgres, kindPostgres, true}
}

// kafkaError marks an error from the Kafka side of a session, so that a
// connection error is blamed on the right peer.
type kafkaError struct{ err error }

func (e *kafkaError) Error() string { return e.err.Error() }
func (e *kafkaError) Unwrap() error { return e.err }

func onKafka(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	return &kafkaError{err}
}

// epochBumpedError is a fencing error with no other instance behind it.
type epochBumpedError struct{ err error }

func (e *epochBumpedError) Error() string { return e.err.Error() }
func (e *epochBumpedError) Unwrap() error { return e.err }

// tlsRefused reports a certificate that failed verification: a wrong CA or
// host name does not go away by retrying.
func tlsRefused(err error) bool {
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verification *tls.CertificateVerificationError
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verification)
}

// Describe names the peer an error that stopped Run came from and its
// kind, as walstream_errors_total counts it, for the log record that
// reports it.
func Describe(err error) (peer, kind string) {
	f := classifyFailure(err)
	return f.peer, f.kind
}

// unreachable returns the address dialed and the reason when err is a
// failure to connect at all: nothing answered, so neither a session nor a
// checkpoint is involved.
func unreachable(err error) (addr, reason string, ok bool) {
	var op *net.OpError
	var dns *net.DNSError
	var sys *os.SyscallError
	switch {
	case errors.As(err, &dns):
		// pgx resolves before dialing; franz-go's dial does.
		reason, addr = dns.Err, dns.Name
	case errors.As(err, &op) && op.Op == "dial":
		reason = op.Err.Error()
		if errors.As(op.Err, &sys) {
			reason = sys.Err.Error()
		}
		if op.Addr != nil {
			addr = op.Addr.String()
		}
	default:
		return "", "", false
	}
	var ce *replication.ConnectError
	if errors.As(err, &ce) {
		addr = ce.Addr()
	}
	return addr, reason, true
}

// peerNames are the peers as a sentence names them.
var peerNames = map[string]string{peerPostgres: "Postgres", peerKafka: "Kafka", peerRegistry: "the schema registry"}
