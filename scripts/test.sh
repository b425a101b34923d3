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

ensure_postgres "$WEBHOOKD_TEST_DATABASE_URL" test
WEBHOOKD_TEST_DATABASE_URL=$pg_url
[[ $WEBHOOKD_TEST_REDIS_URL =~ $redis_url_re ]] ||
	die "WEBHOOKD_TEST_REDIS_URL=$(redact "$WEBHOOKD_TEST_REDIS_URL"): want redis://host:port"
# The drills start throwaway redis-server processes (and a sentinel) of their own.
need_commands redis-server:redis-server
ensure_redis "$WEBHOOKD_TEST_REDIS_URL"
WEBHOOKD_TEST_REDIS_URL=$redis_url

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
