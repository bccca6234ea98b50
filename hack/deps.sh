#!/usr/bin/env bash
# Installs what the data-path tests use: Debian's PostgreSQL 15 (server,
# client, pg_dump/pg_restore, pgbench), and a MinIO server and Helm built
# from the Go module proxy into the cache. It does nothing when they are present, and
# says what to install when it cannot (not root).
set -euo pipefail
PG_MAJOR=${PG_MAJOR:-15}
# `hack/deps.sh pgbackrest`: the benchmark's peer, from Debian.
if [ "${1:-}" = pgbackrest ]; then
  command -v pgbackrest >/dev/null && exit 0
  [ "$(id -u)" = 0 ] || { echo "pgBackRest is missing: install pgbackrest (apt)" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends pgbackrest >/dev/null
  exit 0
fi
# MinIO for the data-path tests; Helm for the chart's tests (test/chart).
"$(dirname "$0")/build-addons.sh" minio helm >/dev/null
if [ -x "/usr/lib/postgresql/$PG_MAJOR/bin/postgres" ] && [ -x "/usr/lib/postgresql/$PG_MAJOR/bin/pg_restore" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "PostgreSQL $PG_MAJOR is missing: install postgresql-$PG_MAJOR (sudo apt-get install postgresql-$PG_MAJOR)" >&2
  exit 1
fi
echo "installing postgresql-$PG_MAJOR from Debian"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "postgresql-$PG_MAJOR" "postgresql-client-$PG_MAJOR" >/dev/null
# The package starts a default cluster; the tests run their own.
if command -v pg_ctlcluster >/dev/null; then
  pg_ctlcluster "$PG_MAJOR" main stop 2>/dev/null || true
fi
