#!/usr/bin/env bash
# test.sh runs the Go tests against a throwaway PostgreSQL (fsync off), which
# it stops and deletes afterwards whatever happens; it exits with go test's
# status. PKGS (default ./...) and GOTESTFLAGS (extra go test flags) are read
# from the environment; TEST_RACE='' runs without the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/tmp-pg.sh

PG_FAST=1 tmp_pg_start
export HOOKGATE_TEST_DATABASE_URL=$TMP_PG_URL
export HOOKGATE_PG_BINDIR=$PG_BINDIR
# One migrated template for every test process of this run (internal/testing/pgtest),
# on this run's new server.
export HOOKGATE_TEST_TEMPLATE=hgtpl_shared
# A database a test is done with is emptied and given to the next test of
# the same process instead of being dropped (internal/testing/pgtest/reuse.go):
# copying the template and dropping the copy cost the server more than any
# test.
export HOOKGATE_TEST_REUSE_DB=1
# The race detector sleeps 1 s when a test binary exits, to let other threads
# report; the tests have none left by then (goleak checks it), and every
# package paid the second.
export GORACE=${GORACE:-atexit_sleep_ms=0}

# -trimpath: compiled packages do not depend on where the checkout is, so a
# fresh clone or another worktree of the same code finds them in the build
# cache (without it the directory is part of every package's cache key, and
# each clone compiled the whole module again, also for the hookgate binary
# that cmd/server's tests build with go build, which inherits GOFLAGS).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
# Without the race detector (make test-fast) no test needs cgo: without it
# the test binaries link in about 15% less CPU (24 s instead of 28 s for
# all of them with a warm cache, docs/tests.md).
if [[ ${TEST_RACE--race} != *-race* ]]; then
	export CGO_ENABLED=${CGO_ENABLED:-0}
fi
# Test binaries are linked into a directory of this run (go test -o) that
# starts as hard links to the ones the last run on this machine left in
# HOOKGATE_TEST_CACHE: go test leaves a binary that is up to date alone, so
# a run links only the test binaries whose code changed (linking all 22
# takes about 24 s of CPU, a third of make test-fast's). The run's binaries
# then replace the cache's. Each run links into a directory of its own, so
# runs of different code at the same time (two clones) never run each
# other's binaries. HOOKGATE_TEST_CACHE defaults to hookgate-test beside Go's
# build cache (~/.cache/hookgate-test), whose fate it shares; '' turns it
# off. cmd/server's tests keep the gateway binary they build there too.
if [[ -z ${HOOKGATE_TEST_CACHE+set} ]]; then
	gocache=$(go env GOCACHE)
	HOOKGATE_TEST_CACHE=
	if [[ $gocache == /* ]]; then
		HOOKGATE_TEST_CACHE=$(dirname "$gocache")/hookgate-test
	fi
fi
export HOOKGATE_TEST_CACHE
bin_cache=${HOOKGATE_TEST_CACHE:+$HOOKGATE_TEST_CACHE/test-binaries}
bin_flags=()
run_bins=
if [[ -n $bin_cache ]] && mkdir -p "$bin_cache"; then
	# Directories unused for a week, and those of runs that died, go.
	find "$bin_cache" -mindepth 1 -maxdepth 1 -type d \( -mtime +7 -o -name 'run.*' -mmin +1440 \) -exec rm -rf {} + || true
	key=$(printf '%s\n' "${TEST_RACE--race}" "${CGO_ENABLED:-}" "$GOFLAGS" "$(go env GOVERSION GOOS GOARCH)" | sha256sum | cut -c1-12)
	shared=$bin_cache/$key
	if mkdir -p "$shared" && run_bins=$(mktemp -d "$bin_cache/run.XXXXXX"); then
		# (exit $rc) here, under errexit, ended the trap before the
		# cleanup whenever go test failed: the server was left running.
		trap 'rc=$?; rm -rf -- "$run_bins"; tmp_pg_cleanup "$rc"' EXIT
		cp -al "$shared/." "$run_bins/" 2>/dev/null || true
		# -s -w: without debugging information, as go test links when it
		# keeps no binary.
		bin_flags=(-o "$run_bins/" -ldflags=-s\ -w)
	fi
fi
# internal/testing/doccheck's TestReadmeService builds the README's service as a
# module of its own with GOPROXY=off: its go mod tidy reads the go.mod files
# of the whole module graph (older versions included), which a build of
# this module never needs, so a fresh module cache lacks them. Loading the
# graph once here fetches them (go.mod files only, no source).
go list -m all >/dev/null ||
	echo "test: could not load the module graph (go list -m all); TestReadmeService may fail on a fresh module cache" >&2
# TEST_RACE: the race detector flag, on unless set to '' (make test-fast).
set +e
# GOTESTFLAGS is split as the shell splits words, quotes included, so that
# GOTESTFLAGS='-run "TestA|TestB"' runs both tests.
test_flags=()
if [[ -n ${GOTESTFLAGS:-} ]]; then
	mapfile -t test_flags < <(xargs printf '%s\n' <<<"$GOTESTFLAGS")
fi
# shellcheck disable=SC2086 # PKGS and TEST_RACE are word lists
go test ${TEST_RACE--race} -count=1 -timeout 15m "${bin_flags[@]}" "${test_flags[@]}" ${PKGS:-./...}
rc=$?
set -e
# Not after go test was killed: it may have been writing a binary.
if [[ -n $run_bins && $rc -lt 128 ]]; then
	for f in "$run_bins"/*.test; do
		# A binary go test left alone is the cache's own (a hard link).
		if [[ -e $f && ! $f -ef $shared/${f##*/} ]]; then
			mv -f "$f" "$shared/" || true
		fi
	done
	touch "$shared"
fi
exit "$rc"
