#!/usr/bin/env bash
# bench.sh runs the load benchmark (cmd/bench) against a throwaway
# PostgreSQL configured as in production (fsync on), which it stops and
# deletes afterwards. Arguments are passed to the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/tmp-pg.sh

# tmp_pg_start points TMPDIR into the throwaway directory it deletes on
# exit: what -keep keeps goes where TMPDIR pointed before.
export HOOKGATE_BENCH_KEEP_DIR=${TMPDIR:-/tmp}
# -pgstat reads pg_stat_statements, which the server loads at start only.
PG_STATEMENTS=
for arg in "$@"; do
	[[ $arg == -pgstat || $arg == --pgstat ]] && PG_STATEMENTS=1
done
PG_FAST= PG_STATEMENTS=$PG_STATEMENTS tmp_pg_start
export HOOKGATE_BENCH_DATABASE_URL=$TMP_PG_URL
export HOOKGATE_PG_BINDIR=$PG_BINDIR

go run ./cmd/bench "$@"
