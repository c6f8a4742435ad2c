#!/usr/bin/env bash
# citus-crash.sh: a black-box check that a Citus coordinator crash loses no
# forward (docs/distributed.md#a-coordinator-crash-under-forwarding). A fresh
# database on the running cluster (set up as docs/distributed.md says), one
# gateway (--role all) forwarding every delivery of one sender to a sink
# that counts distinct Idempotency-Keys; N deliveries (default 600) sent by
# 4 concurrent senders; 1.5 s in, the coordinator's postmaster is killed
# (SIGKILL) and restarted; every delivery that got no 2xx is sent again, as
# a sender retries. It then waits for the sink to have every accepted
# delivery's forward, and prints the status codes seen, the sink's counts
# (distinct keys, requests: a repeated forward shows as more requests than
# keys), pg_dist_transaction's rows and the outbox rows left. It exits 1
# when a forward is missing.
#
# CITUS_URL is the coordinator's administrative database (as for make
# test-citus); CITUS_COORD_DATA its data directory (this script kills and
# restarts it with pg_ctl, as the postgres user when run as root).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${CITUS_URL:?set CITUS_URL, e.g. postgres://postgres@127.0.0.1:9700/postgres}"
: "${CITUS_COORD_DATA:?set CITUS_COORD_DATA to the data directory of the coordinator, e.g. /tmp/citus/n9700}"
N=${N:-600}
PG_BINDIR=$(.ci/pg.sh bindir)
as_pg() { if [[ $(id -u) == 0 ]]; then su postgres -c "$*"; else bash -c "$*"; fi; }
with_db() { python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$1" "$2"; }
with_node() { python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); n = p.netloc.rsplit("@", 1); h = sys.argv[2] + ":" + sys.argv[3]; print(u.urlunsplit(p._replace(netloc=(n[0] + "@" + h) if len(n) == 2 else h)))' "$1" "$2" "$3"; }
coord_host=$(python3 -c 'import sys, urllib.parse as u; print(u.urlsplit(sys.argv[1]).hostname or "127.0.0.1")' "$CITUS_URL")
coord_port=$(python3 -c 'import sys, urllib.parse as u; print(u.urlsplit(sys.argv[1]).port or 5432)' "$CITUS_URL")
mapfile -t workers < <(psql "$CITUS_URL" -Atc "SELECT nodename || ' ' || nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary' AND isactive ORDER BY nodeid")
nodes=("$coord_host $coord_port" "${workers[@]}")
db=hgcrash_$$
url=$(with_db "$CITUS_URL" "$db")
dir=$(mktemp -d "${TMPDIR:-/tmp}/citus-crash.XXXXXX")
pids=()
cleanup() {
	kill "${pids[@]}" 2>/dev/null
	for n in "${nodes[@]}"; do psql "$(with_node "$CITUS_URL" ${n})" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1; done
}
trap cleanup EXIT
for n in "${nodes[@]}"; do
	psql "$(with_node "$CITUS_URL" ${n})" -qc "CREATE DATABASE $db" 2>/dev/null
	psql "$(with_db "$(with_node "$CITUS_URL" ${n})" "$db")" -qc "CREATE EXTENSION citus"
done
{
	echo "SELECT citus_set_coordinator_host('$coord_host', $coord_port);"
	for w in "${workers[@]}"; do read -r h p <<<"$w"; echo "SELECT citus_add_node('$h', $p);"; done
	echo "ALTER DATABASE $db SET citus.propagate_set_commands = 'local';"
} | psql "$url" -q >/dev/null
go build -o "$dir/hookgate" ./cmd/server || exit 2
DATABASE_URL=$url "$dir/hookgate" migrate >/dev/null || exit 2
{ echo "SET citus.shard_count = 8;"; cat migrations/citus/distribute.sql; } | psql "$url" -q >/dev/null

cat >"$dir/sink.py" <<'PY'
import http.server, sys, threading
keys, lock = {}, threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get('Content-Length') or 0))
        with lock:
            k = self.headers.get('Idempotency-Key', '?'); keys[k] = keys.get(k, 0) + 1
        self.send_response(200); self.send_header('Content-Length', '0'); self.end_headers()
    def do_GET(self):
        with lock: b = ("%d %d\n" % (len(keys), sum(keys.values()))).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
