#!/usr/bin/env bash
# test-citus.sh runs the pattern's tests on a Citus cluster that is already
# running (docs/distributed.md says how to build and start one): CITUS_URL is
# the URL of the coordinator's administrative database, which has the citus
# extension and the workers added (citus_add_node). Each test creates its own
# database on the coordinator and on every worker, distributes hookgate's
# tables by sender there (migrations/citus/distribute.sql) and drops it
# afterwards (internal/testing/pgtest). PKGS and GOTESTFLAGS as for test.sh;
# SERVER_TESTS names cmd/server's tests (real gateway processes) to run too.
# Every test's database is watched for two-phase commits (pg_dist_transaction,
# read every 200 ms and at the test's end): a test whose database shows one
# fails (internal/testing/pgtest). TestCitusCoordinatorCrashLosesNoForward (gdb kills
# the coordinator's backend between the workers' commit and its own, which
# restarts the coordinator) runs alone after the others; CRASH_TESTS=''
# leaves it out.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z ${CITUS_URL:-} ]]; then
	echo "test-citus: set CITUS_URL to the coordinator's URL, e.g. make test-citus CITUS_URL=postgres://postgres@127.0.0.1:9700/postgres" >&2
	exit 2
fi
export HOOKGATE_TEST_DATABASE_URL=$CITUS_URL HOOKGATE_TEST_CITUS=1
version=$(psql "$CITUS_URL" -Atc "SELECT citus_version() || ' / ' || version()" 2>/dev/null || true)
echo "test-citus: ${version:-Citus version unknown (psql missing?)}"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
# GOTESTFLAGS is split as the shell splits words, quotes included.
test_flags=()
if [[ -n ${GOTESTFLAGS:-} ]]; then
	mapfile -t test_flags < <(xargs printf '%s\n' <<<"$GOTESTFLAGS")
fi
# shellcheck disable=SC2086 # PKGS is a word list
go test -race -count=1 -timeout 30m -v "${test_flags[@]}" ${PKGS} >"$out" 2>&1 || rc=$?
# The tests of real gateway processes that run on Citus too (SERVER_TESTS,
# a |-separated list of cmd/server's test names; empty: none).
if [[ -n ${SERVER_TESTS:-} ]]; then
	go test -race -count=1 -timeout 20m -v -run "^(${SERVER_TESTS})\$" ./cmd/server/ >>"$out" 2>&1 || rc=$?
fi
# CITUS_TEST_LOG, when set, keeps go test's whole -v output there.
# The coordinator-crash test restarts the coordinator under whatever runs on
# it: alone, after the others (CRASH_TESTS='' leaves it out).
if [[ -n ${CRASH_TESTS-TestCitusCoordinatorCrashLosesNoForward} ]]; then
	HOOKGATE_TEST_CITUS_CRASH=1 go test -race -count=1 -timeout 10m -v -run "^(${CRASH_TESTS-TestCitusCoordinatorCrashLosesNoForward})\$" ./internal/forward/ >>"$out" 2>&1 || rc=$?
fi
if [[ -n ${CITUS_TEST_LOG:-} ]]; then cp "$out" "$CITUS_TEST_LOG"; fi
# The verdicts, each skip with its reason, every failure, and the tests' log
# lines (a parallel test's log comes before its verdict).
awk '
	/^(=== RUN|=== PAUSE|=== CONT|=== NAME)/ { next }
	/^ *--- PASS/ { pass++; next }
	/^ *--- SKIP/ { skip++; print; getline; print; next }
	/^ *--- FAIL/ { fail++; infail = 1; print; next }
	/^(ok|FAIL|PASS)/ { print; infail = 0; next }
	/^ +[A-Za-z0-9_.]+\.go:[0-9]+:/ { print; next }
	infail || /panic|DATA RACE/ { print }
	END { printf "test-citus: %d passed, %d skipped, %d failed\n", pass, skip, fail }
' "$out"
exit "$rc"
