#!/usr/bin/env bash
# bench-citus.sh compares first deliveries/s on a running Citus cluster with
# a throwaway plain PostgreSQL (fsync on, as make bench starts it) on the
# same machine, under the same load: the benchmark's first-delivery phase
# (cmd/bench phase 1, --role api, 32 concurrent requests of one sender,
# 512-byte bodies), ROUNDS times on each, alternating, and prints each run,
# the means and their ratio, with the machine's load average before and
# after (docs/distributed.md#figures).
#
# CITUS_URL is the coordinator's administrative database, with the citus
# extension and the workers added (docs/distributed.md). The Citus side gets
# a fresh database hgbench_<pid> on every node, set up as docs/distributed.md
# says (citus.propagate_set_commands = 'local', `hookgate migrate`,
# migrations/citus/distribute.sql with SHARDS shards per table), dropped at
# the end. Arguments are passed to every benchmark run.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z ${CITUS_URL:-} ]]; then
	echo "bench-citus: set CITUS_URL to the coordinator's URL, e.g. make bench-citus CITUS_URL=postgres://postgres@127.0.0.1:9700/postgres" >&2
	exit 2
fi
ROUNDS=${ROUNDS:-3}
export PGOPTIONS="-c client_min_messages=warning"
SHARDS=${SHARDS:-8}
source .ci/tmp-pg.sh
export HOOKGATE_BENCH_KEEP_DIR=${TMPDIR:-/tmp}
PG_FAST= tmp_pg_start
export HOOKGATE_PG_BINDIR=$PG_BINDIR
plain_url=$TMP_PG_URL

bin=$TMP_PG_ROOT/bin
mkdir -p "$bin"
go build -o "$bin/bench" ./cmd/bench
go build -o "$bin/hookgate" ./cmd/server

