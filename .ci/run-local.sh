#!/usr/bin/env bash
# run-local.sh is `make run`: it builds the server and checks hookgate.yaml
# (an unset ${VAR} stops it there), starts (or reuses) the local PostgreSQL
# in .data/pg, prepares an admin token and runs the server in the foreground, with `hookgate sink` (the example's forward
# target) beside it; Ctrl-C stops both. The database keeps its data between
# runs; stop it with `make db-stop`, delete everything with `make clean-data`.
#
# Ports: PostgreSQL's is HOOKGATE_PG_PORT, else the one remembered in
# .data/pg-port, else 54329; when it is taken (by another checkout's
# `make run`, say), a free one is picked and remembered, and the script says
# who holds the usual one. While this checkout's server runs, it keeps its
# port: a HOOKGATE_PG_PORT naming another one is not used, and the script
# says so (make db-stop first to move it). The gateway's is HOOKGATE_ADDR, else 127.0.0.1 on
# port 8080 when it is free, else the last run's (.data/http-port) or a free
# one: the docs' commands use 8080, so it is never kept off 8080 once 8080 is
# free. It listens on 127.0.0.1 only unless HOOKGATE_ADDR says otherwise
# (HOOKGATE_ADDR=:8080 for every interface): the example's secrets are public.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p .data

# The configuration first, before the database or any banner: a ${VAR} it
# names that is unset (or any other fault) is said, and nothing starts.
if [[ ! -f hookgate.yaml ]]; then
	[[ -f hookgate.example.yaml ]] || { echo "run-local.sh: hookgate.example.yaml is missing" >&2; exit 1; }
	cp hookgate.example.yaml hookgate.yaml
	echo "Created hookgate.yaml from hookgate.example.yaml."
fi
go build -o .data/hookgate ./cmd/server
if ! .data/hookgate config check --config hookgate.yaml >/dev/null; then
	echo "make run: hookgate.yaml cannot be loaded (see above): export the variables it names, or fix the file. Nothing was started." >&2
	exit 1
fi

# busy PORT: something accepts connections on 127.0.0.1:PORT.
busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# holder PORT describes what listens on PORT: a PostgreSQL's data directory
# when it is one.
holder() {
	local line dir
	line=$(ps -eo args= 2>/dev/null | grep -E "(^|/)postgres .*-p $1( |$)" | head -n 1 || true)
	if [[ $line =~ -D[[:space:]]+([^[:space:]]+) ]]; then
		dir=${BASH_REMATCH[1]}
		echo "the PostgreSQL with data directory $dir (stop it with: .ci/pg.sh stop $dir, or make db-stop in the checkout it belongs to)"
		return
	fi
	echo "another program"
}

# PostgreSQL. Our own server, if it runs, keeps its port.
pg_data=$(readlink -f .data/pg 2>/dev/null || echo .data/pg)
port=${HOOKGATE_PG_PORT:-}
[[ -z $port && -s .data/pg-port ]] && port=$(<.data/pg-port)
port=${port:-54329}
own_port=
if [[ -f $pg_data/postmaster.pid ]] && kill -0 "$(head -n 1 "$pg_data/postmaster.pid")" 2>/dev/null; then
	own_port=$(sed -n 4p "$pg_data/postmaster.pid")
fi
if [[ -n $own_port ]]; then
	if [[ -n ${HOOKGATE_PG_PORT:-} && $HOOKGATE_PG_PORT != "$own_port" ]]; then
		echo "HOOKGATE_PG_PORT=$HOOKGATE_PG_PORT is not used: this checkout's PostgreSQL (.data/pg) is running on port $own_port, and make run uses the running server."
		echo "To move it to port $HOOKGATE_PG_PORT, stop it first (make db-stop), then run HOOKGATE_PG_PORT=$HOOKGATE_PG_PORT make run again."
	fi
	port=$own_port
elif busy "$port"; then
	if [[ -n ${HOOKGATE_PG_PORT:-} ]]; then
		echo "run-local.sh: port $port (HOOKGATE_PG_PORT) is in use by $(holder "$port"); choose another port or stop it" >&2
		exit 1
	fi
	new=$(.ci/pg.sh freeport)
	echo "PostgreSQL port $port is in use by $(holder "$port")."
	echo "This checkout's database (.data/pg) uses port $new instead (remembered in .data/pg-port)."
	port=$new
fi
echo "$port" >.data/pg-port
.ci/pg.sh start .data/pg "$port"
url=$(.ci/pg.sh url "$port" hookgate)

