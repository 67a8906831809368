package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// walStatuses are the values pg_replication_slots.wal_status takes.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// SlotMetrics are the slot's state as Postgres reports it.
type SlotMetrics struct {
	confirmedLag, caughtUp, retained, safeWAL, active prometheus.Gauge
	walStatus                                         *prometheus.GaugeVec
	failover, failoverWarnings                        prometheus.Gauge
	decoding                                          *decodingCollector
}

// NewSlotMetrics registers the slot metrics on reg.
func NewSlotMetrics(reg prometheus.Registerer) *SlotMetrics {
	m := &SlotMetrics{
		confirmedLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_slot_confirmed_lag_bytes", Help: "How far the slot is behind, as walstream status reports it: pg_current_wal_lsn() minus the slot's confirmed_flush_lsn, at the last poll."}),
		caughtUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_caught_up", Help: "1 when, at the last poll, the slot had confirmed everything the server had written, as walstream status reports it; how far behind otherwise: walstream_slot_confirmed_lag_bytes and walstream_replication_lag_seconds."}),
		retained: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_slot_retained_wal_bytes", Help: "WAL the slot keeps: pg_current_wal_lsn() minus its restart_lsn."}),
		safeWAL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_slot_safe_wal_size_bytes", Help: "WAL that can still be written before the slot is in danger of being lost (-1: unlimited)."}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walstream_slot_active", Help: "1 when a client streams the slot."}),
		walStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walstream_slot_wal_status", Help: "The slot's wal_status: 1 for the current state, 0 for the others."}, []string{"status"}),
	}
	m.failover = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "walstream_slot_failover", Help: "1 when the slot is a failover slot, 0 when not, -1 when the server has none (before Postgres 17)."})
	m.failoverWarnings = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "walstream_slot_failover_warnings", Help: "Problems in the failover setup: not a failover slot, synchronized_standby_slots empty or naming a missing or inactive slot."})
	for _, s := range walStatuses {
		m.walStatus.WithLabelValues(s) // a series for each from the start
	}
	m.decoding = newDecodingCollector()
	reg.MustRegister(m.confirmedLag, m.caughtUp, m.retained, m.safeWAL, m.active, m.walStatus, m.failover, m.failoverWarnings, m.decoding)
	return m
}

func (m *SlotMetrics) setFailover(st FailoverState) {
	if m == nil {
		return
	}
	v := -1.0
	switch {
	case st.Supported && st.Failover:
		v = 1
	case st.Supported:
		v = 0
	}
	m.failover.Set(v)
	m.failoverWarnings.Set(float64(len(st.Warnings)))
}

// SlotState is one poll of the slot and the server's WAL position.
type SlotState struct {
	Slot
	Exists     bool
	CurrentLSN pglogrepl.LSN
	// RestartLSN is the oldest WAL the slot keeps; it is NULL (HasRestart
	// false) on a slot that was invalidated and keeps none.
	RestartLSN  pglogrepl.LSN
	HasRestart  bool
	SafeWALSize *int64
	// Missing are the outbox tables not in the publication.
	Missing       []Table
	PublicationOK bool
	// Partitioned are the outbox tables that are partitioned tables, and
	// ViaRoot the publication's publish_via_partition_root: without it
	// their rows arrive under their partitions' names.
	Partitioned []Table
	ViaRoot     bool
	FlushLag    *time.Duration // pg_stat_replication.flush_lag of the active walsender
	// Decoding is what Postgres did decoding for the slot, nil before
	// Postgres 14, which has no pg_stat_replication_slots.
	Decoding *DecodingStats
}

// DecodingStats is the slot's row of pg_stat_replication_slots (Postgres
// 14 and later): counters since StatsReset, which a crash of the server
// also resets. Transactions larger than logical_decoding_work_mem are
// spilled to disk and read back at their commit, which holds up
// everything committed after them; streamed in progress instead, they are
// not.
type DecodingStats struct {
	SpillTxns, SpillCount, SpillBytes    int64
	StreamTxns, StreamCount, StreamBytes int64
	TotalTxns, TotalBytes                int64
	StatsReset                           time.Time // zero: never reset
	// WorkMem is logical_decoding_work_mem as the server shows it, like
	// "64MB".
	WorkMem string
}

// decodingStatsVersion is the first server_version_num with
// pg_stat_replication_slots.
const decodingStatsVersion = 140000

