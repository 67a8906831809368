#!/usr/bin/env bash
# Installs what the tests and the demo need from Debian when it is missing:
# the Postgres 15 server, kcat (an independent Kafka client, librdkafka), and
# Prometheus with promtool, which check the alert rules and the dashboard.
set -euo pipefail
missing=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
command -v psql >/dev/null || missing+=(postgresql-client)
command -v kcat >/dev/null || missing+=(kcat)
{ command -v prometheus && command -v promtool; } >/dev/null || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing ${missing[*]}: run as root, or apt-get install -y ${missing[*]}" >&2
  exit 0 # tests skip what they cannot start, unless CI is set
fi
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
