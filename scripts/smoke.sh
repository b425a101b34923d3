#!/usr/bin/env bash
# scripts/smoke.sh — end-to-end smoke test of `make run` (used by .ci/run).
#
# Starts `make run` in its own process group on 127.0.0.1:18080 (API) and
# 127.0.0.1:18081 (dashboard) against a database of its own, waits (with a
# deadline) until the dev API key is printed and the API answers, then with curl:
#   1. creates an endpoint pointing at a local receiver       -> 201
#   2. posts an event with an Idempotency-Key                 -> 202
#   3. posts it again                                         -> 202 + Idempotent-Replayed: true
#      and runs the banner's bin/webhookd send line            -> an event id
#   4. waits for the receiver to get the signed delivery (needs python3 for the receiver)
# Then it stops the whole process group and drops its database. On any failure
# it prints the log of `make run` and exits non-zero.
#
# Settings: SMOKE_DATABASE_URL (default: a new database on 127.0.0.1:5432),
# SMOKE_REDIS_URL (default: a logical database of 127.0.0.1:6379 leased like the
# tests do), SMOKE_API_ADDR, SMOKE_DASHBOARD_ADDR, SMOKE_TIMEOUT (seconds to wait
# for start-up, default 300).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi

smoke_db=webhookd_smoke_$$
database_url=${SMOKE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/$smoke_db?sslmode=disable}
redis_url=${SMOKE_REDIS_URL:-}
api_addr=${SMOKE_API_ADDR:-127.0.0.1:18080}
dashboard_addr=${SMOKE_DASHBOARD_ADDR:-127.0.0.1:18081}
startup_timeout=${SMOKE_TIMEOUT:-300}
api=http://$api_addr

work=$(mktemp -d "${TMPDIR:-/tmp}/webhookd-smoke.XXXXXX")
run_log=$work/run.log
received=$work/received.jsonl
run_pgid=""
receiver_pid=""
redis_lease=""
passed=0
lease_owner=smoke-$$-$RANDOM

say() { printf 'smoke: %s\n' "$*"; }
pass() {
	passed=$((passed + 1))
	say "ok   $*"
}
fail() {
	say "FAIL $*"
	if [[ -s $work/body ]]; then
		say "last response body:"
		sed 's/^/    /' "$work/body"
		echo
	fi
	say "---- log of make run (last 200 lines) ----"
	tail -n 200 "$run_log" 2>/dev/null || true
	say "---- end of log ----"
	if [[ -s $received ]]; then
		say "receiver got:"
		cat "$received"
	fi
	echo "smoke: $passed passed, 1 failed"
	exit 1
}

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local rc=$?
	trap - EXIT
	trap '' INT TERM
	if [[ -n $run_pgid ]] && kill -0 -- "-$run_pgid" 2>/dev/null; then
		kill -TERM -- "-$run_pgid" 2>/dev/null || true
		# run.sh stops any throwaway servers it started; give it time to.
		for _ in $(seq 300); do
			kill -0 -- "-$run_pgid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 -- "-$run_pgid" 2>/dev/null; then
			say "make run did not stop within 30s of SIGTERM; killing it"
			kill -KILL -- "-$run_pgid" 2>/dev/null || true
		fi
	fi
	if [[ -n $receiver_pid ]]; then
		kill "$receiver_pid" 2>/dev/null || true
	fi
	if [[ -n $redis_lease ]]; then
		timeout 10 redis-cli -h 127.0.0.1 -p 6379 -n 0 eval \
			"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0" \
			1 "$redis_lease" "$lease_owner" >/dev/null 2>&1 || true
	fi
	if [[ -z ${SMOKE_DATABASE_URL:-} ]]; then
		# Our own database on the local server; ignore errors (e.g. the server was
		# a throwaway that is gone now).
		timeout 20 psql "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" -w -X -q \
			-c "drop database if exists \"$smoke_db\" with (force)" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# request METHOD PATH BODY [HEADER...]: sets $status; body and headers go to files.
request() {
	local method=$1 path=$2 data=$3
	shift 3
	local args=(-sS -o "$work/body" -D "$work/headers" -w '%{http_code}' --max-time 30
		-X "$method" -H "Authorization: Bearer $api_key" -H 'Content-Type: application/json')
	local h
	for h in "$@"; do
		args+=(-H "$h")
	done
	status=$(curl "${args[@]}" --data-binary "$data" "$api$path") || status=000
	tr -d '\r' <"$work/headers" >"$work/headers.txt" 2>/dev/null || true
}

header_value() { # header_value NAME: value of the last response's header NAME
	sed -n "s/^$1: *//Ip" "$work/headers.txt" | tail -n 1
}

uuid() {
	if [[ -r /proc/sys/kernel/random/uuid ]]; then
		cat /proc/sys/kernel/random/uuid
	else
		uuidgen | tr '[:upper:]' '[:lower:]'
	fi
}

# ------------------------------------------------------------------- Redis --

# Lease a logical database of the local Redis the way internal/testenv does (a
# key in database 0 that expires by itself), so a test run on this machine does
# not share it. Nothing is flushed.
if [[ -z $redis_url ]]; then
	redis_url=redis://127.0.0.1:6379/15
	if [[ $(timeout 5 redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null) == PONG ]]; then
		for n in $(seq 15 -1 1); do
			if [[ $(redis-cli -h 127.0.0.1 -p 6379 -n 0 set "webhookd:testenv:lease:$n" \
				"$lease_owner" NX EX 900 2>/dev/null) == OK ]]; then
				redis_lease=webhookd:testenv:lease:$n
				redis_url=redis://127.0.0.1:6379/$n
				break
			fi
		done
		[[ -n $redis_lease ]] || say "warning: every Redis logical database is leased; using 15"
	fi
