#!/usr/bin/env bash
# bench-console.sh is `make bench-console`: BenchmarkConsoleList (internal/console)
# against a throwaway PostgreSQL (fsync on), without the race detector, so that
# the figures are the console's own.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/tmp-pg.sh

tmp_pg_start
export HOOKGATE_TEST_DATABASE_URL=$TMP_PG_URL
export HOOKGATE_PG_BINDIR=$PG_BINDIR

go test -count=1 -timeout 30m -run '^$' -bench BenchmarkConsoleList -benchtime "${BENCHTIME:-100x}" ./internal/console/
