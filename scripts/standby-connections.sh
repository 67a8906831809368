#!/usr/bin/env bash
# Counts the connections an idle standby walstream opens on the primary in
# one minute, as Postgres's log_connections logs them: a Postgres 15 with
# log_connections = on, the devbroker, one walstream streaming the slot and
# a second one waiting for it. docs/operations.md, "Standby", reports the
# figure. Run as root (Postgres runs as the postgres user):
#
#   go build -o /tmp/walstream ./cmd/walstream && go build -o /tmp/devbroker ./cmd/devbroker
#   scripts/standby-connections.sh /tmp/walstream /tmp/devbroker
set -euo pipefail
bin=$1 broker=$2
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
dir=$(mktemp -d)
chown postgres "$dir"
pgport=55439 kafka=127.0.0.1:59092
runuser -u postgres -- "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust >/dev/null
cat >>"$dir/data/postgresql.conf" <<CONF
wal_level = logical
port = $pgport
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
log_connections = on
CONF
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/pg.log" -w start >/dev/null
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
"$broker" -addr "$kafka" >"$dir/broker.log" 2>&1 &
pids+=($!)
"$PGBIN/psql" -h 127.0.0.1 -p "$pgport" -U postgres -q -c "CREATE TABLE public.outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL)"
args=(run --pg-url "postgres://postgres@127.0.0.1:$pgport/postgres" --kafka-brokers "$kafka" --http-addr "")
"$bin" "${args[@]}" >"$dir/active.log" 2>&1 &
pids+=($!)
until grep -q 'msg=streaming' "$dir/active.log"; do sleep 0.5; done
"$bin" "${args[@]}" >"$dir/standby.log" 2>&1 &
pids+=($!)
until grep -q 'msg="standby' "$dir/standby.log"; do sleep 0.5; done
sleep 5
before=$(grep -c 'connection authorized' "$dir/pg.log")
sleep 60
after=$(grep -c 'connection authorized' "$dir/pg.log")
echo "connections authorized in 60 s while a standby waits: $((after - before))"
