#!/usr/bin/env bash
# scripts/run.sh — what `make run` does: start webhookd locally in one process.
#
# 1. If no PostgreSQL answers at the host/port of WEBHOOKD_DATABASE_URL, start a
#    throwaway one (Debian's postgresql package, trust auth, port 55432 or the next
#    free one, data in a temp dir) and point WEBHOOKD_DATABASE_URL at it.
# 2. The same for Redis and a redis:// WEBHOOKD_REDIS_URL (port 56379 or the next
#    free one, nothing kept on disk).
#    Missing packages (postgresql, postgresql-client for psql, redis-server) are
#    installed with apt-get, as root or through sudo; where that is not possible
#    the exact command is printed (scripts/servers.sh).
# 3. Create the database named in the URL if it is missing, build bin/webhookd,
#    run `webhookd migrate`, create a dev API key (project "dev") and print it,
#    the dashboard's URL and admin token (WEBHOOKD_ADMIN_TOKEN, or one made up
#    for this run), and a curl example whose endpoint is the inspector's bin on
#    the dashboard listener, so the first delivery can be seen, signature
#    checked, without writing a receiver (and the same with bin/webhookd send).
# 4. Run `webhookd all` (API + worker + dashboard) with private networks allowed,
#    so receivers on 127.0.0.1 work. It listens on loopback only (127.0.0.1:8080
#    and 127.0.0.1:8081): with private networks allowed, an API open to the
#    network would let anyone holding the printed key make this machine post to
#    its local network, and the dashboard's login would face the whole network.
#    WEBHOOKD_API_ADDR and WEBHOOKD_DASHBOARD_ADDR (e.g. :8080) open it wider.
# Throwaway servers it started (and only those) are stopped when it exits.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi

: "${WEBHOOKD_DATABASE_URL:=postgres://postgres@127.0.0.1:5432/webhookd?sslmode=disable}"
: "${WEBHOOKD_REDIS_URL:=redis://127.0.0.1:6379/0}"
: "${WEBHOOKD_API_ADDR:=127.0.0.1:8080}"
: "${WEBHOOKD_DASHBOARD_ADDR:=127.0.0.1:8081}"
: "${WEBHOOKD_ALLOW_PRIVATE_NETWORKS:=true}"
export WEBHOOKD_DATABASE_URL WEBHOOKD_REDIS_URL WEBHOOKD_API_ADDR \
	WEBHOOKD_DASHBOARD_ADDR WEBHOOKD_ALLOW_PRIVATE_NETWORKS

script_name=run
# shellcheck source=scripts/servers.sh
source scripts/servers.sh

ensure_postgres "$WEBHOOKD_DATABASE_URL" webhookd
WEBHOOKD_DATABASE_URL=$pg_url started_pg=$pg_started
ensure_redis "$WEBHOOKD_REDIS_URL"
WEBHOOKD_REDIS_URL=$redis_url started_redis=$redis_started

# -------------------------------------------------------------------- webhookd --

log "building bin/webhookd"
go build -o bin/webhookd ./cmd/webhookd
log "applying migrations"
bin/webhookd migrate
api_key=$(bin/webhookd keys create --project dev)
api_key=${api_key//[$'\r\n\t ']/}
[[ -n $api_key ]] || die "webhookd keys create printed no key"

local_url() { # local_url ADDR: a URL a browser or curl on this machine can use
	local host=${1%:*} port=${1##*:}
	case $host in
	"" | 0.0.0.0 | "[::]" | "::") host=127.0.0.1 ;;
	esac
	echo "http://$host:$port"
}
api_url=$(local_url "$WEBHOOKD_API_ADDR")
dash_url=$(local_url "$WEBHOOKD_DASHBOARD_ADDR")
is_loopback() { # is_loopback ADDR: whether a listen address is on loopback only
	case ${1%:*} in
	127.* | localhost | "[::1]") return 0 ;;
	*) return 1 ;;
	esac
}
if is_loopback "$WEBHOOKD_API_ADDR" && is_loopback "$WEBHOOKD_DASHBOARD_ADDR"; then
	listening="loopback only: other machines cannot reach it (to listen on every
               interface: WEBHOOKD_API_ADDR=:8080 WEBHOOKD_DASHBOARD_ADDR=:8081 make run)"
else
	listening="NOT loopback only (WEBHOOKD_API_ADDR=$WEBHOOKD_API_ADDR, WEBHOOKD_DASHBOARD_ADDR=$WEBHOOKD_DASHBOARD_ADDR):
               other machines can reach the API and the dashboard's login, and
               with private networks allowed, the API can post to your network"
