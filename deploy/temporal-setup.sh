#!/bin/sh
# Creates or upgrades Temporal's two PostgreSQL databases with Temporal's own sql tool and the
# schemas built into it, then registers the namespace. Safe to run on every start: an existing
# database is kept, a schema already at the latest version is left as it is.
#
# Run by docker-compose.yml's temporal-setup job (temporalio/admin-tools image) and by
# `npm run cluster` (the tools built from Temporal's Go modules). Needs `temporal-sql-tool` and
# `temporal` on PATH, and:
#   POSTGRES_SEEDS, DB_PORT (5432), POSTGRES_USER, POSTGRES_PWD   where PostgreSQL is
#   TEMPORAL_ADDRESS (temporal:7233)                              the frontend, for the namespace
#   TEMPORAL_NAMESPACE (default), TEMPORAL_NAMESPACE_RETENTION (168h)
#   SCHEMA_READY_FILE                                            touched once the schema is done
#
#   temporal-setup.sh schema      the databases and schemas only (before the server starts)
#   temporal-setup.sh namespace   wait for the frontend, then register the namespace
#   temporal-setup.sh             both: schema, SCHEMA_READY_FILE, namespace
set -eu

schema() {
  : "${POSTGRES_SEEDS:?set POSTGRES_SEEDS to the PostgreSQL host}"
  : "${POSTGRES_USER:?set POSTGRES_USER}"
  : "${POSTGRES_PWD:?set POSTGRES_PWD}"
  # The sql tool reads its connection from these (the password stays off the command line).
  export SQL_PLUGIN=postgres12 SQL_HOST="$POSTGRES_SEEDS" SQL_PORT="${DB_PORT:-5432}" SQL_USER="$POSTGRES_USER" SQL_PASSWORD="$POSTGRES_PWD"
  for pair in temporal:temporal temporal_visibility:visibility; do
    db=${pair%%:*}
    name=${pair##*:}
    # Creates the database unless it exists (an existing one is not an error).
    temporal-sql-tool --db "$db" create-database
    # Version tables (idempotent), then every versioned step above the stored version.
    temporal-sql-tool --db "$db" setup-schema -v 0.0
    temporal-sql-tool --db "$db" update-schema --schema-name "postgresql/v12/$name"
  done
  echo "Temporal schema is up to date"
}

namespace() {
  address=${TEMPORAL_ADDRESS:-temporal:7233}
  ns=${TEMPORAL_NAMESPACE:-default}
  tries=0
  until temporal operator cluster health --address "$address" >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 120 ]; then
      echo "Temporal at $address is not healthy after 120 s" >&2
      exit 1
    fi
    sleep 1
  done
  if temporal operator namespace describe --namespace "$ns" --address "$address" >/dev/null 2>&1; then
    echo "namespace $ns exists"
  else
    temporal operator namespace create --namespace "$ns" --retention "${TEMPORAL_NAMESPACE_RETENTION:-168h}" --address "$address"
  fi
}

case "${1:-all}" in
  schema) schema ;;
  namespace) namespace ;;
  all)
    schema
    [ -z "${SCHEMA_READY_FILE:-}" ] || touch "$SCHEMA_READY_FILE"
    namespace
    ;;
  *) echo "usage: $0 [schema|namespace]" >&2; exit 2 ;;
esac
