#!/usr/bin/env bash
# run-local.sh is `make run`: it starts (or reuses) the local PostgreSQL in
# .data/pg, prepares hookgate.yaml and an admin token, builds the server and
# runs it in the foreground. The database keeps its data between runs; stop it
# with `make db-stop`, delete everything with `make clean-data`.
set -euo pipefail
cd "$(dirname "$0")/.."

port=${HOOKGATE_PG_PORT:-54329}
addr=${HOOKGATE_ADDR:-:8080}

mkdir -p .data
.ci/pg.sh start .data/pg "$port"
url=$(.ci/pg.sh url "$port" hookgate)

if [[ ! -f hookgate.yaml ]]; then
	[[ -f hookgate.example.yaml ]] || { echo "run-local.sh: hookgate.example.yaml is missing" >&2; exit 1; }
	cp hookgate.example.yaml hookgate.yaml
	echo "Created hookgate.yaml from hookgate.example.yaml."
fi

if [[ ! -s .data/admin-token ]]; then
	(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >.data/admin-token)
fi
token=$(<.data/admin-token)

go build -o .data/hookgate ./cmd/server

host=localhost${addr#"${addr%:*}"} # ":8080" and "0.0.0.0:8080" -> localhost:8080
cat <<MSG

Admin token (Authorization: Bearer ...): $token
Try it:
  curl -i -X POST $host/webhooks/orders -H 'X-Delivery-Id: d1' -H 'Content-Type: application/json' -d '{"order":42}'
API docs: http://$host/docs

MSG

# HOOKGATE_ALLOW_EXAMPLE_SECRETS: hookgate.yaml starts as a copy of the
# example, whose github secret is public; hookgate refuses it elsewhere.
exec env HOOKGATE_LOG_FORMAT="${HOOKGATE_LOG_FORMAT:-text}" HOOKGATE_ALLOW_EXAMPLE_SECRETS=1 DATABASE_URL="$url" HOOKGATE_ADMIN_TOKEN="$token" HOOKGATE_CONFIG=hookgate.yaml HOOKGATE_ADDR="$addr" .data/hookgate