print(s.server_address[1], flush=True); s.serve_forever()
PY
python3 "$dir/sink.py" >"$dir/sink.port" & pids+=($!)
for _ in $(seq 50); do [[ -s $dir/sink.port ]] && break; sleep 0.1; done
sink="http://127.0.0.1:$(head -1 "$dir/sink.port")"
cat >"$dir/hookgate.yaml" <<YAML
senders:
  - name: acme
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: sink
        url: $sink/in
YAML
# The ingest calls straight to the cluster's workers (docs/distributed.md#which-workers-the-gateway-contacts).
worker_hosts=$(for w in "${workers[@]}"; do read -r h p <<<"$w"; echo "$h:$p"; done | paste -sd,)
DATABASE_URL=$url HOOKGATE_ADMIN_TOKEN=$(openssl rand -hex 32) HOOKGATE_CITUS_WORKER_HOSTS=$worker_hosts "$dir/hookgate" serve --config "$dir/hookgate.yaml" --addr 127.0.0.1:0 >"$dir/gateway.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do addr=$(sed -nE 's/.*"msg":"listening","addr":"([^"]+)".*/\1/p' "$dir/gateway.log" 2>/dev/null | head -1); [[ -n $addr ]] && break; sleep 0.1; done
gw="http://${addr/\[::\]/127.0.0.1}"
send() { for i in "$@"; do echo "$i $(curl -s -o /dev/null -w '%{http_code}' -X POST -H "X-Delivery-Id: d$i" -H 'Content-Type: application/json' --data "{\"i\":$i}" "$gw/webhooks/acme")"; done >>"$dir/codes"; }
senders=()
for w in 0 1 2 3; do send $(seq $((w * N / 4 + 1)) $(((w + 1) * N / 4))) & senders+=($!); done
sleep 1.5
pm=$(head -1 "$CITUS_COORD_DATA/postmaster.pid")
echo "citus-crash: $(date +%T) kill -9 of the coordinator's postmaster ($pm), mid-burst"
kill -9 "$pm"
for _ in $(seq 100); do as_pg "$PG_BINDIR/pg_ctl -D $CITUS_COORD_DATA -l $CITUS_COORD_DATA.log start" >/dev/null 2>&1 && break; sleep 0.2; done
echo "citus-crash: $(date +%T) coordinator restarted"
wait "${senders[@]}"
for round in 1 2 3 4 5 6; do
	todo=$(comm -23 <(awk '$2 !~ /^2/ {print $1}' "$dir/codes" | sort -u) <(awk '$2 ~ /^2/ {print $1}' "$dir/codes" | sort -u))
	[[ -z $todo ]] && break
	sleep 2
	send $todo
done
accepted=$(awk '$2 ~ /^2/ {print $1}' "$dir/codes" | sort -u | wc -l)
echo "citus-crash: accepted $accepted of $N deliveries; statuses seen: $(awk '{print $2}' "$dir/codes" | sort | uniq -c | xargs)"
for t in $(seq 120); do read -r got reqs < <(curl -s "$sink/"); [[ $got -ge $accepted ]] && break; sleep 1; done
echo "citus-crash: the sink got $got distinct Idempotency-Keys in $reqs requests, ${t} s after the retries"
echo "citus-crash: pg_dist_transaction rows: $(psql "$url" -Atc 'SELECT count(*) FROM pg_dist_transaction'); outbox rows left: $(psql "$url" -Atc 'SELECT count(*) FROM forward_outbox')"
echo "citus-crash: gateway log: $dir/gateway.log"
[[ $accepted -eq $N && $got -ge $accepted ]]
