#!/usr/bin/env bash
# The claim statement's floor (issue 28): how fast can any claim that keeps the ledger's
# guarantees go, against the seed's one-statement claim, in the same run; and the same for
# claim-and-finish (issue 55): the seed's three statements, the write functions' three calls, and
# the least three statements that keep the guarantees.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres benches/claim_floor/run.sh
#
# DATABASE_URL names a server this script may create a database on (a superuser: it switches
# triggers off, which only the scratch database it creates ever sees). WL_BIN is the
# work-ledger binary (default target/release/work-ledger); WL_FLOOR_SECONDS (10),
# WL_FLOOR_CLIENTS (64) and WL_FLOOR_ROUNDS (2) size the runs. Needs psql and pgbench.
#
# Each variant runs after VACUUM and CHECKPOINT; its rate is the claims the tables recorded
# (attempts written) over the seconds, not pgbench's count of transactions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
: "${DATABASE_URL:?set DATABASE_URL to a server this script may create a database on}"
bin=${WL_BIN:-../../target/release/work-ledger}
seconds=${WL_FLOOR_SECONDS:-10} clients=${WL_FLOOR_CLIENTS:-64} rounds=${WL_FLOOR_ROUNDS:-2}
db=wl_claim_floor
url="${DATABASE_URL%/*}/$db"
server="${DATABASE_URL%/*}/postgres"

PGOPTIONS="-c client_min_messages=warning" psql "$server" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
DATABASE_URL="$url" "$bin" migrate > /dev/null 2>&1
# The seed's schema and one-statement claim, taken from the load bench's peer (one copy).
peers=../peers/mod.rs
schema=$(sed -n '/const SCHEMA: &str = "/,/";/p' "$peers" | sed '1s/.*const SCHEMA: &str = "//; $s/";$//')
{
  echo '\set a random(1, 1000000000)'
  sed -n '/pub async fn claim_statement/,/^    }/p' "$peers" \
    | sed -n '/"WITH pick AS (/,/SELECT unit_id FROM attempt"/p' \
    | sed 's/.*"WITH pick/WITH pick/; s/SELECT unit_id FROM attempt",/SELECT unit_id FROM attempt;/' \
    | sed "s/\\\$1/'agent-' || :a/g"
} > /tmp/wl_claim_floor_seed.sql
# The seed's claim-and-finish (its claim, then its step twice: claimed -> in_progress -> done).
{
  echo '\set a random(1, 1000000000)'
  sed 's/SELECT unit_id FROM attempt;$/SELECT unit_id AS u FROM attempt \\gset/' /tmp/wl_claim_floor_seed.sql | grep -v '^\\set'
  step=$(sed -n '/pub async fn step/,/^    }/p' "$peers" | sed -n '/"WITH u AS (/,/SELECT id FROM u"/p' \
    | sed 's/.*"WITH u AS/WITH u AS/; s/SELECT id FROM u",/SELECT id FROM u;/' | tr '\n' ' ')
  for move in "'claimed' 'in_progress'" "'in_progress' 'done'"; do
    set -- $move
    echo "$step" | sed "s/\\\$1/:u/g; s/\\\$2/'agent-' || :a/g; s/\\\$3/$1/g; s/\\\$4/$2/g"
  done
} > /tmp/wl_claim_floor_seed_finish.sql
grep -q 'SKIP LOCKED' /tmp/wl_claim_floor_seed.sql && grep -q 'CREATE TABLE seed.events' <<< "$schema" \
  || { echo "error: the seed's schema or claim_statement moved in $peers; update the extraction here" >&2; exit 1; }
psql "$url" -q <<< "$schema"
units=$(( (rounds + 1) * 9 * 4000 * seconds ))
psql "$url" -q \
  -c "INSERT INTO seed.units (external_ref) SELECT 'unit-' || g FROM generate_series(1, $units) g" \
  -c "INSERT INTO work_units (fleet, external_ref) SELECT 'f', 'unit-' || g FROM generate_series(1, $units) g" \
  -c "INSERT INTO api_tokens (fleet, name, permissions, token_hash)
      SELECT 'f', 'agent-' || g, ARRAY['units:claim'], sha256(convert_to('agent-' || g, 'UTF8'))
        FROM generate_series(1, 2000000) g" \
  -c "VACUUM ANALYZE"

# The foreign keys' checks (system triggers) on or off.
foreign_keys() {
  local act=$1
  psql "$url" -qAt -c "SELECT format('ALTER TABLE %s $act TRIGGER %I;', tgrelid::regclass, tgname)
                        FROM pg_trigger WHERE tgisinternal AND tgconstraint IN
                             (SELECT oid FROM pg_constraint WHERE contype = 'f')
                         AND tgrelid::regclass::text IN ('work_units', 'work_unit_attempts', 'work_unit_events')" \
    | psql "$url" -q
}
# The live-delivery marker (migration 0004/0014).
marker() { psql "$url" -qc "ALTER TABLE work_unit_events $1 TRIGGER work_unit_events_position"; }

