package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/decode"
)

// confirmer says which position may be confirmed to Postgres, and hears
// of each transaction handed on, for the lag metrics.
type confirmer interface {
	Confirm() pglogrepl.LSN
	Received(commitLSN pglogrepl.LSN, commitTime time.Time)
	ServerWALEnd(lsn pglogrepl.LSN)
}

// sink takes decoded transactions. TryPut takes tx only if it can at once;
// Put either takes tx or returns ctx's error having taken nothing.
type sink interface {
	TryPut(tx *decode.Tx) bool
	Put(ctx context.Context, tx *decode.Tx) error
}

// StreamConfig configures a Stream.
type StreamConfig struct {
	Names Names
	// StatusInterval is how often a standby status update is sent; it must
	// be well under the server's wal_sender_timeout.
	StatusInterval time.Duration
	// MarkerInterval rate-limits position markers sent while idle.
	MarkerInterval time.Duration
	// Hook, if not nil, is called with "mid-transaction" after each
	// message decoded inside an open transaction, so that tests can crash
	// the process there.
	Hook func(point string)
}

// Stream is one replication connection streaming a slot. It is used from
// one goroutine: Start, then Run, then Close.
type Stream struct {
	cfg   StreamConfig
	log   *slog.Logger
	conn  *pgconn.PgConn
	lowat *lowatConn // nil when the socket's low-water mark cannot be raised
	// sentAt is when the walsender sent the last XLogData, by its clock.
	sentAt  time.Time
	metrics *Metrics
	// Owned by Run.
	lastMarker   pglogrepl.LSN
	lastMarkerAt time.Time
	confirmed    pglogrepl.LSN
	skipped      uint64 // dec.Skipped already counted
	replaying    bool   // skipping replays the checkpoint covers
}

// Dial opens a replication connection (replication=database).
func Dial(ctx context.Context, cfg *pgconn.Config) (*pgconn.PgConn, error) {
	cfg = cfg.Copy()
	cfg.RuntimeParams["replication"] = "database"
	// The walsender renders column values in its session's settings; these
	// make timestamps ISO and UTC whatever postgresql.conf says, so that
	// decode can read table.field.event.timestamp.
	cfg.RuntimeParams["DateStyle"] = "ISO"
	cfg.RuntimeParams["TimeZone"] = "UTC"
	cfg.DialFunc = dialLowat(cfg.DialFunc)
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening replication connection to %s:%d database %s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	return conn, nil
}

// Start acquires the slot with START_REPLICATION. From here on no other
// client can stream the slot, so its confirmed_flush_lsn moves only when
// this stream confirms. Postgres starts from the slot's confirmed_flush_lsn.
func Start(ctx context.Context, conn *pgconn.PgConn, cfg StreamConfig, log *slog.Logger, m *Metrics) (*Stream, error) {
	n := cfg.Names
	err := pglogrepl.StartReplication(ctx, conn, n.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			fmt.Sprintf("publication_names '%s'", n.Publication), // validated identifier
			"messages 'true'",
		},
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object
			return nil, &SetupError{Object: fmt.Sprintf("slot %q", n.Slot), Reason: "does not exist (dropped?): events may be missing",
				Fix: "never recreate it silently; see README, Recovery"}
		}
		return nil, fmt.Errorf("starting replication on slot %s: %w", n.Slot, err)
	}
	return &Stream{cfg: cfg, log: log, conn: conn, lowat: lowatOf(conn), metrics: m}, nil
}