// pollDecoding reads the slot's decoding statistics; nil when the server
// has none for it.
func pollDecoding(ctx context.Context, conn *pgx.Conn, slot string) (*DecodingStats, error) {
	var d DecodingStats
	var reset *time.Time
	err := conn.QueryRow(ctx, `SELECT spill_txns, spill_count, spill_bytes, stream_txns, stream_count, stream_bytes,
			total_txns, total_bytes, stats_reset, current_setting('logical_decoding_work_mem')
		FROM pg_stat_replication_slots WHERE slot_name = $1`, slot).Scan(&d.SpillTxns, &d.SpillCount, &d.SpillBytes,
		&d.StreamTxns, &d.StreamCount, &d.StreamBytes, &d.TotalTxns, &d.TotalBytes, &reset, &d.WorkMem)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_replication_slots of slot %q: %w", slot, err)
	}
	if reset != nil {
		d.StatsReset = *reset
	}
	return &d, nil
}

// ConfirmedLag is how far the slot's confirmed position trails the
// server's WAL, in bytes: the one definition of "behind" that walstream
// status and the slot metrics share. It is clamped at zero, should a
// confirm land between reading the slot and reading the server's position.
// A slot being created has no confirmed position and no lag.
func (s SlotState) ConfirmedLag() int64 {
	if !s.HasConfirmed {
		return 0
	}
	return max(int64(s.CurrentLSN)-int64(s.ConfirmedFlush), 0)
}

// CaughtUp reports whether the slot has confirmed everything the server had
// written when polled: every outbox event before it is in Kafka.
func (s SlotState) CaughtUp() bool { return s.Exists && s.HasConfirmed && s.ConfirmedLag() == 0 }

// Retained is how much WAL the slot keeps; ok is false when the slot has
// no restart_lsn (a lost slot keeps none).
func (s SlotState) Retained() (n int64, ok bool) {
	if !s.HasRestart {
		return 0, false
	}
	return int64(s.CurrentLSN) - int64(s.RestartLSN), true
}

// PartitionsAsThemselves returns the partitioned outbox tables whose rows
// the publication publishes under their partitions' names.
func (s SlotState) PartitionsAsThemselves() []Table {
	if !s.PublicationOK || s.ViaRoot {
		return nil
	}
	return s.Partitioned
}

// PollSlot reads the slot, the server's WAL position and the publication.
func PollSlot(ctx context.Context, conn *pgx.Conn, n Names) (SlotState, error) {
	st, err := pollSlot(ctx, conn, n)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The publication was dropped while the query ran:
		// pg_publication_tables found it in the catalog and then failed to
		// look it up ("publication ... does not exist", or "cache lookup
		// failed for publication"). Asked again, the catalog no longer
		// lists it, and the state says what was dropped. Any other error
		// the server raises comes back the second time too.
		st, err = pollSlot(ctx, conn, n)
	}
	return st, err
}

