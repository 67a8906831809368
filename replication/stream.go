package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
)

// Confirmer says which position may be confirmed to Postgres, and whether
// it changed since it last said. It hears every WAL end the server
// reports, which bounds what may be confirmed.
type Confirmer interface {
	Confirm() (lsn pglogrepl.LSN, changed bool)
	ServerWALEnd(lsn pglogrepl.LSN)
}

// Consumer takes what the slot sends: the WAL data of each XLogData
// message and the server's WAL end from each keepalive. Run calls it from
// its own goroutine. A message that completes something to hand on (a
// transaction, a part of one, a position) makes the consumer ready; Run
// then calls TryHandOn, and HandOn until it succeeds, before it reads on,
// sending status updates while HandOn waits.
type Consumer interface {
	// WAL takes one pgoutput message that started at walStart. data is the
	// connection's buffer, valid only during the call.
	WAL(walStart pglogrepl.LSN, data []byte) (Ready, error)
	// Keepalive hears that the server has sent everything before walEnd.
	Keepalive(walEnd pglogrepl.LSN) Ready
	// TryHandOn hands on what is ready if it can at once.
	TryHandOn() bool
	// HandOn hands on what is ready, or returns ctx's error having kept it,
	// or another error, which ends the stream. One message may make many
	// things ready one after another (the parts of a streamed transaction
	// decoded at its commit): HandOn hands them all on.
	HandOn(ctx context.Context) error
}

// Ready says whether a consumer has something to hand on. CommitTime, the
// Postgres commit time of events handed on (zero for none), lets Run tell
// a backlog from live traffic. Bulk says that the message came in a burst
// of many with nothing to hand on before its end, such as a block of a
// transaction streamed in progress: reads may wait for large chunks, as
// in a backlog.
type Ready struct {
	OK         bool
	CommitTime time.Time
	Bulk       bool
}

// StreamConfig configures a Stream.
type StreamConfig struct {
	Names Names
	// StatusInterval is how often a standby status update is sent; it must
	// be well under the server's wal_sender_timeout.
	StatusInterval time.Duration
	// ConfirmInterval is the least time between status updates sent because
	// ConfirmSoon said the position moved, so that a busy stream sends a
	// few a second rather than one per Kafka transaction. Zero confirms
	// only every StatusInterval.
	ConfirmInterval time.Duration
	// InProgress asks for streaming of in-progress transactions (pgoutput
	// protocol version 2, streaming 'on'; the server must be Postgres 14
	// or later): a transaction larger than logical_decoding_work_mem is
	// sent as it goes instead of spilled and sent at its commit, and the
	// consumer must keep its messages until its Stream Commit.
	InProgress bool
}

// pluginArgs are START_REPLICATION's pgoutput options.
func (c StreamConfig) pluginArgs() []string {
	publication := fmt.Sprintf("publication_names '%s'", c.Names.Publication) // validated identifier
	if c.InProgress {
		return []string{"proto_version '2'", publication, "messages 'true'", "streaming 'on'"}
	}
	return []string{"proto_version '1'", publication, "messages 'true'"}
}

// streamingVersion is the first server_version_num that streams
// transactions in progress.
const streamingVersion = 140000

// SupportsStreaming reports whether a server of server_version_num version
// can stream transactions in progress.
func SupportsStreaming(version int) bool { return version >= streamingVersion }

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

	// wake guards the read deadline of rd, the connection's socket, which
	// Run, ConfirmSoon and ctx's end move from different goroutines.
	// deadline is the one set; lastStatus is when Run last sent a status
	// update.
	rd         readDeadliner
	wake       sync.Mutex
	deadline   time.Time
	lastStatus time.Time
}

// renderSettings sets the session settings column values are rendered in.
// The walsender renders them in its session's settings; these make
// timestamps ISO and UTC whatever postgresql.conf says, so that decode can
// read table.field.event.timestamp, and intervals the text form Debezium's
// pgjdbc parses. A re-emit reads rows in the same (ConnectReader).
func renderSettings(params map[string]string) {
	params["DateStyle"] = "ISO"
	params["IntervalStyle"] = "postgres"
	params["TimeZone"] = "UTC"
}