# The gateway.
addr=${HOOKGATE_ADDR:-}
if [[ -z $addr ]]; then
	# 8080 whenever it is free, so that the docs' curl lines work as
	# printed; else the port of the last run, else any free one.
	http_port=8080
	if busy 8080; then
		http_port=
		[[ -s .data/http-port ]] && http_port=$(<.data/http-port)
		if [[ -z $http_port || $http_port == 8080 ]] || busy "$http_port"; then
			http_port=$(.ci/pg.sh freeport)
		fi
		echo "Port 8080 is in use by $(holder 8080); the gateway listens on $http_port instead:"
		echo "replace localhost:8080 with localhost:$http_port in the docs' commands. make run goes back to 8080 once it is free."
	fi
	addr=127.0.0.1:$http_port
fi
# The gateway's address and the database's URL, for scripts and for
# make redeliver.
echo "${addr##*:}" >.data/http-port
(umask 077 && echo "$url" >.data/database-url)

if [[ ! -s .data/admin-token ]]; then
	(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >.data/admin-token)
fi
token=$(<.data/admin-token)

# The sink: the forward target of hookgate.example.yaml's orders sender.
sink_addr=${HOOKGATE_SINK_ADDR:-127.0.0.1:9099}
sink_pid=
start_sink=1
if busy "${sink_addr##*:}"; then
	start_sink=
	echo "Port ${sink_addr##*:} is in use by $(holder "${sink_addr##*:}") (another checkout's hookgate sink?): not starting a sink;"
	echo "this gateway's forwards to http://$sink_addr go there. Stop it, or set HOOKGATE_SINK_ADDR and the forward url in hookgate.yaml."
fi

host=localhost${addr#"${addr%:*}"} # "127.0.0.1:8080", ":8080" and "0.0.0.0:8080" -> localhost:8080
listen="on $addr"
case $addr in
127.0.0.1:* | localhost:* | "[::1]:"*) listen="on $addr only (HOOKGATE_ADDR=:${addr##*:} make run listens on every interface)" ;;
esac
if [[ -z $start_sink ]]; then
	sink_line="Try it (this run started no sink, see above: the orders sender's forwards go to what holds port ${sink_addr##*:}, and are not printed here):"
elif grep -qF "//$sink_addr/" hookgate.yaml; then
	sink_line="Try it (the orders sender forwards to hookgate sink on $sink_addr, which prints each forward below):"
else
	sink_line="Try it (hookgate sink listens on $sink_addr and prints each forward below, but no url in hookgate.yaml names $sink_addr: point the sink target's url there):"
fi
cat <<MSG

The gateway listens $listen.
Admin token (Authorization: Bearer ...): $token
Console:  http://$host/console/  (sign in with the admin token)
$sink_line
  curl -i -X POST $host/webhooks/orders -H 'X-Delivery-Id: d1' -H 'Content-Type: application/json' -d '{"order":42}'
  curl -H "Authorization: Bearer $token" $host/v1/senders/orders/deliveries/d1
  TOKEN=\$(cat .data/admin-token)   # the token, as the docs' commands use it
The operator API from the command line (hookgate api --help lists what it does):
  HOOKGATE_URL=http://$host HOOKGATE_TOKEN=\$(cat .data/admin-token) .data/hookgate api deliveries --sender orders
Bulk redelivery from the command line (hookgate redeliver, with this database):
  make redeliver ARGS='--sender orders --target sink --state failed --since 2h'
API docs: http://$host/docs
Stop with Ctrl-C (the database keeps running: make db-stop).

MSG

gw_pid=
stop() {
	[[ -n $gw_pid ]] && kill -TERM "$gw_pid" 2>/dev/null || true
	[[ -n $sink_pid ]] && kill -TERM "$sink_pid" 2>/dev/null || true
}
trap stop INT TERM
trap 'stop; wait' EXIT

if [[ -n $start_sink ]]; then
	env HOOKGATE_CONFIG=hookgate.yaml DATABASE_URL="$url" .data/hookgate sink --addr "$sink_addr" &
	sink_pid=$!
fi

# HOOKGATE_ALLOW_EXAMPLE_SECRETS: hookgate.yaml starts as a copy of the
# example, whose secrets are public; hookgate refuses them elsewhere.
env HOOKGATE_LOG_FORMAT="${HOOKGATE_LOG_FORMAT:-text}" HOOKGATE_ALLOW_EXAMPLE_SECRETS=1 DATABASE_URL="$url" HOOKGATE_ADMIN_TOKEN="$token" HOOKGATE_CONFIG=hookgate.yaml HOOKGATE_ADDR="$addr" .data/hookgate &
gw_pid=$!
status=0
while kill -0 "$gw_pid" 2>/dev/null; do
	wait "$gw_pid" || status=$?
done
exit "$status"