func pollSlot(ctx context.Context, conn *pgx.Conn, n Names) (SlotState, error) {
	var st SlotState
	var current string
	var restart, confirmed, plugin, slotType, database, walStatus *string
	var flushLagUS *int64
	var included []string
	var partitioned []int64
	var version int
	err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, current_setting('server_version_num')::int,
			s.slot_name IS NOT NULL, s.plugin, s.slot_type, s.database, s.wal_status, coalesce(s.active, false), s.active_pid,
			s.restart_lsn::text, s.confirmed_flush_lsn::text, s.safe_wal_size,
			(SELECT (extract(epoch FROM r.flush_lag) * 1e6)::bigint FROM pg_stat_replication r WHERE r.pid = s.active_pid),
			EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2),
			coalesce((SELECT pubviaroot FROM pg_publication WHERE pubname = $2), false),
			ARRAY(SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $2),
			ARRAY(SELECT t.ord FROM unnest($3::text[]) WITH ORDINALITY AS t(name, ord)
				JOIN pg_class c ON c.oid = to_regclass(t.name) WHERE c.relkind = 'p' ORDER BY t.ord)
		FROM (SELECT 1) one LEFT JOIN pg_replication_slots s ON s.slot_name = $1`,
		n.Slot, n.Publication, sqlNames(n.Tables)).Scan(&current, &version, &st.Exists, &plugin, &slotType, &database, &walStatus,
		&st.Active, &st.ActivePID, &restart, &confirmed, &st.SafeWALSize, &flushLagUS, &st.PublicationOK, &st.ViaRoot, &included, &partitioned)
	if err != nil {
		return st, fmt.Errorf("polling slot %q: %w", n.Slot, err)
	}
	st.Plugin, st.Type, st.Database, st.WALStatus = deref(plugin), deref(slotType), deref(database), deref(walStatus)
	st.Partitioned = n.byOrdinal(partitioned)
	st.Missing = n.missingTables(included)
	if !st.ViaRoot {
		// pg_publication_tables lists such a table's partitions, not the
		// table: it is in the publication, published the wrong way, which
		// PartitionsAsThemselves reports.
		st.Missing = slices.DeleteFunc(st.Missing, func(t Table) bool { return slices.Contains(st.Partitioned, t) })
	}
	st.HasRestart, st.HasConfirmed = restart != nil, confirmed != nil
	for _, p := range []struct {
		dst *pglogrepl.LSN
		src *string
	}{{&st.CurrentLSN, &current}, {&st.RestartLSN, restart}, {&st.ConfirmedFlush, confirmed}} {
		if p.src != nil {
			if *p.dst, err = pglogrepl.ParseLSN(*p.src); err != nil {
				return st, fmt.Errorf("polling slot %q: LSN %q: %w", n.Slot, *p.src, err)
			}
		}
	}
	if flushLagUS != nil {
		d := time.Duration(*flushLagUS) * time.Microsecond
		st.FlushLag = &d
	}
	if st.Exists && version >= decodingStatsVersion {
		if st.Decoding, err = pollDecoding(ctx, conn, n.Slot); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Monitor polls the slot while walstream streams: it exports the slot
// metrics and stops streaming when the slot, the publication or the table
// is gone, or the slot is lost. Those need an operator; never recreating
// them hides no gap.
type Monitor struct {
	Conn     *pgx.Conn
	Names    Names
	Interval time.Duration
	Metrics  *SlotMetrics
	// OIDs are the outbox tables' OIDs, by schema.table, when streaming
	// started; a table found with another is recreated, and streaming
	// stops even if no row of the new table has come yet. Tables not in
	// OIDs are not watched.
	OIDs map[string]uint32
	// Entries are the publication's entries of the outbox tables
	// (TableInfo.Entries), by schema.table, when streaming started; a table
	// found published by none of them left the publication and came back
	// between two polls, and streaming stops.
	Entries map[string][]uint32
	// CheckTable, if not nil, is told each outbox table as the catalog has
	// it at each poll, and stops streaming with the error it returns: a
	// column the mapping needs, renamed or dropped while the outbox is
	// idle, is found before a row is.
	CheckTable func(TableInfo) error
}

// Run polls until ctx ends or the slot cannot be streamed any more.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for {
		st, err := PollSlot(ctx, m.Conn, m.Names)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		m.Metrics.set(st)
		if err := st.fatal(m.Names); err != nil {
			return err
		}
		fo, err := CheckFailover(ctx, m.Conn, m.Names)
		if err == nil {
			m.Metrics.setFailover(fo)
			err = m.sameTables(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sameTables stops at an outbox table whose OID changed: it was dropped
// and created again between two polls, and the rows committed before it
// was added to the publication again are not in the stream.
func (m *Monitor) sameTables(ctx context.Context) error {
	if len(m.OIDs) == 0 && len(m.Entries) == 0 && m.CheckTable == nil {
		return nil
	}
	infos, err := DescribeTables(ctx, m.Conn, m.Names)
	if err != nil {
		return err
	}
	for _, info := range infos {
		if !info.Exists() {
			// Dropped between the slot poll and this one: the slot state,
			// polled again, names it with the fix for a stream that was
			// running, as it would have a moment later.
			if st, perr := PollSlot(ctx, m.Conn, m.Names); perr == nil {
				if ferr := st.fatal(m.Names); ferr != nil {
					return ferr
				}
			}
			return m.Names.TableMissing(info.Table)
		}
		want, watched := m.OIDs[info.Table.String()]
		if watched && info.OID != want {
			return &SetupError{Object: "table " + info.Table.SQL(),
				Reason: fmt.Sprintf("was dropped and recreated while streaming (OID %d, now %d): rows committed to it before it was added to publication %q again were never sent", want, info.OID, m.Names.Publication),
				Fix:    "see docs/postgres.md, A recreated outbox table; next time " + m.Names.RecreateAdvice(info.Table)}
		}
		if want, watched := m.Entries[info.Table.String()]; watched && len(info.Entries) > 0 && !Covers(want, info.Entries) {
			return m.Names.Republished(info.Table, info.OID, want, info.Entries, "while streaming")
		}
		if m.CheckTable != nil {
			if err := m.CheckTable(info); err != nil {
				return err
			}
		}
	}
	return nil
}

// fatal reports a state streaming cannot go on from.
func (st SlotState) fatal(n Names) error {
	slot := fmt.Sprintf("slot %q", n.Slot)
	switch {
	case !st.Exists:
		return &SetupError{Object: slot, Reason: "was dropped while streaming: events may be missing", Fix: "never recreate it silently; see docs/postgres.md, A slot invalidated or dropped"}
	case st.WALStatus == "lost":
		return &SetupError{Object: slot, Reason: "was invalidated while streaming (wal_status = lost): events may be missing",
			Fix: "see docs/postgres.md, A slot invalidated or dropped; raise max_slot_wal_keep_size so that it does not happen again"}
	case !st.PublicationOK:
		return &SetupError{Object: fmt.Sprintf("publication %q", n.Publication), Reason: "was dropped while streaming",
			Fix: "recreate it with: " + n.PublicationSQL(len(st.Partitioned) > 0) + "; events committed meanwhile are never sent: see docs/postgres.md, A publication dropped"}
	case len(st.PartitionsAsThemselves()) > 0:
		return n.viaRootError(st.PartitionsAsThemselves())
	case len(st.Missing) > 0:
		return &SetupError{Object: "table " + tableList(st.Missing), Reason: fmt.Sprintf("is no longer in publication %q (dropped or removed) while streaming: rows committed to it while it is out are never sent", n.Publication),
			Fix: n.addTablesSQL(st.Missing) + ", then see docs/postgres.md, A table out of the publication; if it was dropped, rows committed to the new table before that are never sent: see docs/postgres.md, A recreated outbox table, and next time " +
				n.RecreateAdvice(st.Missing[0])}
	}
	return nil
}

func (m *SlotMetrics) set(st SlotState) {
	if m == nil {
		return
	}
	m.confirmedLag.Set(float64(st.ConfirmedLag()))
	m.caughtUp.Set(boolGauge(st.CaughtUp()))
	// A slot without restart_lsn keeps no WAL; current minus NULL would
	// read as the whole WAL ever written.
	retained, _ := st.Retained()
	m.retained.Set(float64(retained))
	safe := float64(-1)
	if st.SafeWALSize != nil {
		safe = float64(*st.SafeWALSize)
	}
	m.safeWAL.Set(safe)
	m.active.Set(boolGauge(st.Active))
	if st.Decoding != nil {
		m.decoding.set(*st.Decoding)
	}
	for _, s := range walStatuses {
		v := 0.0
		if s == st.WALStatus {
			v = 1
		}
		m.walStatus.WithLabelValues(s).Set(v)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// decodingCollector exports pg_stat_replication_slots' counters as
// counters: Postgres counts, walstream passes the counts on as it polls
// them, and a reset (pg_stat_reset_replication_slot, a crash) is a counter
// reset rate() handles. Nothing is exported before the first poll, or on a
// server without the view.
type decodingCollector struct {
	descs [8]*prometheus.Desc
	mu    sync.Mutex
	stats *DecodingStats
}

var _ prometheus.Collector = (*decodingCollector)(nil)

func newDecodingCollector() *decodingCollector {
	c := &decodingCollector{}
	for i, m := range [8]struct{ name, help string }{
		{"walstream_slot_spilled_transactions_total", "Transactions Postgres spilled to disk while decoding them for the slot, being larger than logical_decoding_work_mem (pg_stat_replication_slots.spill_txns); each is read back at its commit, which holds up what commits after it."},
		{"walstream_slot_spills_total", "Times Postgres spilled decoded changes to disk for the slot (pg_stat_replication_slots.spill_count)."},
		{"walstream_slot_spilled_bytes_total", "Decoded changes Postgres spilled to disk for the slot (pg_stat_replication_slots.spill_bytes)."},
		{"walstream_slot_streamed_transactions_total", "Transactions Postgres streamed to walstream while in progress instead of spilling them (pg_stat_replication_slots.stream_txns; Postgres 14 and later)."},
		{"walstream_slot_streams_total", "Times Postgres streamed changes of transactions in progress (pg_stat_replication_slots.stream_count)."},
		{"walstream_slot_streamed_bytes_total", "Decoded changes of transactions in progress Postgres streamed (pg_stat_replication_slots.stream_bytes)."},
		{"walstream_slot_decoded_transactions_total", "Transactions Postgres decoded for the slot, of every table (pg_stat_replication_slots.total_txns)."},
		{"walstream_slot_decoded_bytes_total", "Changes Postgres decoded for the slot, of every table (pg_stat_replication_slots.total_bytes)."},
	} {
		c.descs[i] = prometheus.NewDesc(m.name, m.help, nil, nil)
	}
	return c
}

func (c *decodingCollector) set(d DecodingStats) {
	c.mu.Lock()
	c.stats = &d
	c.mu.Unlock()
}

func (c *decodingCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *decodingCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	d := c.stats
	c.mu.Unlock()
	if d == nil {
		return
	}
	for i, v := range [8]int64{d.SpillTxns, d.SpillCount, d.SpillBytes, d.StreamTxns, d.StreamCount, d.StreamBytes, d.TotalTxns, d.TotalBytes} {
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(v))
	}
}
