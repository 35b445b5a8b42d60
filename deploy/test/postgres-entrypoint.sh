#!/bin/sh
# Makes the cluster on first start (user, password, database from the environment), then runs
# Postgres in the foreground.
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | head -n 1)
export PGDATA=/var/lib/postgresql/data/cluster
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  "$bin/initdb" --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  "$bin/pg_ctl" --wait --options="-c listen_addresses=''" start >/dev/null
  "$bin/createdb" --username="$POSTGRES_USER" "$POSTGRES_DB"
  "$bin/pg_ctl" --wait stop >/dev/null
fi
exec "$bin/postgres" -c listen_addresses='*'
