# tmp-pg.sh is sourced by test.sh and bench.sh. tmp_pg_start starts a
# throwaway PostgreSQL in a fresh directory under /tmp and sets
#   TMP_PG_ROOT  the directory (deleted on exit, with everything under it),
#                under HOOKGATE_TMP_PG_PARENT (default /tmp)
#   TMP_PG_PORT  the server's port on 127.0.0.1
#   TMP_PG_URL   the URL of its database "hookgate"
#   PG_BINDIR    the directory of the server binaries
# It also points TMPDIR into TMP_PG_ROOT, so that servers the tests start
# themselves (internal/testing/pgtest.StartCluster) are found and stopped on exit even
# when a test process dies. Set PG_FAST=1 beforehand for a server without
# fsync (tests only, never benchmarks).

CI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# tmp_pg_cleanup [RC] stops every server under TMP_PG_ROOT, deletes it and
# exits with RC (by default the status it was called with). A trap that
# does more first saves $? and passes it: rc=$?; ...; tmp_pg_cleanup "$rc".
# Nothing in it may stop it early: errexit is off from its first line.
tmp_pg_cleanup() {
	local rc=${1:-$?} pid
	set +e
	trap - EXIT
	if [[ -n ${TMP_PG_ROOT:-} && -d $TMP_PG_ROOT ]]; then
		while IFS= read -r pid; do
			"$CI_DIR/pg.sh" stop "$(dirname "$pid")" || true
		done < <(find "$TMP_PG_ROOT" -name postmaster.pid 2>/dev/null)
		# Servers whose data pg.sh kept outside (the user postgres could
		# not reach a test's directory under TMP_PG_ROOT): the test may
		# have deleted the link, so they are found by where they were
		# linked from.
		local origin
		for origin in "${PG_RELOCATE_ROOT:-/var/lib/hookgate}"/*.origin; do
			[[ -f $origin && $(<"$origin") == "$TMP_PG_ROOT"/* ]] || continue
			"$CI_DIR/pg.sh" stop "${origin%.origin}" || true
			rm -rf -- "${origin%.origin}" "$origin"
		done
		rm -rf -- "$TMP_PG_ROOT"
	fi
	exit "$rc"
}

tmp_pg_start() {
	local attempt
	PG_BINDIR=$("$CI_DIR/pg.sh" bindir)
	TMP_PG_ROOT=$(mktemp -d "${HOOKGATE_TMP_PG_PARENT:-/tmp}/hookgate-pg.XXXXXX")
	trap tmp_pg_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	chmod 755 "$TMP_PG_ROOT" # the postgres user must reach the data when we are root
	mkdir -m 755 "$TMP_PG_ROOT/tmp"
	export TMPDIR=$TMP_PG_ROOT/tmp
	# Another process may take the free port before the server binds it.
	for attempt in 1 2 3; do
		TMP_PG_PORT=$("$CI_DIR/pg.sh" freeport)
		if "$CI_DIR/pg.sh" start "$TMP_PG_ROOT/pg" "$TMP_PG_PORT"; then
			break
		fi
		[[ $attempt == 3 ]] && { echo "could not start a throwaway PostgreSQL" >&2; exit 1; }
	done
	TMP_PG_URL=$("$CI_DIR/pg.sh" url "$TMP_PG_PORT" hookgate)
}
