#!/usr/bin/env bash
# scripts/run.sh — what `make run` does: start webhookd locally in one process.
#
# 1. If no PostgreSQL answers at the host/port of WEBHOOKD_DATABASE_URL, start a
#    throwaway one (Debian's postgresql package, trust auth, port 55432 or the next
#    free one, data in a temp dir) and point WEBHOOKD_DATABASE_URL at it.
# 2. The same for Redis and WEBHOOKD_REDIS_URL (port 56379 or the next free one,
#    nothing kept on disk).
# 3. Create the database named in the URL if it is missing, build bin/webhookd,
#    run `webhookd migrate`, create a dev API key (project "dev") and print it,
#    the dashboard's URL and admin token (WEBHOOKD_ADMIN_TOKEN, or one made up
#    for this run), and a curl example whose endpoint is the inspector's bin on
#    the dashboard listener, so the first delivery can be seen, signature
#    checked, without writing a receiver.
# 4. Run `webhookd all` (API + worker + dashboard) with private networks allowed,
#    so receivers on 127.0.0.1 work.
# Throwaway servers it started (and only those) are stopped when it exits.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi

: "${WEBHOOKD_DATABASE_URL:=postgres://postgres@127.0.0.1:5432/webhookd?sslmode=disable}"
: "${WEBHOOKD_REDIS_URL:=redis://127.0.0.1:6379/0}"
: "${WEBHOOKD_API_ADDR:=:8080}"
: "${WEBHOOKD_DASHBOARD_ADDR:=:8081}"
: "${WEBHOOKD_ALLOW_PRIVATE_NETWORKS:=true}"
export WEBHOOKD_DATABASE_URL WEBHOOKD_REDIS_URL WEBHOOKD_API_ADDR \
	WEBHOOKD_DASHBOARD_ADDR WEBHOOKD_ALLOW_PRIVATE_NETWORKS

log() { printf 'run: %s\n' "$*" >&2; }
redact() { sed -E 's#(://[^:@/]*):[^@/]*@#\1:***@#' <<<"$1"; } # hide a URL's password
die() {
	printf 'run: error: %s\n' "$*" >&2
	exit 1
}

# ---------------------------------------------------------------- throwaways --

tmp_base=""     # temp dir holding throwaway server data; removed on exit
pg_data=""      # set once a throwaway PostgreSQL runs
pg_bin=""
redis_pidfile="" # set once a throwaway Redis runs

