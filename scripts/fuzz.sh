#!/usr/bin/env bash
# Fuzzes every operation of the OpenAPI document with schemathesis (from PyPI) against a service
# started here on loopback, in a scratch data directory. Fails on any 5xx or any response that
# does not match the document. Usage: npm run fuzz [-- extra schemathesis options]
set -euo pipefail
cd "$(dirname "$0")/.."
# schemathesis, pinned, in a virtual environment of the per-user cache (reused by later runs and
# clones); SCHEMATHESIS names another binary.
version=4.32.5
venv="${XDG_CACHE_HOME:-$HOME/.cache}/workflow-svc/schemathesis-$version"
st=${SCHEMATHESIS:-$venv/bin/schemathesis}
if [ ! -x "$st" ]; then
  echo "installing schemathesis $version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==$version"
fi
dir=$(mktemp -d)
chmod 755 "$dir"
port=${FUZZ_PORT:-18181}
password="fuzz-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
SVC_DATA_DIR="$dir/data" PORT=$port HOST=127.0.0.1 SVC_EMBEDDED_PG_PORT=$((port + 1)) TEMPORAL_PORT=$((port + 2)) \
  TEMPORAL_UI_PORT=$((port + 3)) SVC_ADMIN_APP_PASSWORD="$password" LOG_LEVEL=warn \
  SVC_LICENSE_RATE_LIMIT=1000000 SVC_LOGIN_MAX_FAILURES=1000000 \
  node --import tsx src/main.ts start >"$dir/service.log" 2>&1 &
service=$!
trap 'kill -INT $service 2>/dev/null; wait $service 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 1; done
# revokeAppPassword is left out: it would revoke the credential the fuzzer itself uses.
status=0
"$st" --config-file scripts/schemathesis.toml run "http://127.0.0.1:$port/api/openapi.json" -a "admin:$password" \
  --exclude-operation-id revokeAppPassword -n "${FUZZ_EXAMPLES:-40}" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --phases examples,coverage,fuzzing --no-color "$@" || status=$?
# A failure's cause is in the service's log: its errors (levels 50 and 60) and the warnings of
# its requests (level 40 with a request id: every 5xx it answered, with its cause); the worker's
# warnings (activities of fuzzed workflows failing, as they should) are left out.
if [ "$status" -ne 0 ]; then
  echo "== the service's errors, and its requests' warnings, during the fuzz run (last 20)" >&2
  grep -E '"level":(50|60)|"level":40,.*"request_id"|Temporal dev server exited' "$dir/service.log" | tail -n 20 | cut -c1-1500 >&2 || true
fi
exit "$status"
