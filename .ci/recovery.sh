#!/usr/bin/env bash
# recovery.sh measures how long the gateway takes to recover from crashes.
# It runs cmd/server's crash tests against a throwaway PostgreSQL, without
# the race detector, and prints the recovery time each one logs. The tests
# assert that every event arrives and none twice. The times are figures to
# compare between runs on one machine, not bounds.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
tests='^(TestForwardsSurviveSIGKILL|TestSIGKILLWithSlowForwardsInFlight|TestFastPathSIGKILL|TestForwardsResumeAfterDatabaseCrash)$'
rc=0
PKGS=./cmd/server/ TEST_RACE= GOTESTFLAGS="-count=1 -v -run $tests" .ci/test.sh >"$out" 2>&1 || rc=$?
grep -E '^(=== RUN|--- (PASS|FAIL))|delivered .* after|answered 2xx .* after|took over' "$out" | sed 's/^ *//'
if [[ $rc -ne 0 ]]; then
	echo "recovery: the crash tests failed (exit $rc); their output:" >&2
	cat "$out" >&2
fi
exit "$rc"