fi

# ---------------------------------------------------------------- receiver --

receiver_port=""
if command -v python3 >/dev/null 2>&1; then
	python3 - "$received" "$work/receiver.port" "$((startup_timeout + 180))" <<'PY' &
import http.server, json, os, sys, threading

out, port_file, lifetime = sys.argv[1], sys.argv[2], int(sys.argv[3])

class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        record = {
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
        }
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_port))
os.rename(port_file + ".tmp", port_file)
threading.Timer(lifetime, lambda: os._exit(0)).start()  # never outlive the smoke test
server.serve_forever()
PY
	receiver_pid=$!
	for _ in $(seq 100); do
		[[ -s $work/receiver.port ]] && break
		sleep 0.1
	done
	[[ -s $work/receiver.port ]] || fail "the local receiver did not start"
	receiver_port=$(<"$work/receiver.port")
	say "receiver listening on 127.0.0.1:$receiver_port"
else
	say "warning: python3 not found; the delivery check is skipped"
fi

# ---------------------------------------------------------------- make run --

say "starting make run (API $api, database $database_url, Redis $redis_url)"
WEBHOOKD_DATABASE_URL=$database_url \
	WEBHOOKD_REDIS_URL=$redis_url \
	WEBHOOKD_API_ADDR=$api_addr \
	WEBHOOKD_DASHBOARD_ADDR=$dashboard_addr \
	WEBHOOKD_ALLOW_PRIVATE_NETWORKS=true \
	setsid make run >"$run_log" 2>&1 </dev/null &
run_pid=$!
# setsid made the new process group; find its id (it is the pid unless setsid forked).
for _ in $(seq 50); do
	run_pgid=$(ps -o pgid= -p "$run_pid" 2>/dev/null | tr -d ' ') || true
	[[ -n $run_pgid && $run_pgid != "$$" ]] && break
	run_pgid=""
	sleep 0.1
done
[[ -n $run_pgid ]] || run_pgid=$run_pid

api_key=""
deadline=$((SECONDS + startup_timeout))
while :; do
	if ! kill -0 -- "-$run_pgid" 2>/dev/null; then
		fail "make run exited before the API answered"
	fi
	if [[ -z $api_key ]]; then
		api_key=$(sed -n 's/^ *API key: *//p' "$run_log" | head -n 1 | tr -d '[:space:]')
	fi
	if [[ -n $api_key ]]; then
		code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$api/v1/events" || true)
		if [[ $code != 000 && -n $code ]]; then
			break
		fi
	fi
	if ((SECONDS >= deadline)); then
		fail "no API key printed and API answering on $api within ${startup_timeout}s"
	fi
	sleep 0.5
done
pass "make run printed an API key and the API answers on $api"
grep -q '^ *Listening: *loopback only' "$run_log" ||
	fail "make run on $api_addr and $dashboard_addr does not say it listens on loopback only"
pass "make run says it listens on loopback only"

# ------------------------------------------------------------------ checks --

endpoint_url=http://127.0.0.1:${receiver_port:-9}/hook
request POST /v1/endpoints "{\"url\":\"$endpoint_url\"}" "Idempotency-Key: $(uuid)"
[[ $status == 201 ]] || fail "POST /v1/endpoints answered $status, want 201"
pass "POST /v1/endpoints -> 201"

idem=$(uuid)
event='{"type":"order.created","data":{"order_id":"ord_smoke","amount":4200}}'
request POST /v1/events "$event" "Idempotency-Key: $idem"
[[ $status == 202 ]] || fail "POST /v1/events answered $status, want 202"
[[ $(header_value Idempotent-Replayed) != true ]] ||
	fail "first POST /v1/events already says Idempotent-Replayed: true"
event_id=$(grep -o 'evt_[0-9A-Za-z]*' "$work/body" | head -n 1 || true)
pass "POST /v1/events -> 202${event_id:+ ($event_id)}"

request POST /v1/events "$event" "Idempotency-Key: $idem"
[[ $status == 202 ]] || fail "repeated POST /v1/events answered $status, want 202"
replayed=$(header_value Idempotent-Replayed)
[[ $replayed == true ]] ||
	fail "repeated POST /v1/events: Idempotent-Replayed is '${replayed}', want 'true'"
if [[ -n $event_id ]] && ! grep -q "$event_id" "$work/body"; then
	fail "repeated POST /v1/events answered another event, want $event_id"
fi
pass "repeated POST /v1/events -> 202, Idempotent-Replayed: true"

# The banner's bin/webhookd send line, as a user would paste it.
send_line=$(grep -m1 -o 'bin/webhookd send .*' "$run_log" || true)
[[ -n $send_line ]] || fail "make run printed no bin/webhookd send line"
send_out=$(WEBHOOKD_API_URL=$api WEBHOOKD_API_KEY=$api_key bash -c "$send_line" 2>&1) ||
	fail "the banner's $send_line failed: $send_out"
[[ $send_out =~ ^evt_[0-9A-Z]+$ ]] || fail "the banner's $send_line printed '$send_out', want an event id"
pass "the banner's bin/webhookd send line -> $send_out"

if [[ -n $receiver_port ]]; then
	deadline=$((SECONDS + 60))
	until [[ -s $received ]] && grep -q 'order.created' "$received"; do
		((SECONDS < deadline)) || fail "the receiver got no delivery within 60s"
		sleep 0.2
	done
	grep -q '"webhook-signature"' "$received" ||
		fail "the delivery has no webhook-signature header"
	if [[ -n $event_id ]] && ! grep -q "$event_id" "$received"; then
		fail "the delivery does not name event $event_id"
	fi
	pass "the receiver got a signed delivery of the event"
fi

echo "smoke: $passed passed, 0 failed"