fi
if [[ -z ${WEBHOOKD_ADMIN_TOKEN:-} ]]; then
	WEBHOOKD_ADMIN_TOKEN=wha_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
fi
export WEBHOOKD_ADMIN_TOKEN
# A one-time link into the integrators' portal for project "dev" (24 h).
portal_link=$(WEBHOOKD_PORTAL_BASE_URL=${WEBHOOKD_PORTAL_BASE_URL:-$dash_url} bin/webhookd portal-link --project dev --ttl 24h)
portal_link=${portal_link//[$'\r\n\t ']/}
# The inspector's own bin (made by the migrations): what is posted to it shows
# on the dashboard with its headers, body and signature check.
bin_id=bin_inspector
uuid() {
	if [[ -r /proc/sys/kernel/random/uuid ]]; then
		cat /proc/sys/kernel/random/uuid
	elif command -v uuidgen >/dev/null 2>&1; then
		uuidgen | tr '[:upper:]' '[:lower:]'
	else
		printf '%08x-%04x-4%03x-a%03x-%012x\n' "$RANDOM$RANDOM" "$RANDOM" "$((RANDOM % 4096))" \
			"$((RANDOM % 4096))" "$RANDOM$RANDOM$RANDOM"
	fi
}
endpoint_idem_key=$(uuid)
event_idem_key=$(uuid)
throwaway_note=""
if $started_pg || $started_redis; then
	throwaway_note="  (throwaway servers are deleted when this stops)"
fi

cat <<EOF

==============================================================================
 webhookd (make run)
   API:        $api_url
   Listening:  $listening
   Dashboard:  $dash_url/
   Admin token: $WEBHOOKD_ADMIN_TOKEN
               (log in to the dashboard with it)
   Portal:     $portal_link
               (project "dev" as its integrators see it; the link opens once)
   Inspector:  $dash_url/inspector/bins/$bin_id
               (the endpoint below delivers here)
   Health:     $dash_url/healthz, /readyz, /metrics
   PostgreSQL: $(redact "$WEBHOOKD_DATABASE_URL")$($started_pg && echo '  [throwaway]')
   Redis:      $(redact "$WEBHOOKD_REDIS_URL")$($started_redis && echo '  [throwaway]')$throwaway_note
   API key:    $api_key
               (a new key for project "dev"; every make run adds one)

 Try it from another terminal. The endpoint is the inspector's bin, served by
 webhookd itself: open the Inspector link above (log in with the admin token)
 to see the signed delivery arrive, every header and the body, and
 "signature valid". To use your own receiver instead, give its URL.

   export API_KEY='$api_key'

   curl -sS -X POST $api_url/v1/endpoints \\
     -H "Authorization: Bearer \$API_KEY" -H 'Content-Type: application/json' \\
     -H 'Idempotency-Key: $endpoint_idem_key' \\
     -d '{"url":"$dash_url/in/$bin_id"}'

   curl -sS -i -X POST $api_url/v1/events \\
     -H "Authorization: Bearer \$API_KEY" -H 'Content-Type: application/json' \\
     -H 'Idempotency-Key: $event_idem_key' \\
     -d '{"type":"order.created","data":{"order_id":"ord_1","amount":4200}}'

   curl -sS $api_url/v1/deliveries -H "Authorization: Bearer \$API_KEY"

 Or send an event with webhookd itself (the Go client: a new Idempotency-Key
 per run, the same on each of its retries; prints the event id):

   WEBHOOKD_API_URL=$api_url WEBHOOKD_API_KEY=\$API_KEY \\
     bin/webhookd send --type order.created --data '{"order_id":"ord_2","amount":990}'

 The dashboard ($dash_url/) lists the delivery; on its page, Redeliver makes
 one more attempt and Send to inspector sends a signed copy to the inspector.

 Every POST needs an Idempotency-Key: repeating a command as it is replays
 the first answer (Idempotent-Replayed: true); use a new key for a new event.
==============================================================================

EOF

if ! $started_pg && ! $started_redis; then
	trap - EXIT INT TERM
	exec bin/webhookd all
fi

# Throwaway servers run: keep this shell as the parent so they are stopped after
# webhookd exits. Ctrl-C / SIGTERM are passed on to webhookd as SIGTERM.
bin/webhookd all &
child=$!
trap 'kill -TERM "$child" 2>/dev/null || true' INT TERM
status=0
while kill -0 "$child" 2>/dev/null; do
	# wait returns early (>128) when a trapped signal arrives; wait again.
	wait "$child" && status=0 || status=$?
done
exit "$status"
