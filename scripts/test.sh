#!/usr/bin/env bash
# scripts/test.sh — what `make test` does: the tests with the race detector,
# against PostgreSQL and Redis that answer.
#
# 1. If a PostgreSQL answers at WEBHOOKD_TEST_DATABASE_URL (default
#    postgres://postgres@127.0.0.1:5432/test?sslmode=disable), it is used, and
#    the database is created if it is missing. Otherwise a throwaway one is
#    started (scripts/servers.sh: port 55432 or the next free one, trust auth,
#    data in a temp dir) and WEBHOOKD_TEST_DATABASE_URL points at it.
# 2. The same for Redis at WEBHOOKD_TEST_REDIS_URL (default
#    redis://127.0.0.1:6379; the tests use its logical databases 1-15).
# 3. The dashboard's browser tests need Chromium: WEBHOOKD_TEST_CHROMIUM, or
#    chromium / chromium-browser on PATH, or Debian's chromium package.
# Missing packages are installed with apt-get (as root or through sudo), or the
# command to install them is printed. Then: go test -race -count=1 ./... (or
# the packages in TEST_PKGS) with any arguments given (TEST_FLAGS in make). Throwaway servers are deleted on exit.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi
: "${WEBHOOKD_TEST_DATABASE_URL:=postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
: "${WEBHOOKD_TEST_REDIS_URL:=redis://127.0.0.1:6379}"
export WEBHOOKD_TEST_DATABASE_URL WEBHOOKD_TEST_REDIS_URL

script_name=test
# shellcheck source=scripts/servers.sh
source scripts/servers.sh

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local rc=$?
	trap - EXIT
	trap '' INT TERM
	stop_throwaways
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[[ $WEBHOOKD_TEST_DATABASE_URL =~ $pg_url_re ]] ||
	die "cannot parse WEBHOOKD_TEST_DATABASE_URL=$(redact "$WEBHOOKD_TEST_DATABASE_URL")"
pg_host=${BASH_REMATCH[6]:-127.0.0.1}
pg_port=${BASH_REMATCH[8]:-5432}
pg_db=${BASH_REMATCH[10]:-test}
if pg_answers "${pg_host//[\[\]]/}" "$pg_port"; then
	need_commands postgresql-client:psql
	admin_url=$(sed -E 's#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\1/postgres#' <<<"$WEBHOOKD_TEST_DATABASE_URL")
	exists=$(psql "$admin_url" -w -X -tAc "select 1 from pg_database where datname = '${pg_db//\'/\'\'}'") ||
		die "PostgreSQL answers at $pg_host:$pg_port but does not let $(redact "$admin_url") in;" \
			"the tests need a superuser without a password there (or set WEBHOOKD_TEST_DATABASE_URL)"
	if [[ $exists != 1 ]]; then
		log "creating database $pg_db"
		psql "$admin_url" -w -X -q -c "create database \"${pg_db//\"/\"\"}\"" >/dev/null
	fi
else
	log "no PostgreSQL answers at $pg_host:$pg_port"
	start_throwaway_postgres "$pg_db"
	WEBHOOKD_TEST_DATABASE_URL=$throwaway_pg_url
fi

[[ $WEBHOOKD_TEST_REDIS_URL =~ $redis_url_re ]] ||
	die "WEBHOOKD_TEST_REDIS_URL=$(redact "$WEBHOOKD_TEST_REDIS_URL"): want redis://host:port"
redis_host=${BASH_REMATCH[2]//[\[\]]/}
redis_port=${BASH_REMATCH[4]:-6379}
# The drills start throwaway redis-server processes (and a sentinel) of their own.
need_commands redis-server:redis-server
if ! redis_answers "$redis_host" "$redis_port"; then
	log "no Redis answers at $(redact "$WEBHOOKD_TEST_REDIS_URL")"
	start_throwaway_redis 0
	WEBHOOKD_TEST_REDIS_URL=$throwaway_redis_url
fi

if [[ -z ${WEBHOOKD_TEST_CHROMIUM:-} ]] && ! command -v chromium >/dev/null 2>&1; then
	if command -v chromium-browser >/dev/null 2>&1; then
		WEBHOOKD_TEST_CHROMIUM=$(command -v chromium-browser)
		export WEBHOOKD_TEST_CHROMIUM
	else
		need_commands chromium:chromium
	fi
fi

log "PostgreSQL $(redact "$WEBHOOKD_TEST_DATABASE_URL"), Redis $(redact "$WEBHOOKD_TEST_REDIS_URL")"
status=0
# shellcheck disable=SC2086 # TEST_PKGS is a list of packages
go test -race -count=1 "$@" ${TEST_PKGS:-./...} || status=$?
exit "$status"
