#!/usr/bin/env bash
# make demo: a local Postgres, a broker and walstream, some sample orders in
# a few transactions (one rolled back), and what a read_committed consumer
# (kcat) then sees. The broker is the local one (devbroker: kfake, quick to
# start), or Apache Kafka with DEMO_BROKER=kafka. Stops everything it
# started, unless DEMO_KEEP is set.
#
# Variables (docs/getting-started.md, Try it locally):
#   PGBIN           Postgres server binaries (default /usr/lib/postgresql/15/bin)
#   DEMO_PG_PORT    Postgres port on 127.0.0.1 (default 55432)
#   DEMO_BROKER     devbroker (default) or kafka: Apache Kafka, one node, as
#                   scripts/deps.sh demo-kafka installs it (scripts/java/versions.env)
#   DEMO_BROKER_ADDR the broker's address (default 127.0.0.1:59092; Kafka's
#                   controller listens on the next port)
#   DEMO_HTTP_ADDR  walstream's /metrics, /healthz and /readyz (default 127.0.0.1:59187)
#   DEMO_INBOX=1    also run examples/inbox, a consumer applying the records exactly once
#   DEMO_KEEP=1     keep everything running afterwards, to explore; Ctrl-C stops it
# Logs: .demo/walstream.log, .demo/broker.log, .demo/inbox.log, and Postgres's
# in .demo/pg/log (when run as root, possibly a /tmp/walstream-demo-pg.* folder:
# the script says which).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGPORT=${DEMO_PG_PORT:-55432}
BROKER_KIND=${DEMO_BROKER:-devbroker}
BROKER=${DEMO_BROKER_ADDR:-127.0.0.1:59092}
HTTP_ADDR=${DEMO_HTTP_ADDR:-127.0.0.1:59187}
demo=$root/.demo
say() { printf '\n== %s\n' "$*"; }

case "$BROKER_KIND" in
  devbroker | kafka) ;;
  *) echo "DEMO_BROKER=$BROKER_KIND: want devbroker or kafka" >&2; exit 2 ;;
esac
rm -rf "$demo" && mkdir -p "$demo/bin"
pids=() as_pg=() pgdir=
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -n "$pgdir" ] || return 0
  "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$pgdir/data" stop -m fast -w >/dev/null 2>&1 || true
  [ "$pgdir" = "$demo/pg" ] || rm -rf "$pgdir"
}
trap cleanup EXIT
# An interrupt exits through the EXIT trap, which stops everything.
trap 'exit 130' INT TERM

# The demo's binaries, in one build without default.pgo: the profile changes
# nothing a demo shows, and compiling walstream's dependencies with it, then
# again without it for the local broker, made a first build (an empty build
# cache) 133-148 s of CPU against 102 s. It runs while scripts/deps.sh
# installs what this demo runs and is missing (Postgres 15, psql and kcat;
# with Apache Kafka a Java runtime and Kafka's jars): on a first run one
# waits mostly on the network and dpkg, the other on the cores.
pkgs=(./cmd/walstream)
[ "$BROKER_KIND" = kafka ] || pkgs+=(./cmd/devbroker)
[ -z "${DEMO_INBOX:-}" ] || pkgs+=(./examples/inbox)
say "building ${pkgs[*]} (log: .demo/build.log)"
go build -pgo=off -o "$demo/bin/" "${pkgs[@]}" >"$demo/build.log" 2>&1 &
build=$!
pids+=("$build")
if [ "$BROKER_KIND" = kafka ]; then bash scripts/deps.sh demo-kafka; else bash scripts/deps.sh demo; fi
if [ ! -x "$PGBIN/initdb" ] || ! command -v kcat >/dev/null || ! command -v psql >/dev/null; then
  echo "demo needs Postgres 15 server binaries in $PGBIN, psql and kcat: apt-get install -y postgresql kcat" >&2
  exit 1
fi
wait "$build" || { cat "$demo/build.log" >&2; echo "building ${pkgs[*]} failed" >&2; exit 1; }
pids=()

