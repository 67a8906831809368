#!/usr/bin/env bash
# Installs what the tests and the demo need from Debian when it is missing:
# the Postgres 15 server and kcat (an independent Kafka client, librdkafka).
set -euo pipefail
missing=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
command -v psql >/dev/null || missing+=(postgresql-client)
command -v kcat >/dev/null || missing+=(kcat)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing ${missing[*]}: run as root, or apt-get install -y ${missing[*]}" >&2
  exit 0 # tests skip what they cannot start, unless CI is set
fi
echo "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