// Dial opens a replication connection (replication=database).
func Dial(ctx context.Context, cfg *pgconn.Config) (*pgconn.PgConn, error) {
	cfg = cfg.Copy()
	named(cfg.RuntimeParams)
	cfg.RuntimeParams["replication"] = "database"
	renderSettings(cfg.RuntimeParams)
	cfg.DialFunc = dialLowat(cfg.DialFunc)
	ctx, u := withUse(ctx)
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, connectError("opening replication connection to", cfg, u, err)
	}
	return conn, nil
}

// Start acquires the slot with START_REPLICATION. From here on no other
// client can stream the slot, so its confirmed_flush_lsn moves only when
// this stream confirms. Postgres starts from the slot's confirmed_flush_lsn.
func Start(ctx context.Context, conn *pgconn.PgConn, cfg StreamConfig, log *slog.Logger, m *Metrics) (*Stream, error) {
	n := cfg.Names
	err := pglogrepl.StartReplication(ctx, conn, n.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: cfg.pluginArgs(),
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object
			return nil, &SetupError{Object: fmt.Sprintf("slot %q", n.Slot), Reason: "does not exist (dropped?): events may be missing",
				Fix: "never recreate it silently; see docs/postgres.md, The slot is missing"}
		}
		return nil, fmt.Errorf("starting replication on slot %s: %w", n.Slot, err)
	}
	return &Stream{cfg: cfg, log: log, conn: conn, lowat: lowatOf(conn), metrics: m, rd: conn.Conn()}, nil
}

// Run receives the slot's messages and hands them to c, until ctx ends or
// the stream fails. It sends a status update every StatusInterval and
// whenever the server asks, also while c applies back-pressure, so the
// server never times it out.
//
// At one outbox row per Postgres transaction every row is three messages,
// so the loop sets up nothing per message: a context passed to
// ReceiveMessage costs pgconn a watcher registration, and a per-message
// deadline context a timer, which together were a third of walstream's
// CPU. Instead the connection's read deadline is the next status update,
// set once per interval: once it passes, the next read from the socket
// times out at once. ctx's end moves it to now, and ConfirmSoon to
// ConfirmInterval after the last status update, so that Kafka commits
// reach Postgres promptly without any work per message.
func (s *Stream) Run(ctx context.Context, c Consumer, pos Confirmer) error {
	// Deferred before stop, so it runs after it: Run leaves no deadline
	// behind, and ConfirmSoon sets none after it.
	defer s.setDeadline(time.Time{}, true)
	stop := context.AfterFunc(ctx, func() { s.setDeadline(time.Now(), true) })
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
		var ready Ready
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if ready, err = s.handle(ctx, m.Data, c, pos); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return s.serverError(pgconn.ErrorResponseToPgError(m))
		case *pgproto3.NoticeResponse:
			if err := s.notice(m); err != nil {
				return err
			}
			continue
		case *pgproto3.CopyDone, *pgproto3.CommandComplete:
			return fmt.Errorf("slot %s: %w", s.cfg.Names.Slot, ErrStreamEnded)
		default:
			return fmt.Errorf("slot %s: unexpected message %T", s.cfg.Names.Slot, msg)
		}
		if ready.Bulk || !ready.CommitTime.IsZero() && s.sentAt.Sub(ready.CommitTime) > backlogAge {
			s.lowat.raise()
		}
		if !ready.OK {
			continue
		}
		if c.TryHandOn() {
			continue
		}
		for {
			pctx, cancel := context.WithDeadline(ctx, next)
			err := c.HandOn(pctx)
			due := pctx.Err() != nil
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !due {
				// Not the deadline: the consumer failed (a streamed
				// transaction's spool could not be read back).
				return fmt.Errorf("slot %s: %w", s.cfg.Names.Slot, err)
			}
			// Waiting on Kafka: keep the walsender from timing us out.
			if next, err = s.statusDue(ctx, pos); err != nil {
				return err
			}
		}
	}
}

