#!/usr/bin/env bash
# check-providers.sh is `make check-providers`: the providers' own Node
# libraries (installed from npm, pinned below) sign deliveries that a real
# hookgate, on a throwaway PostgreSQL, must accept, replay, refuse when
# tampered with, and whose handshakes it must answer (.ci/check-providers.mjs).
# It needs node and npm (Debian packages nodejs and npm) and the npm
# registry; it is not part of .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in node npm; do
	command -v "$tool" >/dev/null || { echo "check-providers: needs $tool (Debian package nodejs / npm)" >&2; exit 1; }
done
source .ci/tmp-pg.sh
tmp_pg_start

work=$TMP_PG_ROOT/npm
mkdir -p "$work"
cp .ci/check-providers.mjs "$work/"
(
	cd "$work"
	npm init -y >/dev/null
	npm install --no-audit --no-fund --silent \
		twilio@6.3.1 square@46.0.0 @hubspot/api-client@13.5.0 discord-interactions@4.4.0 \
		@line/bot-sdk@11.0.0 razorpay@2.9.8 @mux/mux-node@15.3.0 @sendgrid/eventwebhook@8.0.0 \
		@octokit/webhooks-methods@6.0.0
)
go build -o "$TMP_PG_ROOT/hookgate" ./cmd/server

port=$(.ci/pg.sh freeport)
export DATABASE_URL=$TMP_PG_URL HOOKGATE_ADDR=127.0.0.1:$port HOOKGATE_URL=http://127.0.0.1:$port
export HOOKGATE_CONFIG=$TMP_PG_ROOT/hookgate.yaml
# (hookgate refuses secrets of fewer than 16 bytes.)
export TW=twilio-token-0123456789 SQ=square-key-0123456789 HS=hubspot-secret-1 ZM=zoom-secret-0123456789 TT=twitch-secret-12345 \
	MG=mailgun-key-0123456789 AT=YWlydGFibGUtbWFjLXNlY3JldA== MT=meta-secret-0123456789 MV=meta-verify-0123456789 LN=line-secret-0123456789 \
	RP=razorpay-secret-0123 PD=pdl_ntfset_secret MX=mux-secret-0123456789 GH=gh-secret-0123456789
eval "$(cd "$work" && node check-providers.mjs keys)"
export DC SG
{
	echo "senders:"
	for s in twilio square hubspot discord zoom twitch mailgun airtable line razorpay paddle mux sendgrid github; do
		printf '  - { name: %s, preset: %s, secret: "${%s}" }\n' "$s" "$s" \
			"$(case $s in twilio) echo TW;; square) echo SQ;; hubspot) echo HS;; discord) echo DC;; zoom) echo ZM;;
				twitch) echo TT;; mailgun) echo MG;; airtable) echo AT;; line) echo LN;; razorpay) echo RP;;
				paddle) echo PD;; mux) echo MX;; sendgrid) echo SG;; github) echo GH;; esac)"
	done
	echo '  - { name: twilio-pub, preset: twilio, secret: "${TW}", public_url: "https://hooks.example.com/webhooks/twilio" }'
	echo '  - { name: meta, preset: meta, secret: "${MT}", verify_token: "${MV}" }'
} >"$HOOKGATE_CONFIG"

"$TMP_PG_ROOT/hookgate" serve >"$TMP_PG_ROOT/hookgate.log" 2>&1 &
pid=$!
trap 'rc=$?; kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; tmp_pg_cleanup "$rc"' EXIT
for _ in $(seq 1 150); do
	curl -sf "$HOOKGATE_URL/readyz" >/dev/null && break
	kill -0 "$pid" 2>/dev/null || { cat "$TMP_PG_ROOT/hookgate.log" >&2; exit 1; }
	sleep 0.2
done
(cd "$work" && node check-providers.mjs)
