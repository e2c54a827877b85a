#!/bin/sh
# Runs once, when the postgres volume is created: the ledger gets its own
# role and database, so the worker never connects as the superuser.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  --set=pw="$AGENTSAGA_LEDGER_PASSWORD" <<'SQL'
CREATE ROLE agentsaga LOGIN PASSWORD :'pw';
CREATE DATABASE agentsaga OWNER agentsaga;
REVOKE ALL ON DATABASE agentsaga FROM PUBLIC;
SQL