// statusDue sends a status update and sets the read deadline to when the
// next one is due, which it returns. The deadline is set before the
// position is read, so that a commit after the read moves it again. A
// deadline set after ctx ended would undo the one ctx's end set, so it then
// returns ctx's error.
func (s *Stream) statusDue(ctx context.Context, pos Confirmer) (time.Time, error) {
	now := time.Now()
	next := now.Add(s.cfg.StatusInterval)
	s.wake.Lock()
	s.lastStatus = now
	err := s.setDeadlineLocked(next, true)
	s.wake.Unlock()
	if err != nil {
		return next, fmt.Errorf("setting the read deadline on slot %s: %w", s.cfg.Names.Slot, err)
	}
	if err := s.sendStatus(ctx, pos); err != nil {
		return time.Time{}, err
	}
	return next, ctx.Err()
}

// ConfirmSoon says that the position to confirm moved: Run sends a status
// update ConfirmInterval after the last one, or at once if that is past.
// Calls in between coalesce into that one update. It only moves the read
// deadline Run blocks on, so it costs Run nothing per message, and it may
// be called from any goroutine.
func (s *Stream) ConfirmSoon() {
	if s.cfg.ConfirmInterval <= 0 {
		return
	}
	s.wake.Lock()
	defer s.wake.Unlock()
	_ = s.setDeadlineLocked(s.lastStatus.Add(s.cfg.ConfirmInterval), false)
}

func (s *Stream) setDeadline(at time.Time, later bool) {
	s.wake.Lock()
	defer s.wake.Unlock()
	_ = s.setDeadlineLocked(at, later)
}

// setDeadlineLocked sets the read deadline to at; unless later is set,
// only if that is sooner than the one set.
func (s *Stream) setDeadlineLocked(at time.Time, later bool) error {
	if !later && !at.Before(s.deadline) {
		return nil
	}
	s.deadline = at
	return s.rd.SetReadDeadline(at)
}

// readDeadliner is the part of the connection's socket that ConfirmSoon
// and ctx's end move.
type readDeadliner interface {
	SetReadDeadline(t time.Time) error
}

func (s *Stream) handle(ctx context.Context, data []byte, c Consumer, pos Confirmer) (Ready, error) {
	if len(data) == 0 {
		return Ready{}, fmt.Errorf("slot %s: empty CopyData message", s.cfg.Names.Slot)
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return Ready{}, fmt.Errorf("slot %s: parsing keepalive: %w", s.cfg.Names.Slot, err)
		}
		pos.ServerWALEnd(ka.ServerWALEnd)
		if ka.ReplyRequested {
			if err := s.sendStatus(ctx, pos); err != nil {
				return Ready{}, err
			}
		}
		return c.Keepalive(ka.ServerWALEnd), nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return Ready{}, fmt.Errorf("slot %s: parsing XLogData: %w", s.cfg.Names.Slot, err)
		}
		pos.ServerWALEnd(x.ServerWALEnd)
		s.metrics.received(x.WALStart)
		s.sentAt = x.ServerTime
		ready, err := c.WAL(x.WALStart, x.WALData)
		if err != nil {
			return Ready{}, fmt.Errorf("slot %s: %w", s.cfg.Names.Slot, err)
		}
		return ready, nil
	}
	return Ready{}, fmt.Errorf("slot %s: unknown replication message %q", s.cfg.Names.Slot, data[0])
}

// sendStatus confirms what Kafka has committed. Write, flush and apply are
// all that position: walstream has no local copy that is durable sooner.
func (s *Stream) sendStatus(ctx context.Context, pos Confirmer) error {
	lsn, changed := pos.Confirm()
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
	if changed {
		s.metrics.confirmed(lsn)
		s.log.Debug("confirmed", "lsn", lsn.String())
	}
	return nil
}

