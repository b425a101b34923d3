# scripts/servers.sh — sourced by scripts/run.sh (make run) and scripts/test.sh
# (make test): find PostgreSQL and Redis, install what is missing, start
# throwaway servers.
#
#   pg_answers HOST PORT            does a PostgreSQL server answer there?
#   redis_answers HOST PORT         does a Redis server answer there (PING)?
#   need_commands PKG:CMD...        install the Debian package PKG when CMD is
#                                   missing (apt-get as root or through sudo;
#                                   elsewhere print the command and stop)
#   start_throwaway_postgres DB     initdb into a temp dir, start it on 127.0.0.1
#                                   (port 55432 or the next free one), create DB;
#                                   sets throwaway_pg_url
#   start_throwaway_redis DBNUM     redis-server without persistence on 127.0.0.1
#                                   (port 56379 or the next free one); sets
#                                   throwaway_redis_url
#   stop_throwaways                 stop what was started and delete its data
#   ensure_postgres URL DEFAULT_DB  use the PostgreSQL at URL (creating its
#                                   database if missing) or, when none answers,
#                                   a throwaway one; sets pg_url and pg_started
#   ensure_redis URL                the same for a redis:// URL (Sentinel and
#                                   Cluster URLs are taken as they are); sets
#                                   redis_url and redis_started
#
# The caller sets script_name (log prefix) before sourcing it; sourcing sets
# traps that stop the throwaways when the script exits.

script_name=${script_name:-servers}

log() { printf '%s: %s\n' "$script_name" "$*" >&2; }
redact() { sed -E 's#(://[^:@/]*):[^@/]*@#\1:***@#' <<<"$1"; } # hide a URL's password
die() {
	printf '%s: error: %s\n' "$script_name" "$*" >&2
	exit 1
}

tmp_base=""       # temp dir holding throwaway server data; removed on exit
pg_data=""        # set once a throwaway PostgreSQL runs
pg_bin=""
redis_pidfile=""  # set once a throwaway Redis runs
throwaway_pg_url=""
throwaway_redis_url=""

port_in_use() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

pg_answers() {
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -t 3 -h "$1" -p "$2" >/dev/null 2>&1
	else
		port_in_use "$1" "$2"
	fi
}

# redis_answers HOST PORT: PING without redis-cli; a server that wants a
# password (-NOAUTH) answers too.
redis_answers() {
	local reply=""
	{
		exec 3<>"/dev/tcp/$1/$2" &&
			printf 'PING\r\n' >&3 &&
			IFS= read -r -t 3 reply <&3
	} 2>/dev/null || return 1
	exec 3<&- 3>&-
	[[ $reply == +PONG* || $reply == -NOAUTH* ]]
}