as_postgres() {
	# initdb and postgres refuse to run as root.
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local rc=$?
	trap - EXIT
	trap '' INT TERM # a second Ctrl-C must not cut the cleanup short
	if [[ -n $redis_pidfile && -s $redis_pidfile ]]; then
		local pid
		pid=$(<"$redis_pidfile")
		log "stopping throwaway Redis (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	if [[ -n $pg_data && -f $pg_data/postmaster.pid ]]; then
		log "stopping throwaway PostgreSQL"
		as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
			log "warning: could not stop throwaway PostgreSQL in $pg_data"
	fi
	if [[ -n $tmp_base ]]; then
		rm -rf "$tmp_base"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ensure_tmp_base() {
	if [[ -z $tmp_base ]]; then
		tmp_base=$(mktemp -d "${TMPDIR:-/tmp}/webhookd-run.XXXXXX")
		chmod 755 "$tmp_base" # the postgres user must be able to enter it
	fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

find_pg_bin() {
	local d
	d=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -V | tail -n 1)
	if [[ -n $d && -x $d/initdb ]]; then
		echo "$d"
	elif command -v initdb >/dev/null 2>&1; then
		dirname "$(command -v initdb)"
	else
		die "no PostgreSQL reachable and no initdb installed (Debian: apt-get install postgresql)"
	fi
}

# start_throwaway_postgres DBNAME: start PostgreSQL in a temp dir and point
# WEBHOOKD_DATABASE_URL at database DBNAME on it.
start_throwaway_postgres() {
	local db=$1 port dir
	pg_bin=$(find_pg_bin)
	ensure_tmp_base
	dir=$tmp_base/postgres
	mkdir -p "$dir"
	if [[ $(id -u) -eq 0 ]]; then
		chown postgres: "$dir"
	fi
	as_postgres "$pg_bin/initdb" -D "$dir/data" --username=postgres --auth=trust \
		--encoding=UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 ||
		{
			cat "$dir/initdb.log" >&2
			die "initdb failed"
		}
	pg_data=$dir/data
	# A port that nothing listens on can still be taken by an outgoing connection
	# (55432 is in Linux's ephemeral range), so move on when the bind fails.
	for ((port = 55432; port < 55452; port++)); do
		port_in_use "$port" && continue
		log "starting throwaway PostgreSQL on 127.0.0.1:$port (data in $dir)"
		if as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -l "$dir/postgres-$port.log" -w -t 60 \
			-o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null 2>&1; then
			WEBHOOKD_DATABASE_URL="postgres://postgres@127.0.0.1:$port/$db?sslmode=disable"
			return 0
		fi
		if ! grep -q 'could not bind\|could not create any TCP/IP sockets' "$dir/postgres-$port.log"; then
			cat "$dir/postgres-$port.log" >&2
			die "throwaway PostgreSQL did not start"
		fi
		log "port $port is taken; trying the next one"
	done
	die "throwaway PostgreSQL found no free port in 55432..55451"
}

# start_throwaway_redis DBNUM: start Redis without persistence and point
# WEBHOOKD_REDIS_URL at logical database DBNUM on it.
start_throwaway_redis() {
	local dbnum=$1 port dir
	command -v redis-server >/dev/null 2>&1 ||
		die "no Redis reachable and redis-server is not installed (Debian: apt-get install redis-server)"
	ensure_tmp_base
	dir=$tmp_base/redis
	mkdir -p "$dir"
	for ((port = 56379; port < 56399; port++)); do
		port_in_use "$port" && continue
		log "starting throwaway Redis on 127.0.0.1:$port"
		redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
			--daemonize yes --pidfile "$dir/redis-$port.pid" --dir "$dir" \
			--logfile "$dir/redis-$port.log" >/dev/null
		for _ in $(seq 100); do
			if [[ $(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) == PONG ]]; then
				redis_pidfile=$dir/redis-$port.pid
				WEBHOOKD_REDIS_URL="redis://127.0.0.1:$port/$dbnum"
				return 0
			fi
			if grep -q 'Address already in use' "$dir/redis-$port.log" 2>/dev/null; then
				break
			fi
			sleep 0.1
		done
		if ! grep -q 'Address already in use' "$dir/redis-$port.log" 2>/dev/null; then
			cat "$dir/redis-$port.log" >&2 || true
			die "throwaway Redis did not answer on port $port"
		fi
		log "port $port is taken; trying the next one"
	done
	die "throwaway Redis found no free port in 56379..56398"
}

# ------------------------------------------------------------------ PostgreSQL --

# postgres[ql]://[user[:password]@]host[:port][/dbname][?params]
pg_re='^postgres(ql)?://(([^:@/]*)(:([^@/]*))?@)?(\[[^]/]*\]|[^:/?]*)(:([0-9]+))?(/([^?]*))?(\?(.*))?$'
[[ $WEBHOOKD_DATABASE_URL =~ $pg_re ]] ||
	die "cannot parse WEBHOOKD_DATABASE_URL=$(redact "$WEBHOOKD_DATABASE_URL") (want postgres://user@host:port/db)"
pg_host=${BASH_REMATCH[6]:-127.0.0.1}
pg_port=${BASH_REMATCH[8]:-5432}
pg_db=${BASH_REMATCH[10]:-webhookd}

if pg_isready -q -t 3 -h "${pg_host//[\[\]]/}" -p "$pg_port" >/dev/null 2>&1; then
	started_pg=false
else
	log "no PostgreSQL answers at $pg_host:$pg_port"
	start_throwaway_postgres "$pg_db"
	started_pg=true
fi

# Create the database if it is missing, through the maintenance database "postgres".
admin_url=$(sed -E 's#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\1/postgres#' <<<"$WEBHOOKD_DATABASE_URL")
db_lit=${pg_db//\'/\'\'}
db_ident=${pg_db//\"/\"\"}
exists=$(psql "$admin_url" -w -X -tAc "select 1 from pg_database where datname = '$db_lit'") ||
	die "cannot connect to PostgreSQL as $(redact "$admin_url")"
if [[ $exists != 1 ]]; then
	log "creating database $pg_db"
	psql "$admin_url" -w -X -q -c "create database \"$db_ident\"" >/dev/null
fi

# ---------------------------------------------------------------------- Redis --

# redis://[user:password@]host[:port][/db]
redis_db=0
if [[ $WEBHOOKD_REDIS_URL =~ /([0-9]+)/?$ ]]; then
	redis_db=${BASH_REMATCH[1]}
fi
if [[ $(timeout 5 redis-cli -u "$WEBHOOKD_REDIS_URL" ping 2>/dev/null) == PONG ]]; then
	started_redis=false
else
	log "no Redis answers at $(redact "$WEBHOOKD_REDIS_URL")"
	start_throwaway_redis "$redis_db"
	started_redis=true
fi

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
if [[ -z ${WEBHOOKD_ADMIN_TOKEN:-} ]]; then
	WEBHOOKD_ADMIN_TOKEN=wha_$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
fi
export WEBHOOKD_ADMIN_TOKEN
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
   Dashboard:  $dash_url/
   Admin token: $WEBHOOKD_ADMIN_TOKEN
               (log in to the dashboard with it)
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
