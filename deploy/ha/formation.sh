#!/usr/bin/env bash
# A local pg_auto_failover formation for trying work-ledger's failover:
# one monitor and 2 or 3 PostgreSQL data nodes on loopback ports, from the
# Debian packages (apt-get install postgresql-15-auto-failover
# pg-auto-failover-cli). Not a production setup: trust authentication, no
# TLS, everything on one machine (see docs/operating.md, "High availability").
#
#   deploy/ha/formation.sh start [--dir DIR] [--base-port P] [--nodes 2|3] [--fast-failover]
#       starts the formation and prints its DATABASE_URL on stdout
#   deploy/ha/formation.sh url      [--dir DIR]   prints the DATABASE_URL again
#   deploy/ha/formation.sh state    [--dir DIR]   pg_autoctl show state
#   deploy/ha/formation.sh events   [--dir DIR]   the monitor's state and last 60 events, on stderr
#   deploy/ha/formation.sh primary  [--dir DIR]   the name of the current primary (node1, ...)
#   deploy/ha/formation.sh crash NODE [--dir DIR] SIGKILLs the node's keeper and postgres
#   deploy/ha/formation.sh run NODE   [--dir DIR] starts a node's keeper again (it rejoins)
#   deploy/ha/formation.sh wait-healthy [--dir DIR] until every node is primary or secondary
#   deploy/ha/formation.sh wait-caught-up [--dir DIR] until every node is primary or secondary and
#       passes the monitor's health check, and every standby has replayed the primary's WAL as it
#       was when the wait began
#   deploy/ha/formation.sh switchover [--dir DIR] [--wait S] a planned switchover, waiting at most
#       S seconds (default 120) for the new primary; on failure prints the monitor's state and events
#   deploy/ha/formation.sh stop     [--dir DIR]   kills every process and deletes DIR
#
# Ports: the monitor on P (default 6000), node k on P+k. --fast-failover
# shortens the monitor's health checks and its demote timeout (about 9 s
# from a crash to writes instead of about 50 s); the demote timeout is what
# keeps a cut-off old primary from taking writes while a standby is
# promoted, so shorten it only where no network partition can happen (a
# test on one machine).
set -euo pipefail

command=${1:-}
[ $# -gt 0 ] && shift
node=""
case $command in crash | run) node=${1:?"$command needs a node name (node1, node2, ...)"}; shift ;; esac
dir=${WORK_LEDGER_HA_DIR:-/tmp/work-ledger-ha}
base_port=6000
nodes=2
fast=0
wait_seconds=120
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --base-port) base_port=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --fast-failover) fast=1; shift ;;
    --wait) wait_seconds=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
case $nodes in 2 | 3) ;; *) echo "--nodes must be 2 or 3" >&2; exit 2 ;; esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pgbin=$(dirname "$(ls /usr/lib/postgresql/*/bin/postgres 2> /dev/null | sort -V | tail -n 1)")
if ! command -v pg_autoctl > /dev/null 2>&1 || [ ! -x "$pgbin/postgres" ]; then
  echo "pg_autoctl or the PostgreSQL server is missing: apt-get install postgresql-15-auto-failover pg-auto-failover-cli" >&2
  exit 1
fi

# pg_autoctl keeps its state under XDG directories: inside $dir, so that
# formations never share anything.
as_postgres() {
  local env=(env "XDG_CONFIG_HOME=$dir/xdg/config" "XDG_DATA_HOME=$dir/xdg/data" "XDG_RUNTIME_DIR=$dir/run"
    "PATH=$pgbin:$PATH" "PGHOST=127.0.0.1")
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "${env[@]}" "$@"
  else
    "${env[@]}" "$@"
  fi
}

monitor_port() { cat "$dir/monitor.port"; }
monitor_uri() { echo "postgres://autoctl_node@127.0.0.1:$(monitor_port)/pg_auto_failover?sslmode=disable"; }
monitor_sql() { as_postgres psql -X -q -At -h 127.0.0.1 -p "$(monitor_port)" -d pg_auto_failover -c "$1"; }

# A keeper in a session (process group) of its own, so that `crash` and
# `stop` reach it and every process it started.
run_keeper() {
  local name=$1
  setsid bash -c 'exec "$@"' _ "${as_cmd[@]}" pg_autoctl run --pgdata "$dir/$name" >> "$dir/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/$name.pid"
}

# The env/runuser prefix as an array, for run_keeper.
as_cmd=(env "XDG_CONFIG_HOME=$dir/xdg/config" "XDG_DATA_HOME=$dir/xdg/data" "XDG_RUNTIME_DIR=$dir/run" "PATH=$pgbin:$PATH")
[ "$(id -u)" -eq 0 ] && as_cmd=(runuser -u postgres -- "${as_cmd[@]}")