apt_updated=false
# need_commands PKG:CMD...: make sure every CMD exists, installing the
# Debian packages that bring the missing ones.
need_commands() {
	local want=() item pkg cmd
	for item in "$@"; do
		pkg=${item%%:*} cmd=${item#*:}
		if ! command -v "$cmd" >/dev/null 2>&1 && ! find_in_pg_bin "$cmd" >/dev/null; then
			want+=("$pkg")
		fi
	done
	((${#want[@]})) || return 0
	local sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		if command -v sudo >/dev/null 2>&1 && { sudo -n true 2>/dev/null || [[ -t 0 ]]; }; then
			sudo=(sudo)
		else
			sudo=(NO)
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1 || [[ ${sudo[0]:-} == NO ]]; then
		log "missing: ${want[*]} (Debian/Ubuntu package names)."
		log "install them and run this again, for example:"
		log "    sudo apt-get install -y ${want[*]}"
		log "  or on Fedora: sudo dnf install -y postgresql-server postgresql redis;"
		log "  on macOS: brew install postgresql redis"
		die "cannot install packages here (not root, no apt-get, or sudo needs a password without a terminal)"
	fi
	log "installing ${want[*]} with ${sudo[*]:+${sudo[*]} }apt-get"
	export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 NEEDRESTART_MODE=l
	if ! $apt_updated; then
		"${sudo[@]}" apt-get update -qq || die "apt-get update failed"
		apt_updated=true
	fi
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${want[@]}" >&2 ||
		die "apt-get install ${want[*]} failed"
}

# find_in_pg_bin CMD: print the newest /usr/lib/postgresql/*/bin/CMD.
find_in_pg_bin() {
	local d
	d=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -V | tail -n 1)
	[[ -n $d && -x $d/$1 ]] && echo "$d/$1"
}

as_postgres() {
	# initdb and postgres refuse to run as root.
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || die "running as root and there is no postgres user to run PostgreSQL as"
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

ensure_tmp_base() {
	if [[ -z $tmp_base ]]; then
		tmp_base=$(mktemp -d "${TMPDIR:-/tmp}/webhookd-$script_name.XXXXXX")
		chmod 755 "$tmp_base" # the postgres user must be able to enter it
	fi
}

# start_throwaway_postgres DBNAME
start_throwaway_postgres() {
	local db=$1 port dir initdb
	need_commands postgresql:initdb postgresql-client:psql
	initdb=$(find_in_pg_bin initdb || command -v initdb) || die "initdb not found after installing postgresql"
	pg_bin=$(dirname "$initdb")
	ensure_tmp_base
	dir=$tmp_base/postgres
	mkdir -p "$dir"
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || die "running as root and there is no postgres user to run PostgreSQL as"
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
		port_in_use 127.0.0.1 "$port" && continue
		log "starting throwaway PostgreSQL on 127.0.0.1:$port (data in $dir)"
		if as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -l "$dir/postgres-$port.log" -w -t 60 \
			-o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" \
			start >/dev/null 2>&1; then
			if [[ $db != postgres ]]; then
				psql "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" -w -X -q \
					-c "create database \"${db//\"/\"\"}\"" >/dev/null || die "create database $db failed"
			fi
			throwaway_pg_url="postgres://postgres@127.0.0.1:$port/$db?sslmode=disable"
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

# start_throwaway_redis DBNUM
start_throwaway_redis() {
	local dbnum=$1 port dir
	need_commands redis-server:redis-server
	ensure_tmp_base
	dir=$tmp_base/redis
	mkdir -p "$dir"
	for ((port = 56379; port < 56399; port++)); do
		port_in_use 127.0.0.1 "$port" && continue
		log "starting throwaway Redis on 127.0.0.1:$port"
		redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --databases 16 \
			--daemonize yes --pidfile "$dir/redis-$port.pid" --dir "$dir" \
			--logfile "$dir/redis-$port.log" >/dev/null
		for _ in $(seq 100); do
			if redis_answers 127.0.0.1 "$port"; then
				redis_pidfile=$dir/redis-$port.pid
				throwaway_redis_url="redis://127.0.0.1:$port/$dbnum"
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

stop_throwaways() {
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
}

# URL parts: postgres[ql]://[user[:password]@]host[:port][/dbname][?params]
pg_url_re='^postgres(ql)?://(([^:@/]*)(:([^@/]*))?@)?(\[[^]/]*\]|[^:/?]*)(:([0-9]+))?(/([^?]*))?(\?(.*))?$'
# redis[s]://[user:password@]host[:port][/db]
redis_url_re='^rediss?://([^@/]*@)?(\[[^]/]*\]|[^:/?]*)(:([0-9]+))?(/([0-9]*))?/?(\?.*)?$'

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local rc=$?
	trap - EXIT
	trap '' INT TERM # a second Ctrl-C must not cut the cleanup short
	stop_throwaways
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ensure_postgres() {
	local url=$1 host port db admin_url exists
	[[ $url =~ $pg_url_re ]] ||
		die "cannot parse the PostgreSQL URL $(redact "$url") (want postgres://user@host:port/db)"
	host=${BASH_REMATCH[6]:-127.0.0.1}
	port=${BASH_REMATCH[8]:-5432}
	db=${BASH_REMATCH[10]:-$2}
	pg_url=$url pg_started=false
	if ! pg_answers "${host//[\[\]]/}" "$port"; then
		log "no PostgreSQL answers at $host:$port"
		start_throwaway_postgres "$db"
		pg_url=$throwaway_pg_url pg_started=true
		return 0
	fi
	need_commands postgresql-client:psql
	# Create the database if it is missing, through the maintenance database "postgres".
	admin_url=$(sed -E 's#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\1/postgres#' <<<"$url")
	exists=$(psql "$admin_url" -w -X -tAc "select 1 from pg_database where datname = '${db//\'/\'\'}'") ||
		die "PostgreSQL answers at $host:$port but does not let $(redact "$admin_url") in"
	if [[ $exists != 1 ]]; then
		log "creating database $db"
		psql "$admin_url" -w -X -q -c "create database \"${db//\"/\"\"}\"" >/dev/null
	fi
}

ensure_redis() {
	local url=$1 host port dbnum
	redis_url=$url redis_started=false
	[[ $url =~ $redis_url_re ]] || return 0
	host=${BASH_REMATCH[2]//[\[\]]/}
	port=${BASH_REMATCH[4]:-6379}
	dbnum=${BASH_REMATCH[6]:-0}
	if ! redis_answers "$host" "$port"; then
		log "no Redis answers at $(redact "$url")"
		start_throwaway_redis "$dbnum"
		redis_url=$throwaway_redis_url redis_started=true
	fi
}
