#!/usr/bin/env bash
# pg.sh manages a local PostgreSQL cluster built from the machine's server
# binaries, for `make run`, `make test` and `make bench`.
#
#   pg.sh start DIR PORT      initdb DIR if needed, start the server on
#                             127.0.0.1:PORT, create database "hookgate".
#                             PG_FAST=1: no fsync (throwaway test clusters only).
#   pg.sh stop DIR            stop the server of DIR if it runs (fast shutdown).
#   pg.sh destroy DIR         stop, then delete DIR and, if DIR is a symlink made
#                             by start, the directory it points to.
#   pg.sh url PORT [DBNAME]   print the connection URL (default database hookgate).
#   pg.sh freeport            print a free TCP port on 127.0.0.1 in 20000-60000.
#   pg.sh bindir              print the directory of the server binaries.
#
# PostgreSQL refuses to run as root: as root the server binaries run as the
# user "postgres"; as any other user they run as that user.
set -euo pipefail

PG_SEARCH_ROOT=${PG_SEARCH_ROOT:-/usr/lib/postgresql}
PG_RELOCATE_ROOT=${PG_RELOCATE_ROOT:-/var/lib/hookgate}
PG_USER=hookgate

die() { echo "pg.sh: $*" >&2; exit 1; }

is_root() { [[ $(id -u) == 0 ]]; }

# find_bindir prints the highest $PG_SEARCH_ROOT/*/bin holding pg_ctl, else the
# directory of pg_ctl on PATH; it returns 1 when there is neither.
find_bindir() {
	local d best=
	for d in $(ls -d "$PG_SEARCH_ROOT"/*/bin 2>/dev/null | sort -V); do
		[[ -x $d/pg_ctl && -x $d/initdb && -x $d/postgres ]] && best=$d
	done
	if [[ -z $best ]] && command -v pg_ctl >/dev/null 2>&1; then
		best=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
	fi
	[[ -n $best ]] || return 1
	printf '%s\n' "$best"
}

# bindir prints the binaries' directory, installing PostgreSQL first when
# running as root and none is found.
bindir() {
	local b
	if b=$(find_bindir); then printf '%s\n' "$b"; return; fi
	if ! is_root; then
		die "no PostgreSQL server binaries found (looked in $PG_SEARCH_ROOT/*/bin and PATH): install the Debian/Ubuntu package 'postgresql', e.g. sudo apt-get install postgresql"
	fi
	echo "pg.sh: no PostgreSQL server binaries found; installing the package 'postgresql'" >&2
	{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; } >&2 ||
		die "could not install the package 'postgresql'"
	b=$(find_bindir) || die "package 'postgresql' installed but no pg_ctl found"
	printf '%s\n' "$b"
}

# as_server runs a command as the user the server runs as: "postgres" when we
# are root, ourselves otherwise. It runs from / so that a working directory
# the postgres user cannot read does not matter.
as_server() {
	if is_root; then
		if command -v runuser >/dev/null 2>&1; then
			(cd / && runuser -u postgres -- "$@")
		else
			(cd / && su postgres -s /bin/sh -c "$(printf '%q ' "$@")")
		fi
	else
		(cd / && "$@")
	fi
}

# prepare_dir DIR creates DIR for the server user and prints the real data
# directory (DIR itself, or where DIR's symlink points).
prepare_dir() {
	local dir=$1 parent abs real hash
	mkdir -p "$(dirname "$dir")"
	parent=$(cd "$(dirname "$dir")" && pwd -P)
	abs=$parent/$(basename "$dir")
	if [[ -L $abs ]]; then
		real=$(readlink -f "$abs")
		mkdir -p "$real"
		is_root && chown postgres:postgres "$real" && chmod 700 "$real"
		printf '%s\n' "$real"
		return
	fi
	if ! is_root; then
		mkdir -p "$abs"
		chmod 700 "$abs"
		printf '%s\n' "$abs"
		return
	fi
	id postgres >/dev/null 2>&1 || die "running as root but there is no user 'postgres' to run the server as"
	if as_server test -x "$parent"; then
		mkdir -p "$abs"
		chown postgres:postgres "$abs"
		chmod 700 "$abs"
		printf '%s\n' "$abs"
		return
	fi
	# The postgres user cannot reach $parent (e.g. the repository is under
	# /root): keep the data where it can, and link to it from DIR.
	if [[ -e $abs ]]; then
		rmdir "$abs" 2>/dev/null ||
			die "$abs exists, is not empty, and the user postgres cannot reach it; remove it and retry"
	fi
	hash=$(printf '%s' "$abs" | sha256sum | cut -c1-16)
	real=$PG_RELOCATE_ROOT/$hash
	mkdir -p "$PG_RELOCATE_ROOT"
	chmod 755 "$PG_RELOCATE_ROOT"
	mkdir -p "$real"
	chown postgres:postgres "$real"
	chmod 700 "$real"
	ln -s "$real" "$abs"
	# Where it is linked from, for tmp-pg.sh's cleanup: a test that links
	# a server's data from a directory it deletes leaves no link to follow.
	printf '%s\n' "$abs" >"$real.origin"
	echo "pg.sh: the user postgres cannot reach $parent; keeping the data in $real ($abs links to it)" >&2
	printf '%s\n' "$real"
}

# realdir DIR prints the absolute real data directory of DIR, creating nothing.
realdir() {
	local d=$1
	[[ -e $d || -L $d ]] || { printf '%s\n' "$d"; return; }
	readlink -f "$d"
}

# running BIN DATA returns 0 when the server of DATA runs.
running() {
	[[ -f $2/PG_VERSION ]] || return 1
	as_server "$1/pg_ctl" status -D "$2" >/dev/null 2>&1
}

