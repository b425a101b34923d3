#!/bin/bash
# Issue 34, step 1: what a hot statement costs under a forced generic plan
# (as webhookd's planSettings runs them) on an unpartitioned deliveries
# table, on 19 day partitions through the parent, and on 19 partitions
# addressing the one child the id names. Prints, per statement shape and
# variant, the relation locks one run takes (deterministic) and the
# backend's CPU per transaction (utime+stime from /proc/self/stat over N
# runs; noisy on a shared machine: alternate rounds, take medians).
#
# Needs: a webhookd binary (WEBHOOKD=path) to migrate two scratch databases,
# and the partition migration's SQL (MIG: migration 24 without its goose
# lines), applied by psql. Usage: MIG=/tmp/mig24.sql WEBHOOKD=bin/webhookd scripts/partition-locks/run.sh
set -euo pipefail
cd "$(dirname "$0")"
PG="-h 127.0.0.1 -U postgres"
N=${N:-5000}
for d in h34_flat h34_part; do
  psql $PG -d postgres -qc "DROP DATABASE IF EXISTS $d" -c "CREATE DATABASE $d"
  "$WEBHOOKD" migrate --database-url "postgres://postgres@127.0.0.1:5432/$d?sslmode=disable" >/dev/null 2>&1
done
psql $PG -d h34_part -v ON_ERROR_STOP=1 -q -f "$MIG" -f days.sql
psql $PG -d h34_flat -v ON_ERROR_STOP=1 -q -f fn.sql
for d in h34_flat h34_part; do
  psql $PG -d $d -v ON_ERROR_STOP=1 -q -c "INSERT INTO projects (id, name) VALUES ('prj_1', 'bench')" \
    -c "INSERT INTO endpoints (id, project_id, url, secret) VALUES ('ep_1', 'prj_1', 'http://127.0.0.1:1/', 'whsec_x')" -f data.sql
done
mk() { sed -e "s/@D/$2/g; s/@E/$3/g; s/@A/$4/g; s/@L/$5/g" $1.tmpl > /tmp/$1.$6.sql; }
for s in claimsel claim record; do
  mk $s deliveries events attempts dead_letters parent
  mk $s deliveries_p20261204 events_p20261204 attempts_p20261204 dead_letters_p20261204 child
  mk $s deliveries_p20261204 events_p20261204 attempts dead_letters_p20261204 childins
done
one() { # db script: locks of one run, then CPU and wall per transaction over N runs
  local body; body=$(sed -n '4p' "$2" | sed "s/:n/\$1/g; s/;\$//")
  { echo "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; SET enable_bitmapscan = off; SET synchronous_commit = off;"
    echo "PREPARE q(int) AS $body;"
    echo "EXECUTE q(1); EXECUTE q(2);"
    echo "BEGIN; EXECUTE q(3); SELECT count(*) AS locks FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation' \\gset"
    echo "ROLLBACK;"
    echo "SELECT split_part(pg_read_file('/proc/self/stat'), ' ', 14)::int + split_part(pg_read_file('/proc/self/stat'), ' ', 15)::int AS t0, clock_timestamp() AS w0 \\gset"
    for i in $(seq 1 "$N"); do echo "BEGIN; EXECUTE q($((i % 2000 + 1))); COMMIT;"; done
    echo "SELECT ((split_part(pg_read_file('/proc/self/stat'), ' ', 14)::int + split_part(pg_read_file('/proc/self/stat'), ' ', 15)::int - :t0) * 10.0 / $N)::numeric(8,4) AS cpu_ms, (extract(epoch from clock_timestamp() - :'w0') * 1000 / $N)::numeric(8,4) AS wall_ms \\gset"
    echo "\\echo locks :locks cpu_ms :cpu_ms wall_ms :wall_ms"
  } | psql $PG -d "$1" -Atq -o /dev/null -f - 2>&1 | tail -1
}
for round in 1 2 3; do
  for s in claimsel claim record; do
    for v in flat parent child childins; do
      db=h34_part; f=/tmp/$s.$v.sql
      [ $v = flat ] && { db=h34_flat; f=/tmp/$s.parent.sql; }
      [ $s != record ] && [ $v = childins ] && continue
      echo "$round $s $v $(one $db $f)"
    done
  done
done
for d in h34_flat h34_part; do psql $PG -d postgres -qc "DROP DATABASE $d"; done
