#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL server on loopback and BLOCKBUDGET_TEST_POSTGRES_URL
# pointing at it, so the ledger and store tests also run on PostgreSQL, unchanged.
#
# - If BLOCKBUDGET_TEST_POSTGRES_URL is already set, the command runs against that server.
# - If BLOCKBUDGET_NO_POSTGRES=1, or no PostgreSQL can be found or installed, the command runs
#   without it and the PostgreSQL variants of the tests are skipped (said loudly below).
# - As root with apt-get available (CI and fresh machines of this kind), the Debian package
#   `postgresql` is installed if missing.
set -euo pipefail

if [ -n "${BLOCKBUDGET_TEST_POSTGRES_URL:-}" ] || [ "${BLOCKBUDGET_NO_POSTGRES:-0}" = 1 ]; then
  exec "$@"
fi

find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
PGBIN=$(find_bin || true)
if [ -z "$PGBIN" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "with-postgres: installing the Debian package postgresql ..." >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) \
    >/tmp/blockbudget-apt-postgresql.log 2>&1 || echo "with-postgres: apt-get failed (see /tmp/blockbudget-apt-postgresql.log)" >&2
  PGBIN=$(find_bin || true)
fi
if [ -z "$PGBIN" ]; then
  echo "with-postgres: PostgreSQL not available — its test variants will be SKIPPED" >&2
  exec "$@"
fi

DIR=$(mktemp -d /tmp/blockbudget-pg.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
if [ "$(id -u)" = 0 ]; then
  chown postgres "$DIR"
  as_pg() { su postgres -s /bin/bash -c "$*"; }
else
  as_pg() { bash -c "$*"; }
fi
cleanup() {
  as_pg "'$PGBIN/pg_ctl' -D '$DIR/data' -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

as_pg "'$PGBIN/initdb' -D '$DIR/data' -A trust -U postgres" >"$DIR/initdb.log" 2>&1
as_pg "'$PGBIN/pg_ctl' -D '$DIR/data' -l '$DIR/server.log' -w -o \"-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=200\" start" >/dev/null
as_pg "'$PGBIN/createdb' -h 127.0.0.1 -p $PORT -U postgres blockbudget_test"
export BLOCKBUDGET_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$PORT/blockbudget_test"
echo "with-postgres: PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT" >&2
"$@"
