#!/bin/sh
# Makes the cluster on first start (user, password, database from the environment), then runs
# Postgres in the foreground. Each step of the first start is logged with its time, so a slow
# or failed start shows where it stood. The cluster is a test's: initdb does not sync to disk.
set -eu
step() { printf '%s postgres-entrypoint: %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*" >&2; }
bin=$(ls -d /usr/lib/postgresql/*/bin | head -n 1)
export PGDATA=/var/lib/postgresql/data/cluster
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  step "initdb"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  "$bin/initdb" --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --no-sync >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  # The database is made on a server only this script can reach (no TCP, its socket in a
  # directory of its own), so a health check never takes it for the server that stays.
  step "creating the database $POSTGRES_DB"
  setup_socket=$(mktemp -d)
  "$bin/pg_ctl" --wait --options="-c listen_addresses='' -c unix_socket_directories=$setup_socket" start >&2
  "$bin/createdb" --host="$setup_socket" --username="$POSTGRES_USER" "$POSTGRES_DB"
  "$bin/pg_ctl" --wait stop >&2
  rmdir "$setup_socket"
fi
step "starting postgres"
exec "$bin/postgres" -c listen_addresses='*'