# Postgres refuses to run as root: run it as the postgres user, in a folder
# that user can reach.
pgdir=$demo/pg
if [ "$(id -u)" -eq 0 ]; then
  as_pg=(runuser -u postgres --)
  if ! runuser -u postgres -- test -x "$demo"; then pgdir=$(mktemp -d /tmp/walstream-demo-pg.XXXXXX); fi
  mkdir -p "$pgdir" && chown postgres "$pgdir"
fi

say "starting Postgres 15 on 127.0.0.1:$PGPORT (wal_level=logical; log: $pgdir/log)"
"${as_pg[@]}" "$PGBIN/initdb" -D "$pgdir/data" -U postgres --auth=trust -E UTF8 >/dev/null
"${as_pg[@]}" "$PGBIN/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w start \
  -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $pgdir -c wal_level=logical" >/dev/null
url="postgres://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable"
psql -q -X -v ON_ERROR_STOP=1 "$url" -f testdata/outbox.sql

if [ "$BROKER_KIND" = kafka ]; then
  # One KRaft node, as in docker-compose.yml: broker and controller in one
  # JVM, internal topics with one replica.
  # shellcheck source=scripts/java/versions.env
  . scripts/java/versions.env
  libs=${WALSTREAM_JAVA_DIR:-/opt/walstream-java}/kafka-$KAFKA_VERSION/libs
  [ -d "$libs" ] || { echo "Apache Kafka $KAFKA_VERSION is not in $libs: run scripts/deps.sh demo-kafka" >&2; exit 1; }
  host=${BROKER%:*} port=${BROKER##*:}
  mkdir -p "$demo/kafka"
  cat >"$demo/kafka/server.properties" <<EOT
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$host:$((port + 1))
listeners=PLAINTEXT://$BROKER,CONTROLLER://$host:$((port + 1))
advertised.listeners=PLAINTEXT://$BROKER
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$demo/kafka/data
num.partitions=3
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
EOT
  printf 'rootLogger.level=WARN\nrootLogger.appenderRef.out.ref=OUT\nappender.out.type=Console\nappender.out.name=OUT\nappender.out.layout.type=PatternLayout\nappender.out.layout.pattern=[%%d] %%p %%m (%%c)%%n\nlogger.srv.name=kafka.server.KafkaRaftServer\nlogger.srv.level=INFO\n' >"$demo/kafka/log4j2.properties"
  java=(java -Dlog4j2.configurationFile="file:$demo/kafka/log4j2.properties" -cp "$libs/*")
  say "starting Apache Kafka $KAFKA_VERSION on $BROKER (log: .demo/broker.log)"
  "${java[@]}" kafka.tools.StorageTool format -t "$("${java[@]}" kafka.tools.StorageTool random-uuid)" \
    -c "$demo/kafka/server.properties" >"$demo/broker.log" 2>&1
  "${java[@]}" -Xmx512m kafka.Kafka "$demo/kafka/server.properties" >>"$demo/broker.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do grep -q 'Kafka Server started' "$demo/broker.log" && break; sleep 0.1; done
  grep -q 'Kafka Server started' "$demo/broker.log" || { cat "$demo/broker.log"; exit 1; }
else
  say "starting the local broker (kfake, a development stand-in for Kafka) on $BROKER (log: .demo/broker.log)"
  "$demo/bin/devbroker" -addr "$BROKER" -data-dir "$demo/kafka" >"$demo/broker.log" 2>&1 &
  pids+=($!)
fi

say "starting walstream (log: .demo/walstream.log; metrics and health on $HTTP_ADDR)"
WALSTREAM_PG_URL=$url WALSTREAM_KAFKA_BROKERS=$BROKER WALSTREAM_HTTP_ADDR=$HTTP_ADDR WALSTREAM_STATUS_INTERVAL=1s \
  "$demo/bin/walstream" run >"$demo/walstream.log" 2>&1 &
pids+=($!)
walstream_pid=$!
for _ in $(seq 300); do grep -q 'msg=streaming' "$demo/walstream.log" && break; sleep 0.1; done
grep -q 'msg=streaming' "$demo/walstream.log" || { cat "$demo/walstream.log"; exit 1; }

say "inserting sample orders: four transactions, the third (order o-9999) rolled back"
psql -q -X -v ON_ERROR_STOP=1 "$url" -f testdata/demo-orders.sql
end=$(psql -X -tA "$url" -c "SELECT pg_current_wal_insert_lsn()")

# walstream confirms a position to Postgres only after Kafka committed it.
for _ in $(seq 300); do
  ok=$(psql -X -tA "$url" -c "SELECT confirmed_flush_lsn >= '$end' FROM pg_replication_slots WHERE slot_name = 'walstream'")
  [ "$ok" = t ] && break
  sleep 0.1
done
[ "$ok" = t ] || { echo "walstream did not confirm $end in 30s"; cat "$demo/walstream.log"; exit 1; }

# Kafka writes a commit's markers after the commit returns: a record
# becomes visible to read_committed consumers a moment after walstream has
# confirmed it. Wait until every committed row is readable.
read_topics() {
  for topic in outbox.event.Customer outbox.event.Order; do
    kcat -b "$BROKER" -C -t "$topic" -o beginning -e -q -X isolation.level=read_committed \
      -f 'topic=%t partition=%p offset=%o key=%k header %h\n    value=%s\n'
  done
}
rows=$(psql -X -tA "$url" -c "SELECT count(*) FROM outbox")
for _ in $(seq 100); do
  [ "$(read_topics | grep -c '^topic=')" -ge "$rows" ] && break
  sleep 0.1
done
say "what a read_committed consumer sees (kcat)"
read_topics
say "slot walstream confirmed up to $end; order o-9999 was rolled back and is not above"

# DEMO_INBOX=1 also runs the inbox example (examples/inbox): a consumer that
# applies the records to a second database, exactly once.
if [ -n "${DEMO_INBOX:-}" ]; then
  say "starting the inbox example (examples/inbox; log: .demo/inbox.log)"
  psql -q -X -v ON_ERROR_STOP=1 "$url" -c "CREATE DATABASE inbox"
  inbox_url="postgres://postgres@127.0.0.1:$PGPORT/inbox?sslmode=disable"
  INBOX_PG_URL=$inbox_url INBOX_KAFKA_BROKERS=$BROKER INBOX_TOPICS=outbox.event.Customer,outbox.event.Order \
    "$demo/bin/inbox" >"$demo/inbox.log" 2>&1 &
  pids+=($!)
  want=$(psql -X -tA "$url" -c "SELECT count(*) FROM outbox")
  got=0
  for _ in $(seq 300); do
    got=$(psql -X -tA "$inbox_url" -c "SELECT count(*) FROM aggregate_events" 2>/dev/null || echo 0)
    [ "$got" = "$want" ] && break
    sleep 0.1
  done
  [ "$got" = "$want" ] || { echo "the inbox applied $got of $want events in 30s"; cat "$demo/inbox.log"; exit 1; }
  say "what the inbox applied, each event once (database inbox)"
  psql -X "$inbox_url" -c "SELECT topic, aggregate_id, version, event_id, convert_from(payload, 'UTF8') AS payload
    FROM aggregate_events ORDER BY topic, aggregate_id, version"
  psql -X "$inbox_url" -c "SELECT consumer, topic, partition, next_offset FROM inbox_offsets ORDER BY topic, partition"
fi

if [ -n "${DEMO_KEEP:-}" ]; then
  say "the stack keeps running (DEMO_KEEP=1); explore it from another terminal:"
  cat <<EOT
  metrics     curl -s http://$HTTP_ADDR/metrics | grep ^walstream_
  readiness   curl -s http://$HTTP_ADDR/readyz; curl -s 'http://$HTTP_ADDR/readyz?standby=1'
  status      $demo/bin/walstream status --pg-url '$url' --kafka-brokers $BROKER
  more rows   psql '$url' -f testdata/demo-orders.sql
  records     kcat -b $BROKER -C -t outbox.event.Order -o beginning -e -X isolation.level=read_committed
  logs        $demo/walstream.log, $demo/broker.log, $pgdir/log
  stop        Ctrl-C here, or: kill $$
EOT
  while kill -0 "$walstream_pid" 2>/dev/null; do sleep 1; done
  echo "walstream exited; see $demo/walstream.log" >&2
  exit 1
fi
