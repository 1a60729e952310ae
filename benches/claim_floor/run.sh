#!/usr/bin/env bash
# The claim statement's floor (issue 28): how fast can any claim that keeps the ledger's
# guarantees go, against the seed's one-statement claim, in the same run.
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

# Triggers of the three write tables that are not a guarantee of their own: the totals
# (issue 27's reads, kept in the writing transaction) and the guards (which skip the write
# functions' own statements, and fire here for the owner's hand-written statement).
totals() {
  local act=$1
  psql "$url" -q <<SQL
ALTER TABLE work_units $act TRIGGER work_units_change_recorded, $act TRIGGER work_units_claim_recorded,
  $act TRIGGER work_units_disposal_days, $act TRIGGER work_units_evidence_guard, $act TRIGGER work_units_guard,
  $act TRIGGER work_units_holder_guard, $act TRIGGER work_units_insert_guard, $act TRIGGER work_units_totals_added,
  $act TRIGGER work_units_totals_moved, $act TRIGGER work_units_first_claim_guard,
  $act TRIGGER work_units_first_claim_recorded;
ALTER TABLE work_unit_attempts $act TRIGGER work_unit_attempts_claim_days, $act TRIGGER work_unit_attempts_guard,
  $act TRIGGER work_unit_attempts_history_guard, $act TRIGGER work_unit_attempts_totals_moved;
ALTER TABLE work_unit_events $act TRIGGER work_unit_events_totals;
SQL
}
# The foreign keys' checks (system triggers) on or off, every other trigger as totals() left it.
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
bench() {
  PGOPTIONS="-c work_ledger.notify=after-commit" \
    pgbench -n -M prepared -c "$clients" -j 2 -T "$1" -f "$2" "$url" > /tmp/wl_claim_floor.out 2>&1 \
    || { cat /tmp/wl_claim_floor.out; exit 1; }
}

declare -A seed_rate
run() { # label script attempts-table
  local label=$1 script=$2 table=$3 before after r
  psql "$url" -q -c "VACUUM" -c "CHECKPOINT"
  before=$(psql "$url" -qAt -c "SELECT count(*) FROM $table")
  bench "$seconds" "$script"
  after=$(psql "$url" -qAt -c "SELECT count(*) FROM $table")
  r=$(( (after - before) / seconds ))
  if [ "$label" = seed ]; then
    seed_rate[$round]=$r
    printf '| %s | %s | %d | |\n' "$round" "seed claim as one statement" "$r"
  else
    printf '| %s | %s | %d | %d%% |\n' "$round" "$label" "$r" $(( 100 * r / ${seed_rate[$round]} ))
  fi
  if [ "$(psql "$url" -qAt -c "SELECT count(*) FROM work_units WHERE state = 'ready'")" -lt $(( 4000 * seconds )) ]; then
    echo "error: the READY units ran out; raise the seeded count" >&2
    exit 1
  fi
}

# Warm-up, not reported: every variant once for a second (plans, caches).
for script in /tmp/wl_claim_floor_seed.sql ledger_claim.sql least_claim.sql; do
  bench 2 "$script"
done

printf '| round | claim | claims/s | of the seed |\n| --- | --- | ---: | ---: |\n'
for round in $(seq 1 "$rounds"); do
  run seed /tmp/wl_claim_floor_seed.sql seed.attempts
  run "ledger_claim, as migrated" ledger_claim.sql work_unit_attempts
  totals DISABLE
  run "ledger_claim, totals off" ledger_claim.sql work_unit_attempts
  run "least claim, foreign keys + marker (totals off)" least_claim.sql work_unit_attempts
  marker DISABLE
  run "least claim, foreign keys only" least_claim.sql work_unit_attempts
  marker ENABLE; foreign_keys DISABLE
  run "least claim, marker only" least_claim.sql work_unit_attempts
  marker DISABLE
  run "least claim, neither" least_claim.sql work_unit_attempts
  marker ENABLE; foreign_keys ENABLE
  defs=$(psql "$url" -qAt -c "SELECT pg_get_indexdef(indexrelid) || ';' FROM pg_index
                                WHERE indexrelid::regclass::text IN ($read_indexes)")
  psql "$url" -qAt -c "SELECT 'DROP INDEX ' || string_agg(quote_ident(i), ', ') FROM unnest(ARRAY[$read_indexes]) i" | psql "$url" -q
  run "least claim, foreign keys + marker, without the six read-only indexes" least_claim.sql work_unit_attempts
  echo "$defs" | psql "$url" -q
  totals ENABLE
done
psql "$server" -qc "DROP DATABASE $db"
