#!/bin/sh
# The official postgres image's first start, in short: an empty $PGDATA gets a cluster whose
# superuser is $POSTGRES_USER (password $POSTGRES_PASSWORD, scram-sha-256 over TCP) and a database
# $POSTGRES_DB, in UTF-8 (without a locale initdb would pick SQL_ASCII, and psycopg 3 then reads
# text as bytes); then the server runs as `postgres`, listening on every address.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    chown postgres "$pwfile"
    su postgres -c "initdb -D '$PGDATA' -U '$POSTGRES_USER' --pwfile='$pwfile' --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8" >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    su postgres -c "pg_ctl -D '$PGDATA' -o '-c listen_addresses=' -w start" >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        su postgres -c "createdb -U '$POSTGRES_USER' '$POSTGRES_DB'"
    fi
    su postgres -c "pg_ctl -D '$PGDATA' -m fast -w stop" >/dev/null
fi
if [ "$1" = postgres ]; then
    shift
    exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