func (s *Stream) serverError(err *pgconn.PgError) error {
	if err.Code == "55000" && strings.Contains(err.Message, "invalidated") { // object_not_in_prerequisite_state
		return &SetupError{Object: fmt.Sprintf("slot %q", s.cfg.Names.Slot), Reason: "was invalidated while streaming: " + err.Message,
			Fix: "events may be missing; see docs/postgres.md, A slot invalidated or dropped"}
	}
	if err.Code == "42704" && s.namesPublication(err.Message) { // undefined_object
		// Before Postgres 18 the walsender decodes with the catalog as it
		// was when each change was written: a publication dropped then
		// fails every start at that change, created again or not.
		return s.publicationGone("Postgres cannot decode past the point where it was missing: " + err.Message)
	}
	return fmt.Errorf("slot %s: server error: %w", s.cfg.Names.Slot, err)
}

// notice takes a walsender's warning, which does not end the stream but
// for one: Postgres 18 and later skip a publication missing at a point of
// the WAL, with a warning, and send none of its tables' rows there. Any
// other (such as synchronized_standby_slots naming a slot no standby
// streams, which holds back a failover slot's WAL with a warning at each
// wait) is logged, and the stream goes on.
func (s *Stream) notice(m *pgproto3.NoticeResponse) error {
	if m.Code == "55000" && s.namesPublication(m.Message) { // object_not_in_prerequisite_state
		return s.publicationGone("Postgres skipped it where it was missing, sending none of its tables' rows there: " + m.Message)
	}
	s.log.Warn("Postgres warns on the replication connection", "slot", s.cfg.Names.Slot, "severity", m.Severity,
		"code", m.Code, "message", m.Message, "detail", m.Detail, "hint", m.Hint)
	return nil
}

// namesPublication says whether a message of the walsender names the
// stream's publication. With the SQLSTATE, it tells the publication
// missing whatever the server's lc_messages: neither is translated (the
// quotes around the name may be).
func (s *Stream) namesPublication(message string) bool {
	return strings.Contains(message, s.cfg.Names.Publication)
}

// publicationGone is the stop of a stream whose WAL reaches a point where
// its publication did not exist.
func (s *Stream) publicationGone(why string) error {
	return &SetupError{Object: fmt.Sprintf("publication %q", s.cfg.Names.Publication),
		Reason: "was dropped (and perhaps created again) while the slot still had WAL to send: " + why,
		Fix:    "rows committed to the outbox tables while it was missing were never sent; see docs/postgres.md, A publication dropped"}
}

// Close sends a last status update, so that Postgres learns everything
// Kafka committed before the stream stopped, and closes the connection.
// A connection that already failed gets no update: pgconn closed it on the
// error and writes its Terminate from a goroutine of its own, which a
// status update written beside it would race.
func (s *Stream) Close(ctx context.Context, pos Confirmer) error {
	if s.conn.IsClosed() {
		return nil
	}
	err := s.sendStatus(ctx, pos)
	if cerr := s.conn.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// ErrStreamEnded means the server ended the replication stream, as it
// does when it shuts down.
var ErrStreamEnded = errors.New("the server ended the replication stream")

// Permanent reports whether err came from Postgres, or the connection to
// it, and reconnecting cannot change it: a wrong password, a missing
// privilege, a setup problem. Errors from elsewhere are not permanent here.
func Permanent(err error) bool {
	return errors.Is(err, ErrSetup) || (fromPostgres(err) && !transient(err))
}

// fromPostgres reports whether err came from Postgres or the connection to it.
func fromPostgres(err error) bool {
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

// transient reports whether a Postgres error may go away by reconnecting:
// the network, a server restart or shutdown, a terminated walsender, or a
// slot held by another walstream (a standby waits for it).
func transient(err error) bool {
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
}

// NewMetrics registers the replication metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		receivedLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_received_lsn", Help: "Start of the last WAL message received, as a byte offset."}),
		confirmedLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_confirmed_lsn", Help: "Last flush position confirmed to Postgres, as a byte offset."}),
	}
	reg.MustRegister(m.receivedLSN, m.confirmedLSN)
	return m
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