log_tail() {
	local log=$1/log
	if [[ -f $log ]]; then
		echo "--- last lines of $log ---" >&2
		tail -n 30 "$log" >&2
	fi
}

# socket_dir DATA PORT prints a directory for the server's Unix socket: DATA
# itself when the socket path stays short, else a fresh directory under /tmp
# (recorded in DATA/socket_dir so that stop can remove it).
socket_dir() {
	local data=$1 port=$2 s
	if (( ${#data} + ${#port} + 16 < 100 )); then
		printf '%s\n' "$data"
		return
	fi
	s=$(mktemp -d /tmp/hgpg.XXXXXX)
	is_root && chown postgres:postgres "$s"
	printf '%s\n' "$s" >"$data/socket_dir"
	printf '%s\n' "$s"
}

cmd_start() {
	[[ $# == 2 ]] || die "usage: pg.sh start DIR PORT"
	local dir=$1 port=$2 bin data sock opts initopts=() running_port
	[[ $port =~ ^[0-9]+$ ]] || die "port must be a number, got '$port'"
	bin=$(bindir)
	data=$(prepare_dir "$dir")

	if [[ ! -f $data/PG_VERSION ]]; then
		initopts=(-D "$data" -U "$PG_USER" --auth=trust -E UTF8 --locale=C)
		[[ ${PG_FAST:-} == 1 ]] && initopts+=(--no-sync)
		local out
		if ! out=$(as_server "$bin/initdb" "${initopts[@]}" 2>&1); then
			printf '%s\n' "$out" >&2
			die "initdb $data failed"
		fi
	fi

	if running "$bin" "$data"; then
		running_port=$(sed -n 4p "$data/postmaster.pid" 2>/dev/null || true)
		if [[ -n $running_port && $running_port != "$port" ]]; then
			die "the server of $dir already runs on port $running_port, not $port; stop it first: .ci/pg.sh stop $dir"
		fi
	else
		sock=$(socket_dir "$data" "$port")
		opts="-p $port -c listen_addresses=127.0.0.1 -k '$sock' -c max_connections=200"
		if [[ ${PG_FAST:-} == 1 ]]; then
			opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
		fi
		# PG_STATEMENTS=1 loads pg_stat_statements (make bench's -pgstat).
		if [[ ${PG_STATEMENTS:-} == 1 ]]; then
			opts+=" -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
		fi
		if ! as_server "$bin/pg_ctl" -D "$data" -w -t 60 -l "$data/log" -o "$opts" start >/dev/null 2>&1; then
			log_tail "$data"
			die "could not start PostgreSQL in $dir on port $port"
		fi
	fi

	local psql=("$bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$PG_USER" -d postgres)
	local exists
	if ! exists=$(PGCONNECT_TIMEOUT=10 "${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = 'hookgate'" 2>&1); then
		printf '%s\n' "$exists" >&2
		log_tail "$data"
		die "could not connect to PostgreSQL on 127.0.0.1:$port"
	fi
	if [[ $exists != 1 ]]; then
		local out
		if ! out=$(PGCONNECT_TIMEOUT=10 "${psql[@]}" -c 'CREATE DATABASE hookgate' 2>&1) &&
			[[ $out != *"already exists"* ]]; then
			printf '%s\n' "$out" >&2
			die "could not create database hookgate"
		fi
	fi
}

cmd_stop() {
	[[ $# == 1 ]] || die "usage: pg.sh stop DIR"
	local data bin sock
	data=$(realdir "$1")
	[[ -f $data/PG_VERSION ]] || return 0
	bin=$(find_bindir) || return 0
	if running "$bin" "$data"; then
		as_server "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 || {
			running "$bin" "$data" && { log_tail "$data"; die "could not stop PostgreSQL in $1"; }
		}
	fi
	if [[ -f $data/socket_dir ]]; then
		sock=$(cat "$data/socket_dir")
		[[ $sock == /tmp/hgpg.* ]] && rm -rf -- "$sock"
		rm -f -- "$data/socket_dir"
	fi
	return 0
}

cmd_destroy() {
	[[ $# == 1 ]] || die "usage: pg.sh destroy DIR"
	cmd_stop "$1"
	if [[ -L $1 ]]; then
		local real
		real=$(readlink -f "$1")
		[[ $real == "$PG_RELOCATE_ROOT"/* ]] && rm -rf -- "$real" "$real.origin"
		rm -f -- "$1"
	else
		rm -rf -- "$1"
	fi
}

cmd_url() {
	[[ $# == 1 || $# == 2 ]] || die "usage: pg.sh url PORT [DBNAME]"
	printf 'postgres://%s@127.0.0.1:%s/%s?sslmode=disable\n' "$PG_USER" "$1" "${2:-hookgate}"
}

cmd_freeport() {
	local i port
	for ((i = 0; i < 200; i++)); do
		port=$((20000 + (RANDOM * 32768 + RANDOM) % 40001))
		# A refused connection means nobody listens there.
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			printf '%s\n' "$port"
			return
		fi
	done
	die "no free port found on 127.0.0.1"
}

sub=${1:-}
[[ $# -gt 0 ]] && shift
case $sub in
start) cmd_start "$@" ;;
stop) cmd_stop "$@" ;;
destroy) cmd_destroy "$@" ;;
url) cmd_url "$@" ;;
freeport) cmd_freeport "$@" ;;
bindir) [[ $# == 0 ]] || die "usage: pg.sh bindir"; bindir ;;
*) die "usage: pg.sh start DIR PORT | stop DIR | destroy DIR | url PORT [DBNAME] | freeport | bindir" ;;
esac