# with_db URL NAME: URL pointing at database NAME (same host, port, user).
with_db() { python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$1" "$2"; }
# with_node URL HOST PORT: URL pointing at HOST:PORT instead.
with_node() { python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); n = p.netloc.rsplit("@", 1); h = sys.argv[2] + ":" + sys.argv[3]; print(u.urlunsplit(p._replace(netloc=(n[0] + "@" + h) if len(n) == 2 else h)))' "$1" "$2" "$3"; }

db=hgbench_$$
coord_host=$(python3 -c 'import sys, urllib.parse as u; print(u.urlsplit(sys.argv[1]).hostname or "127.0.0.1")' "$CITUS_URL")
coord_port=$(python3 -c 'import sys, urllib.parse as u; print(u.urlsplit(sys.argv[1]).port or 5432)' "$CITUS_URL")
mapfile -t workers < <(psql "$CITUS_URL" -Atc "SELECT nodename || ' ' || nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary' AND isactive ORDER BY nodeid")
nodes=("$coord_host $coord_port" "${workers[@]}")
citus_url=$(with_db "$CITUS_URL" "$db")

drop_citus() {
	local n
	for n in "${nodes[@]}"; do
		psql "$(with_node "$CITUS_URL" ${n})" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	done
}
trap 'rc=$?; drop_citus || true; tmp_pg_cleanup "$rc"' EXIT

for n in "${nodes[@]}"; do
	psql "$(with_node "$CITUS_URL" ${n})" -qc "CREATE DATABASE $db"
	psql "$(with_db "$(with_node "$CITUS_URL" ${n})" "$db")" -qc "CREATE EXTENSION citus"
done
{
	echo "SELECT citus_set_coordinator_host('$coord_host', $coord_port);"
	for w in "${workers[@]}"; do
		read -r h p <<<"$w"
		echo "SELECT citus_add_node('$h', $p);"
	done
	echo "ALTER DATABASE $db SET citus.propagate_set_commands = 'local';"
} | psql "$citus_url" -q >/dev/null
DATABASE_URL=$citus_url "$bin/hookgate" migrate >/dev/null
{ echo "SET citus.shard_count = $SHARDS;"; cat migrations/citus/distribute.sql; } | psql "$citus_url" -q >/dev/null

# rate RUNLOG: the first deliveries/s the run printed.
rate() { sed -nE 's/^ *first delivery: gateway +([0-9]+) .*/\1/p' "$1" | head -1; }

# The gateway sends its ingest calls straight to the workers it is given
# (docs/distributed.md#which-workers-the-gateway-contacts): the cluster's.
worker_hosts=$(for w in "${workers[@]}"; do read -r h p <<<"$w"; echo "$h:$p"; done | paste -sd,)
flags=(-skip-forward -skip-replay -skip-pgbench -d 5s -server-arg=--role=api "-server-arg=--citus-worker-hosts=$worker_hosts")
out=$(mktemp -d "$HOOKGATE_BENCH_KEEP_DIR/bench-citus.XXXXXX")
echo "bench-citus: $(psql "$CITUS_URL" -Atc 'SELECT citus_version()' | cut -d' ' -f1,2), $ROUNDS rounds, $SHARDS shards, benchmark flags: ${flags[*]} $*"
echo "bench-citus: load before: $(uptime | sed 's/.*load average: //')"
declare -a plain citus
# Distributing the tables committed in two phases: recover those, so that
# the count after the runs is theirs.
psql "$citus_url" -Atc 'SELECT recover_prepared_transactions()' >/dev/null
# two_phase: the rows of pg_dist_transaction on every node (a worker records
# the two-phase commits of the transactions sent straight to it).
two_phase() {
	local n total=0 c
	for n in "${nodes[@]}"; do
		c=$(psql "$(with_db "$(with_node "$CITUS_URL" ${n})" "$db")" -Atc 'SELECT count(*) FROM pg_dist_transaction')
		total=$((total + c))
	done
	echo "$total"
}
echo "bench-citus: 2PC rows in pg_dist_transaction (all nodes) before the runs: $(two_phase)"
for i in $(seq "$ROUNDS"); do
	HOOKGATE_BENCH_DATABASE_URL=$plain_url "$bin/bench" "${flags[@]}" "$@" >"$out/plain$i" 2>&1 || true
	HOOKGATE_BENCH_DATABASE_URL=$citus_url "$bin/bench" "${flags[@]}" "$@" >"$out/citus$i" 2>&1 || true
	plain+=("$(rate "$out/plain$i")")
	citus+=("$(rate "$out/citus$i")")
	echo "round $i: PostgreSQL ${plain[-1]:-?}/s, Citus ${citus[-1]:-?}/s (load $(uptime | sed 's/.*load average: //'))"
	for side in plain citus; do
		# The phase's CPU use and batches (the bench counts the coordinator
		# alone as postgres; the workers are among the other processes).
		sed -nE '/^first delivery: gateway/,/batches:/{s/^ +server RSS[^;]*; (CPU cores: .*)/  '"$side"' \1/p; s/^ +((CPU per delivery|batches): .*)/  '"$side"' \1/p}' "$out/$side$i"
	done
	[[ -n ${plain[-1]} && -n ${citus[-1]} ]] || { echo "bench-citus: a run printed no rate; its output:" >&2; cat "$out/plain$i" "$out/citus$i" >&2; exit 1; }
done
echo "bench-citus: 2PC rows in pg_dist_transaction (all nodes) after the runs: $(two_phase)"
python3 - "${plain[@]}" -- "${citus[@]}" <<'EOF'
import sys
a = sys.argv[1:]
i = a.index("--")
p, c = [float(x) for x in a[:i]], [float(x) for x in a[i + 1:]]
mp, mc = sum(p) / len(p), sum(c) / len(c)
print(f"bench-citus: PostgreSQL mean {mp:.0f}/s, Citus mean {mc:.0f}/s: Citus/PostgreSQL = {mc / mp:.2f}")
EOF
echo "bench-citus: the last runs' output: $out"
