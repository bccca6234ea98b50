#!/bin/sh
# The parts of the official postgres image's entrypoint that daytwo and its
# tests rely on: POSTGRES_PASSWORD / POSTGRES_USER / POSTGRES_DB on first start,
# scram-sha-256 on the network, then `exec postgres`. daytwo's instance manager
# replaces this entrypoint in Database pods.
set -eu
if [ "${1:-}" = "postgres" ] || [ "${1#-}" != "${1:-}" ]; then
  [ "${1#-}" != "${1:-}" ] && set -- postgres "$@"
  if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" && chown -R postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
  fi
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
    user=${POSTGRES_USER:-postgres}
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
    rm -f "$pwfile"
    printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
    db=${POSTGRES_DB:-$user}
    if [ "$db" != postgres ]; then
      pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
      psql -v ON_ERROR_STOP=1 --username "$user" --dbname postgres -c "CREATE DATABASE \"$db\"" >/dev/null
      pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    fi
  fi
  exec "$@" -c listen_addresses='*'
fi
exec "$@"