wait_for() { # seconds, description, command...
  # Bounded by the clock: on a busy machine each check (psql through
  # runuser) takes long enough that counting tries would wait far longer.
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" > /dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "timed out after ${limit}s waiting for $what (logs in $dir/*.log)" >&2
      return 1
    fi
    sleep 0.1
  done
}

healthy_count() { monitor_sql "SELECT count(*) FROM pgautofailover.node WHERE reportedstate = goalstate AND reportedstate IN ('primary', 'secondary', 'single')"; }
all_healthy() {
  local want
  want=$(monitor_sql "SELECT count(*) FROM pgautofailover.node")
  [ "$(healthy_count)" = "$want" ] && [ "$(monitor_sql "SELECT count(*) FROM pgautofailover.node WHERE reportedstate = 'primary'")" = 1 ]
}
node_is() { [ "$(monitor_sql "SELECT reportedstate FROM pgautofailover.node WHERE nodename = '$1'")" = "$2" ]; }

# As all_healthy, and the monitor's last health check of every node passed:
# a node it finds unhealthy is sent back to catchingup, and one found so in
# the middle of a switchover holds the switchover up.
all_healthy_and_checked() { all_healthy && [ "$(monitor_sql "SELECT count(*) FROM pgautofailover.node WHERE health <> 1")" = 0 ]; }
primary_port() { monitor_sql "SELECT nodeport FROM pgautofailover.node WHERE reportedstate = 'primary' AND goalstate = 'primary'"; }
node_sql() { as_postgres psql -X -q -At -h 127.0.0.1 -p "$1" -d postgres -c "$2"; }
# Every standby streams from the primary on port $1 and has replayed its WAL up to LSN $2.
replayed() {
  local standbys
  standbys=$(($(monitor_sql "SELECT count(*) FROM pgautofailover.node") - 1))
  [ "$(node_sql "$1" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND replay_lsn >= '$2'")" = "$standbys" ]
}

# What the monitor knows, for a failure to say why.
diagnose() {
  echo "--- pg_autoctl show state" >&2
  as_postgres pg_autoctl show state --monitor "$(monitor_uri)" >&2 || true
  # The events compact (a failing test's output is cut beyond a few
  # kilobytes): time, node, reported state, goal, reported LSN, the comment.
  echo "--- monitor events (last 60, oldest first; time UTC|node|reported|goal|lsn|comment)" >&2
  monitor_sql "SELECT to_char(e.eventtime AT TIME ZONE 'UTC', 'HH24:MI:SS.MS'), e.nodename, e.reportedstate, e.goalstate,
                      e.reportedlsn, left(e.description, 110)
                 FROM (SELECT * FROM pgautofailover.event ORDER BY eventid DESC LIMIT 60) e ORDER BY e.eventid" >&2 || true
}

wait_healthy() {
  wait_for 90 "every node to be primary or secondary" all_healthy || { diagnose; return 1; }
}

# Before a switchover: the nodes stable and healthy, and the standbys past the
# primary's WAL as it is now, so that the standby to promote has nothing
# left to replay; then stable and healthy again. Says on stderr how long it took.
wait_caught_up() {
  local started=$SECONDS healthy port target wal
  wait_for 90 "every node to be primary or secondary and healthy" all_healthy_and_checked || { diagnose; return 1; }
  healthy=$((SECONDS - started))
  port=$(primary_port)
  target=$(node_sql "$port" "SELECT pg_current_wal_lsn()")
  wait_for 90 "every standby to replay the primary's WAL up to $target" replayed "$port" "$target" || {
    node_sql "$port" "SELECT application_name, state, sent_lsn, replay_lsn, replay_lag FROM pg_stat_replication" >&2 || true
    diagnose
    return 1
  }
  wait_for 30 "every node to be primary or secondary and healthy" all_healthy_and_checked || { diagnose; return 1; }
  # The old primary's pg_rewind in a switchover copies about this much.
  wal=$(node_sql "$port" "SELECT pg_size_pretty(sum(size)) FROM pg_ls_waldir()")
  echo "nodes healthy after ${healthy}s, standbys past the primary's LSN $target after $((SECONDS - started))s (its pg_wal: $wal)" >&2
}

# pg_autoctl waits for a node to report "primary": the new primary once the
# old one has rejoined as its standby (60 s unless told).
switchover() {
  local started=$SECONDS
  if as_postgres pg_autoctl perform switchover --monitor "$(monitor_uri)" --formation default --wait "$wait_seconds"; then
    echo "switchover: a new primary in $((SECONDS - started))s" >&2
    return 0
  fi
  echo "switchover: no new primary reported within ${wait_seconds}s ($((SECONDS - started))s)" >&2
  diagnose
  return 1
}

url() {
  local uri
  uri=$(as_postgres pg_autoctl show uri --pgdata "$dir/monitor" --formation default)
  # The nodes' superuser; a production deployment gives the service a role of its own.
  echo "${uri/postgres:\/\//postgres://postgres@}"
}

start() {
  if [ -e "$dir/monitor" ]; then
    echo "$dir already holds a formation: stop it first" >&2
    exit 1
  fi
  mkdir -p "$dir/xdg/config" "$dir/xdg/data" "$dir/run"
  [ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir"
  echo "$base_port" > "$dir/monitor.port"
  as_postgres pg_autoctl create monitor --pgdata "$dir/monitor" --pgport "$base_port" --hostname 127.0.0.1 \
    --auth trust --no-ssl >> "$dir/monitor.log" 2>&1
  as_postgres pg_autoctl config set --pgdata "$dir/monitor" postgresql.listen_addresses 127.0.0.1 >> "$dir/monitor.log" 2>&1
  run_keeper monitor
  wait_for 30 "the monitor" monitor_sql "SELECT 1 FROM pgautofailover.node LIMIT 0"
  if [ "$fast" = 1 ]; then
    local setting
    for setting in health_check_period=1000 health_check_timeout=1000 health_check_max_retries=1 \
      health_check_retry_delay=500 node_considered_unhealthy_timeout=3000 primary_demote_timeout=5000; do
      monitor_sql "ALTER SYSTEM SET pgautofailover.${setting%%=*} = ${setting#*=}"
    done
    monitor_sql "SELECT pg_reload_conf()" > /dev/null
  fi
  local k name
  for k in $(seq 1 "$nodes"); do
    name=node$k
    as_postgres pg_autoctl create postgres --pgdata "$dir/$name" --pgport $((base_port + k)) --listen 127.0.0.1 \
      --hostname 127.0.0.1 --name "$name" --dbname ledger --monitor "$(monitor_uri)" --auth trust --no-ssl \
      --ssl-mode disable >> "$dir/$name.log" 2>&1
    # pg_autoctl sizes shared_buffers to a quarter of RAM per node; the
    # standbys copy node1's setting.
    if [ "$k" = 1 ]; then
      echo "shared_buffers = '128MB'" >> "$dir/$name/postgresql.auto.conf"
    fi
    run_keeper "$name"
    if [ "$k" = 1 ]; then
      wait_for 60 "$name to run as the primary" node_is "$name" single
      # Every other database closed to the ledger's logins (the standbys
      # replicate it); the monitor's health checks keep theirs. The keeper
      # restarts Postgres once it is initialised: wait for it first.
      wait_for 60 "$name to accept connections" node_sql $((base_port + k)) "SELECT 1"
      as_postgres psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $((base_port + k)) -d ledger \
        < "$here/../postgres/confine.sql" >> "$dir/$name.log" 2>&1
      as_postgres psql -X -q -h 127.0.0.1 -p $((base_port + k)) -d ledger \
        -c "GRANT CONNECT ON DATABASE postgres TO pgautofailover_monitor" >> "$dir/$name.log" 2>&1
    else
      wait_for 90 "$name to join as a standby" node_is "$name" secondary
    fi
  done
  wait_for 60 "every node to be primary or secondary" all_healthy
  url
}

# The node the monitor wants as the primary (a crashed one still reports its old state).
primary() { monitor_sql "SELECT nodename FROM pgautofailover.node WHERE goalstate IN ('primary', 'wait_primary', 'single') ORDER BY nodeid LIMIT 1"; }

crash() {
  local pid
  pid=$(cat "$dir/$node.pid")
  # The postmaster's pid before its keeper dies with it (or not).
  local postmaster
  postmaster=$(head -n 1 "$dir/$node/postmaster.pid" 2> /dev/null || true)
  kill -KILL -- "-$pid" 2> /dev/null || true
  [ -n "$postmaster" ] && kill -KILL "$postmaster" 2> /dev/null || true
  echo "killed $node (keeper group $pid, postmaster ${postmaster:-none})" >&2
}

stop() {
  [ -d "$dir" ] || return 0
  local f pid
  for f in "$dir"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill -TERM -- "-$pid" 2> /dev/null || true
  done
  for _ in $(seq 1 50); do
    pgrep -g "$(cat "$dir"/*.pid 2> /dev/null | paste -sd, -)" > /dev/null 2>&1 || break
    sleep 0.1
  done
  for f in "$dir"/*.pid; do
    [ -e "$f" ] || continue
    kill -KILL -- "-$(cat "$f")" 2> /dev/null || true
  done
  # A postmaster outside the keepers' groups (none expected).
  for f in "$dir"/*/postmaster.pid; do
    [ -e "$f" ] || continue
    kill -KILL "$(head -n 1 "$f")" 2> /dev/null || true
  done
  rm -rf "$dir"
}

case $command in
  start) start ;;
  url) url ;;
  state) as_postgres pg_autoctl show state --monitor "$(monitor_uri)" ;;
  events) diagnose ;;
  primary) primary ;;
  crash) crash ;;
  run) run_keeper "$node" ;;
  wait-healthy) wait_healthy ;;
  wait-caught-up) wait_caught_up ;;
  switchover) switchover ;;
  stop) stop ;;
  *)
    sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