// Run receives the slot's messages, decodes them into dec and puts the
// transactions into out, until ctx ends or the stream fails. It sends a
// status update every StatusInterval and whenever the server asks, also
// while out applies back-pressure, so the server never times it out.
//
// At one outbox row per Postgres transaction every row is three messages,
// so the loop sets up nothing per message: a context passed to
// ReceiveMessage costs pgconn a watcher registration, and a per-message
// deadline context a timer, which together were a third of walstream's
// CPU. Instead the connection's read deadline is the next status update,
// set once per interval: once it passes, the next read from the socket
// times out at once, and ctx's end moves it to now.
func (s *Stream) Run(ctx context.Context, dec *decode.Decoder, out sink, pos confirmer) error {
	nc := s.conn.Conn()
	// Deferred before stop, so it runs after it: Run leaves no deadline behind.
	defer nc.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Now()) })
	defer stop()
	next, err := s.statusDue(ctx, pos)
	if err != nil {
		return err
	}
	for {
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if next, err = s.statusDue(ctx, pos); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("receiving from slot %s: %w", s.cfg.Names.Slot, err)
		}
		var tx *decode.Tx
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if tx, err = s.handle(ctx, m.Data, dec, pos); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return s.serverError(pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone, *pgproto3.CommandComplete:
			return fmt.Errorf("slot %s: %w", s.cfg.Names.Slot, ErrStreamEnded)
		default:
			return fmt.Errorf("slot %s: unexpected message %T", s.cfg.Names.Slot, msg)
		}
		if tx == nil {
			continue
		}
		if len(tx.Events) > 0 {
			pos.Received(tx.CommitLSN, tx.CommitTime)
			if s.sentAt.Sub(tx.CommitTime) > backlogAge {
				s.lowat.raise()
			}
		}
		if out.TryPut(tx) {
			continue
		}
		for {
			pctx, cancel := context.WithDeadline(ctx, next)
			err := out.Put(pctx, tx)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Waiting on Kafka: keep the walsender from timing us out.
			if next, err = s.statusDue(ctx, pos); err != nil {
				return err
			}
		}
	}
}

// statusDue sends a status update and sets the read deadline to when the
// next one is due, which it returns. A deadline set after ctx ended would
// undo the one ctx's end set, so it then returns ctx's error.
func (s *Stream) statusDue(ctx context.Context, pos confirmer) (time.Time, error) {
	if err := s.sendStatus(ctx, pos); err != nil {
		return time.Time{}, err
	}
	next := time.Now().Add(s.cfg.StatusInterval)
	if err := s.conn.Conn().SetReadDeadline(next); err != nil {
		return next, fmt.Errorf("setting the read deadline on slot %s: %w", s.cfg.Names.Slot, err)
	}
	return next, ctx.Err()
}

func (s *Stream) handle(ctx context.Context, data []byte, dec *decode.Decoder, pos confirmer) (*decode.Tx, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("slot %s: empty CopyData message", s.cfg.Names.Slot)
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return nil, fmt.Errorf("slot %s: parsing keepalive: %w", s.cfg.Names.Slot, err)
		}
		pos.ServerWALEnd(ka.ServerWALEnd)
		if ka.ReplyRequested {
			if err := s.sendStatus(ctx, pos); err != nil {
				return nil, err
			}
		}
		// Between transactions, everything that commits before ServerWALEnd
		// has been sent: a marker lets the publisher checkpoint that
		// position, so a quiet outbox does not pin WAL written by others.
		if !dec.InTx() && ka.ServerWALEnd > s.lastMarker && time.Since(s.lastMarkerAt) >= s.cfg.MarkerInterval {
			s.lastMarker, s.lastMarkerAt = ka.ServerWALEnd, time.Now()
			return decode.Marker(ka.ServerWALEnd), nil
		}
		return nil, nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return nil, fmt.Errorf("slot %s: parsing XLogData: %w", s.cfg.Names.Slot, err)
		}
		pos.ServerWALEnd(x.ServerWALEnd)
		s.metrics.received(x.WALStart)
		s.sentAt = x.ServerTime
		tx, err := dec.Decode(x.WALStart, x.WALData)
		if err != nil {
			return nil, fmt.Errorf("slot %s: %w", s.cfg.Names.Slot, err)
		}
		if s.cfg.Hook != nil && dec.InTx() {
			s.cfg.Hook("mid-transaction")
		}
		s.countSkipped(dec, tx)
		return tx, nil
	}
	return nil, fmt.Errorf("slot %s: unknown replication message %q", s.cfg.Names.Slot, data[0])
}