# The indexes that serve reads only (issue 27's pages, costliest units, rework, roster, a unit's
# history): dropped for one variant, made again from their own definitions after it.
read_indexes="'work_units_cost_idx', 'work_units_keyset_idx', 'work_units_rework_idx',
              'work_unit_attempts_agent_started_idx', 'work_unit_events_keyset_idx', 'work_unit_events_unit_idx'"

# pgbench over `script` for `seconds`, in the service's notification mode; its output only on failure.
# A third argument: the role to run as (with the fleet set, as the write functions run).
bench() {
  PGOPTIONS="-c work_ledger.notify=after-commit${3:+ -c role=$3 -c work_ledger.fleet=f}" \
    pgbench -n -M prepared -c "$clients" -j 2 -T "$1" -f "$2" "$url" > /tmp/wl_claim_floor.out 2>&1 \
    || { cat /tmp/wl_claim_floor.out; exit 1; }
}

declare -A seed_rate
run() { # label script rows-done [role]
  local label=$1 script=$2 table=$3 before after r
  psql "$url" -q -c "VACUUM" -c "CHECKPOINT"
  before=$(psql "$url" -qAt -c "SELECT count(*) FROM $table")
  bench "$seconds" "$script" "${4:-}"
  after=$(psql "$url" -qAt -c "SELECT count(*) FROM $table")
  r=$(( (after - before) / seconds ))
  if [[ "$label" = seed* ]]; then
    seed_rate[$round]=$r
    printf '| %s | %s | %d | |\n' "$round" "$label" "$r"
  else
    printf '| %s | %s | %d | %d%% |\n' "$round" "$label" "$r" $(( 100 * r / ${seed_rate[$round]} ))
  fi
  if [ "$(psql "$url" -qAt -c "SELECT count(*) FROM work_units WHERE state = 'ready'")" -lt $(( 4000 * seconds )) ]; then
    echo "error: the READY units ran out; raise the seeded count" >&2
    exit 1
  fi
}

# Warm-up, not reported: every variant once for a second (plans, caches).
for script in /tmp/wl_claim_floor_seed.sql ledger_claim.sql /tmp/wl_claim_floor_seed_finish.sql ledger_finish.sql; do
  bench 2 "$script"
done
# The least statements run as the writer role, as the write functions do (under row-level security;
# the guards that stand for the write functions' rules on other roles' statements skip it).
for script in least_claim.sql least_finish.sql; do
  bench 2 "$script" work_ledger_writer
done

printf '| round | claim | claims/s | of the seed |\n| --- | --- | ---: | ---: |\n'
for round in $(seq 1 "$rounds"); do
  run "seed claim as one statement" /tmp/wl_claim_floor_seed.sql seed.attempts
  run "ledger_claim, as migrated" ledger_claim.sql work_unit_attempts
  run "least claim, foreign keys + marker" least_claim.sql work_unit_attempts work_ledger_writer
  marker DISABLE
  run "least claim, foreign keys only" least_claim.sql work_unit_attempts work_ledger_writer
  marker ENABLE; foreign_keys DISABLE
  run "least claim, marker only" least_claim.sql work_unit_attempts work_ledger_writer
  marker DISABLE
  run "least claim, neither" least_claim.sql work_unit_attempts work_ledger_writer
  marker ENABLE; foreign_keys ENABLE
  defs=$(psql "$url" -qAt -c "SELECT pg_get_indexdef(indexrelid) || ';' FROM pg_index
                                WHERE indexrelid::regclass::text IN ($read_indexes)")
  psql "$url" -qAt -c "SELECT 'DROP INDEX ' || string_agg(quote_ident(i), ', ') FROM unnest(ARRAY[$read_indexes]) i" | psql "$url" -q
  run "least claim, foreign keys + marker, without the six read-only indexes" least_claim.sql work_unit_attempts work_ledger_writer
  echo "$defs" | psql "$url" -q
done

# Claim-and-finish (claim, start, finish): the seed's three statements, the write functions' three
# calls, and the least three statements that keep the guarantees, run as the writer role.
printf '\n| round | claim-and-finish | jobs/s | of the seed |\n| --- | --- | ---: | ---: |\n'
for round in $(seq 1 "$rounds"); do
  run "seed claim-and-finish (its claim, then its step twice)" /tmp/wl_claim_floor_seed_finish.sql "seed.units WHERE state = 'done'"
  run "the write functions (ledger_claim, ledger_transition, ledger_dispose)" ledger_finish.sql \
    "work_units WHERE state = 'abandoned'"
  run "least claim-and-finish (writer role: row-level security, foreign keys, checks, guard, marker)" \
    least_finish.sql "work_units WHERE state = 'abandoned'" work_ledger_writer
done
psql "$server" -qc "DROP DATABASE $db"
