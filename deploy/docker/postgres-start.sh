#!/bin/sh
# initdb on the first start (trust for local socket connections, a password for TCP), then
# PostgreSQL in the foreground with the address and port from the environment. A worker host
# that dies never closes its connections: keepalives find them, and a dead client's open
# transaction is ended before its row locks stall the live workers (bench/chaos saw that).
set -eu
DATA=${PGDATA:-/var/lib/postgresql/data}
BIN=/usr/lib/postgresql/15/bin
if [ ! -s "$DATA/PG_VERSION" ]; then
  pw=$(mktemp); printf '%s\n' "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" >"$pw"
  "$BIN/initdb" -D "$DATA" -U postgres --pwfile="$pw" -A scram-sha-256 --auth-local=trust -E UTF8 >/dev/null
  rm -f "$pw"
  "$BIN/pg_ctl" -D "$DATA" -o "-c listen_addresses=''" -w start >/dev/null
  psql -v ON_ERROR_STOP=1 -U postgres -c "CREATE USER ccscope PASSWORD '$POSTGRES_PASSWORD'" \
       -c "CREATE DATABASE ccscope OWNER ccscope" >/dev/null
  "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
fi
exec "$BIN/postgres" -D "$DATA" -c listen_addresses="${PG_LISTEN:-127.0.0.1}" -p "${PG_PORT:-5432}" \
  -c unix_socket_directories=/tmp -c max_connections="${PG_MAX_CONNECTIONS:-200}" \
  -c idle_in_transaction_session_timeout=60s -c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 \
  -c tcp_keepalives_count=3
