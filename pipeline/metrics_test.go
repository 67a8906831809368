package pipeline

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/walstream/walstream/replication"
)

// Every walstream metric carries the stream's name, slot and database, and
// the labelled counters have a series at 0 for each known label from the
// start, so that a dashboard draws a flat line for a healthy stream.
func TestMetricLabels(t *testing.T) {
	pg, err := pgx.ParseConfig("postgres://walstream@db/app")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	New(Config{Stream: "orders", Postgres: pg, Names: replication.Names{Slot: "orders_slot"}}, slog.New(slog.DiscardHandler), reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	zero := map[string]map[string]bool{"walstream_errors_total": {}, "walstream_reconnects_total": {}, "walstream_kafka_transactions_total": {}}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "walstream_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stream"] != "orders" || labels["slot"] != "orders_slot" || labels["database"] != "app" {
				t.Errorf("%s%v: want stream orders, slot orders_slot, database app", mf.GetName(), labels)
			}
			if z, ok := zero[mf.GetName()]; ok && m.GetCounter().GetValue() == 0 {
				z[labels["kind"]+labels["peer"]+labels["result"]] = true
			}
		}
	}
	for name, want := range map[string][]string{
		"walstream_errors_total":             failureKinds,
		"walstream_reconnects_total":         failurePeers,
		"walstream_kafka_transactions_total": {"committed", "aborted"},
	} {
		for _, l := range want {
			if !zero[name][l] {
				t.Errorf("%s has no series at 0 for %q", name, l)
			}
		}
	}
}
