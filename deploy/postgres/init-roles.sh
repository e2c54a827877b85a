#!/bin/sh
# Runs once, when the postgres volume is created (docker-entrypoint-initdb.d),
# as the superuser `postgres`, whose password only this container knows.
# Temporal and the ledger each get a role of their own that owns only its
# databases: neither is a superuser, neither may create roles or databases.
# The ledger has two: agentsaga owns it and runs `starter ledger migrate`;
# the workers connect as agentsaga_app, which `ledger migrate
# --grant-runtime` gives what a worker needs and no UPDATE, DELETE or
# TRUNCATE of the audit trail.
# The passwords are read from the mounted secret files, never the environment.
set -eu
temporal_pw=$(cat /run/secrets/temporal_db_password)
ledger_pw=$(cat /run/secrets/ledger_owner_password)
app_pw=$(cat /run/secrets/ledger_app_password)
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  --set=tpw="$temporal_pw" --set=lpw="$ledger_pw" --set=apw="$app_pw" <<'SQL'
CREATE ROLE temporal LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'tpw';
CREATE DATABASE temporal OWNER temporal;
CREATE DATABASE temporal_visibility OWNER temporal;
CREATE ROLE agentsaga LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'lpw';
CREATE DATABASE agentsaga OWNER agentsaga;
CREATE ROLE agentsaga_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'apw';
REVOKE ALL ON DATABASE temporal FROM PUBLIC;
REVOKE ALL ON DATABASE temporal_visibility FROM PUBLIC;
REVOKE ALL ON DATABASE agentsaga FROM PUBLIC;
GRANT CONNECT ON DATABASE agentsaga TO agentsaga_app;
SQL
# Temporal's visibility schema (postgres12, v1.2) needs btree_gin; made here
# by the superuser, so the temporal role needs no right to create extensions
# (the schema's own step skips an extension that exists).
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname temporal_visibility \
  -c 'CREATE EXTENSION IF NOT EXISTS btree_gin'