// countSkipped counts replayed events the decoder dropped and logs once,
// when the replay reaches events Kafka does not have yet.
func (s *Stream) countSkipped(dec *decode.Decoder, tx *decode.Tx) {
	if d := dec.Skipped - s.skipped; d > 0 {
		s.skipped = dec.Skipped
		s.replaying = true
		s.metrics.skippedReplays(d)
	}
	if s.replaying && tx != nil && len(tx.Events) > 0 {
		s.replaying = false
		s.log.Info("replay caught up with the checkpoint", "replayed_events_skipped", s.skipped, "first_new_commit_lsn", tx.CommitLSN.String())
	}
}

// sendStatus confirms what Kafka has committed. Write, flush and apply are
// all that position: walstream has no local copy that is durable sooner.
func (s *Stream) sendStatus(ctx context.Context, pos confirmer) error {
	lsn := pos.Confirm()
	if lsn == 0 {
		// Nothing to confirm yet; pglogrepl would fill a zero flush position
		// from the write position, so send nothing rather than a zero.
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn,
	})
	if err != nil {
		return fmt.Errorf("sending standby status at %s on slot %s: %w", lsn, s.cfg.Names.Slot, err)
	}
	if lsn != s.confirmed {
		s.confirmed = lsn
		s.metrics.confirmed(lsn)
		s.log.Debug("confirmed", "lsn", lsn.String())
	}
	return nil
}

func (s *Stream) serverError(err *pgconn.PgError) error {
	if err.Code == "55000" && strings.Contains(err.Message, "invalidated") { // object_not_in_prerequisite_state
		return &SetupError{Object: fmt.Sprintf("slot %q", s.cfg.Names.Slot), Reason: "was invalidated while streaming: " + err.Message,
			Fix: "events may be missing; see README, Recovery"}
	}
	return fmt.Errorf("slot %s: server error: %w", s.cfg.Names.Slot, err)
}

// Close sends a last status update, so that Postgres learns everything
// Kafka committed before the stream stopped, and closes the connection.
func (s *Stream) Close(ctx context.Context, pos confirmer) error {
	err := s.sendStatus(ctx, pos)
	if cerr := s.conn.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// ErrStreamEnded means the server ended the replication stream, as it
// does when it shuts down.
var ErrStreamEnded = errors.New("the server ended the replication stream")

// IsPostgres reports whether err came from Postgres or the connection to it.
func IsPostgres(err error) bool {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	return errors.As(err, &pgErr) || errors.As(err, &connErr)
}

// SlotInUse reports whether err says that another client is streaming the
// slot, which is what a standby instance sees.
func SlotInUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006" // object_in_use
}

// Transient reports whether a Postgres error may go away by reconnecting:
// the network, a server restart or shutdown, a terminated walsender, or a
// slot held by another walstream (a standby waits for it).
func Transient(err error) bool {
	if errors.Is(err, ErrSetup) {
		return false
	}
	if errors.Is(err, ErrStreamEnded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			strings.HasPrefix(pgErr.Code, "53"),  // insufficient resources
			strings.HasPrefix(pgErr.Code, "57P"), // admin shutdown, crash shutdown, cannot connect now
			pgErr.Code == "55006":                // object in use: the slot is active for another PID
			return true
		}
		return false
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		pgconn.SafeToRetry(err)
}

// Metrics are the replication loop's Prometheus metrics.
type Metrics struct {
	receivedLSN, confirmedLSN prometheus.Gauge
	skipped                   prometheus.Counter
}

// NewMetrics registers the replication metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		receivedLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_received_lsn", Help: "Start of the last WAL message received, as a byte offset."}),
		confirmedLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_confirmed_lsn", Help: "Last flush position confirmed to Postgres, as a byte offset."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walstream_replayed_events_skipped_total", Help: "Replayed events dropped because the checkpoint in Kafka already covers them."}),
	}
	reg.MustRegister(m.receivedLSN, m.confirmedLSN, m.skipped)
	return m
}

func (m *Metrics) skippedReplays(n uint64) {
	if m != nil {
		m.skipped.Add(float64(n))
	}
}

func (m *Metrics) received(lsn pglogrepl.LSN) {
	if m != nil {
		m.receivedLSN.Set(float64(lsn))
	}
}

func (m *Metrics) confirmed(lsn pglogrepl.LSN) {
	if m != nil {
		m.confirmedLSN.Set(float64(lsn))
	}
}
