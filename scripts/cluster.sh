#!/usr/bin/env bash
# Throwaway replicated database topologies on loopback for the `cluster` tests:
# a three-node MariaDB Galera cluster, and a PostgreSQL 15 primary
# with a streaming standby. Debian packages only (mariadb-server, galera-4, rsync for
# the state transfer, postgresql-15); never systemd, never a fixed port; everything
# under DIR; servers stopped by pid. Shares its helpers with scripts/services.sh.
#
#   scripts/cluster.sh start galera DIR      three nodes (node 1 bootstraps, 2 and 3
#                                            join by rsync SST), database idem_test and
#                                            a user with a random password
#   scripts/cluster.sh kill galera DIR N     SIGKILL node N (1..3)
#   scripts/cluster.sh rejoin galera DIR N   restart node N from its data; it recovers
#                                            its position and catches up (IST, or SST)
#   scripts/cluster.sh start pgstandby DIR   a primary and a standby made by
#                                            pg_basebackup, streaming; synchronous
#                                            (synchronous_standby_names = the standby)
#                                            unless IDEM_CLUSTER_PG_SYNC=0
#   scripts/cluster.sh detach pgstandby DIR  the standby replays what the primary
#                                            committed so far, then stops receiving
#                                            WAL (primary_conninfo = ''), as a
#                                            standby that lags or is cut off would
#   scripts/cluster.sh failover pgstandby DIR  SIGKILL the primary (all its
#                                            processes), promote the standby, wait
#                                            until it takes writes
#   scripts/cluster.sh stop galera|pgstandby DIR   stop all of it (safe to run twice)
#
# DIR/env.sh exports, for galera: IDEM_CLUSTER_GALERA_URL_1..3 (mysql:// URLs of the
# nodes' SQL ports), IDEM_CLUSTER_GALERA_PID_1..3; for pgstandby:
# IDEM_CLUSTER_PG_URL (both hosts, target_session_attrs=read-write: libpq connects
# to whichever takes writes), IDEM_CLUSTER_PG_PRIMARY_URL, IDEM_CLUSTER_PG_STANDBY_URL,
# IDEM_CLUSTER_PG_SYNC (1|0) and the pids. The servers skip fsync (throwaway data):
# a SIGKILLed server loses nothing the kernel holds, which is the fault modelled
# here (a process death, not a power cut). Failures print the log tail, exit 1.
set -euo pipefail

SCRIPT_NAME=cluster.sh
# shellcheck source=scripts/services.sh
source "$(dirname "${BASH_SOURCE[0]}")/services.sh"

readonly GALERA_PROVIDER=/usr/lib/galera/libgalera_smm.so
readonly PG_SYNC=${IDEM_CLUSTER_PG_SYNC:-1}

cluster_usage() {
  cat >&2 <<'EOF'
usage: scripts/cluster.sh start|stop galera|pgstandby DIR
       scripts/cluster.sh kill|rejoin galera DIR N
       scripts/cluster.sh detach|failover pgstandby DIR
EOF
  exit 2
}

# env_value NAME: the value DIR/env.sh exports for NAME ("" when absent).
env_value() {
  [[ -f "$DIR/env.sh" ]] || return 0
  sed -n "s/^export $1=//p" "$DIR/env.sh"
}

# distinct_ports N: N free ports on 127.0.0.1, pairwise different, one a line.
distinct_ports() {
  local n=$1 got=() p
  while ((${#got[@]} < n)); do
    p=$(free_port)
    [[ " ${got[*]} " == *" $p "* ]] || got+=("$p")
  done
  printf '%s\n' "${got[@]}"
}

# ---- Galera ----

# Each node: SQL port, group communication port, IST port, SST port, from
# DIR/galera/ports ("N SQL GCOMM IST SST" lines, chosen once at start).
node_ports() {
  awk -v n="$1" '$1 == n { print $2, $3, $4, $5 }' "$GALERA_BASE/ports"
}

gcomm_address() {
  awk '{ printf "%s127.0.0.1:%s", (NR > 1 ? "," : ""), $3 }' "$GALERA_BASE/ports"
}

# galera_args N: the mariadbd arguments of node N.
galera_args() {
  local n=$1 sql gcomm ist sst
  read -r sql gcomm ist sst < <(node_ports "$n")
  local base=$GALERA_BASE/node$n
  # Failure detection in ~2 s instead of the WAN-friendly defaults (5-15 s): the
  # nodes share one machine, and a killed node must not stall the others' commits
  # for long. pc.recovery off: a restarted node rejoins through the others.
  local provider="gmcast.listen_addr=tcp://127.0.0.1:$gcomm;ist.recv_addr=127.0.0.1:$ist"
  provider+=";gcache.size=64M;pc.recovery=FALSE;evs.keepalive_period=PT0.3S"
  provider+=";evs.inactive_check_period=PT0.5S;evs.suspect_timeout=PT1.5S"
  provider+=";evs.inactive_timeout=PT3S;evs.install_timeout=PT3S"
  printf '%s\n' --no-defaults --datadir="$base/data" --socket="$base/mysqld.sock" \
    --port="$sql" --bind-address=127.0.0.1 --pid-file="$base/mariadbd.pid" \
    --log-error="$base/mariadbd.log" --skip-name-resolve --innodb-buffer-pool-size=32M \
    --innodb-flush-log-at-trx-commit=0 --max-connections=300 --binlog-format=ROW \
    --innodb-autoinc-lock-mode=2 --default-storage-engine=InnoDB \
    --wsrep-on=ON --wsrep-provider="$GALERA_PROVIDER" --wsrep-cluster-name=idem_test \
    --wsrep-cluster-address="gcomm://$(gcomm_address)" \
    --wsrep-node-address="127.0.0.1:$gcomm" --wsrep-node-name="node$n" \
    --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:$sst" \
    --wsrep-provider-options="$provider"
  [[ $(id -u) -eq 0 ]] && echo "--user=$GALERA_USER"
  return 0
}

galera_ready() {
  local state
  state=$(mariadb --no-defaults --socket="$GALERA_BASE/node$1/mysqld.sock" -u root -N -B \
    -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | awk '{ print $2 }')
  [[ "$state" == Synced ]]
}

# start_galera_node N [EXTRA...]: starts node N and waits until it is Synced.
start_galera_node() {
  local n=$1
  shift
  local base=$GALERA_BASE/node$n
  local log=$base/mariadbd.log
  local args
  mapfile -t args < <(galera_args "$n")
  setsid mariadbd "${args[@]}" "$@" </dev/null >>"$log" 2>&1 &
  local launcher=$!
  if ! wait_until "$WAIT_SECONDS" galera_ready "$n"; then
    kill -KILL "$launcher" 2>/dev/null || true
    log_tail "galera node $n" "$log"
    return 1
  fi
}

# A node killed mid-transaction has seqno -1 in grastate.dat; --wsrep-recover reads
# its last committed position from InnoDB, so that it asks for an incremental
# transfer (IST) of what it missed instead of a full copy.
recovered_position() {
  local n=$1 args
  mapfile -t args < <(galera_args "$n")
  local log=$GALERA_BASE/node$n/recover.log
  rm -f "$log"
  mariadbd "${args[@]}" --log-error="$log" --wsrep-recover </dev/null >/dev/null 2>&1 || true
  sed -n 's/.*WSREP: Recovered position: *\([0-9a-f-]*:[-0-9]*\).*/\1/p' "$log" | tail -n 1
}

galera_pid() {
  local f=$GALERA_BASE/node$1/mariadbd.pid
  [[ -f "$f" ]] && cat "$f"
}

# SIGKILL: a graceful leave costs seconds per node, and the data is removed next.
stop_galera() {
  [[ -e "$DIR/galera" ]] || return 0
  galera_base
  local n pid
  for n in 3 2 1; do
    pid=$(galera_pid "$n" || true)
    [[ -n "$pid" ]] && stop_pid "$pid" mariadbd KILL
    pid=$(env_value "IDEM_CLUSTER_GALERA_PID_$n")
    stop_pid "$pid" mariadbd KILL
  done
  remove_owned_dir "$DIR/galera"
}

write_galera_env() {
  local pass=$1 n sql gcomm ist sst
  {
    echo "# Written by scripts/cluster.sh; stop with: scripts/cluster.sh stop galera $DIR"
    echo "export IDEM_CLUSTER_DIR=$DIR"
    for n in 1 2 3; do
      read -r sql gcomm ist sst < <(node_ports "$n")
      echo "export IDEM_CLUSTER_GALERA_URL_$n=mysql://idem:$pass@127.0.0.1:$sql/idem_test"
      echo "export IDEM_CLUSTER_GALERA_PID_$n=$(galera_pid "$n")"
    done
  } >"$DIR/env.sh.tmp"
  mv "$DIR/env.sh.tmp" "$DIR/env.sh"
}

# The OS user of the nodes. Not root: the rsync daemon of a state transfer, started
# as root, would switch to `nobody` and could not write the joiner's data.
galera_user() {
  if [[ $(id -u) -ne 0 ]]; then
    id -un
  elif id mysql >/dev/null 2>&1; then
    echo mysql
  else
    die "no user 'mysql' (created by the mariadb-server package) to run the nodes as"
  fi
}

# Sets GALERA_USER and GALERA_BASE (the real path of DIR/galera).
galera_base() {
  GALERA_USER=$(galera_user)
  GALERA_BASE=$(readlink -f "$DIR/galera")
}

start_galera() {
  local b
  for b in mariadbd mariadb-install-db mariadb rsync wsrep_sst_rsync "$GALERA_PROVIDER"; do
    [[ -e "$b" ]] || command -v "$b" >/dev/null 2>&1 ||
      die "$b not found; install mariadb-server, galera-4 and rsync (apt-get)"
  done
  GALERA_USER=$(galera_user)
  GALERA_BASE=$(make_owned_dir "$DIR/galera" "$GALERA_USER") || return 1
  local ports n
  mapfile -t ports < <(distinct_ports 12)
  local user_flag=()
  [[ $(id -u) -eq 0 ]] && user_flag=(--user="$GALERA_USER")
  for n in 1 2 3; do
    echo "$n ${ports[*]:$(((n - 1) * 4)):4}" >>"$GALERA_BASE/ports"
    as_user "$GALERA_USER" mkdir -p "$GALERA_BASE/node$n/data"
  done
  if ! mariadb-install-db --no-defaults --datadir="$GALERA_BASE/node1/data" "${user_flag[@]}" \
      --auth-root-authentication-method=socket --skip-test-db \
      >"$GALERA_BASE/node1/install.log" 2>&1; then
    log_tail "mariadb-install-db" "$GALERA_BASE/node1/install.log"
    return 1
  fi
  start_galera_node 1 --wsrep-new-cluster || return 1
  local pass
  pass=$(random_password)
  if ! mariadb --no-defaults --socket="$GALERA_BASE/node1/mysqld.sock" -u root \
      >"$GALERA_BASE/setup.log" 2>&1 <<SQL; then
CREATE DATABASE idem_test;
CREATE USER 'idem'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL PRIVILEGES ON *.* TO 'idem'@'127.0.0.1';
SQL
    log_tail "galera setup" "$GALERA_BASE/setup.log"
    return 1
  fi
  # Joined one after the other: each takes a full copy (rsync SST) from a donor,
  # which is blocked while it copies.
  start_galera_node 2 || return 1
  start_galera_node 3 || return 1
  write_galera_env "$pass"
}

cmd_kill_galera() {
  local n=$1 pid
  galera_base
  pid=$(galera_pid "$n" || true)
  is_our_process "$pid" mariadbd || die "galera node $n is not running"
  kill -KILL "$pid"
  wait_until 10 bash -c "! kill -0 $pid" || die "node $n (pid $pid) survived SIGKILL"
  rm -f "$GALERA_BASE/node$n/mariadbd.pid"
  echo "$SCRIPT_NAME: killed galera node $n (pid $pid)" >&2
}

cmd_rejoin_galera() {
  local n=$1 pid position
  galera_base
  pid=$(galera_pid "$n" || true)
  ! is_our_process "$pid" mariadbd || die "galera node $n is running (pid $pid)"
  position=$(recovered_position "$n")
  if [[ -n "$position" ]]; then
    start_galera_node "$n" --wsrep-start-position="$position" || exit 1
  else
    start_galera_node "$n" || exit 1
  fi
  local pass
  pass=$(env_value IDEM_CLUSTER_GALERA_URL_1 | sed 's|^mysql://idem:\([^@]*\)@.*|\1|')
  write_galera_env "$pass"
  echo "$SCRIPT_NAME: galera node $n rejoined (pid $(galera_pid "$n"), from ${position:-a full copy})" >&2
}

# ---- PostgreSQL primary + standby ----

pg_sql() {  # pg_sql primary|standby SQL: runs SQL as the superuser over the socket
  local which=$1 port
  port=$(cat "$PGS_BASE/$which.port")
  as_pg_user psql -X -q -At -v ON_ERROR_STOP=1 -h "$PGS_BASE" -p "$port" -U postgres \
    -d postgres -c "$2"
}

# sql_answers primary|standby SQL WANT: true when SQL answers exactly WANT.
sql_answers() {
  [[ "$(pg_sql "$1" "$2" 2>/dev/null)" == "$3" ]]
}

# standby_is sync|async: the primary streams to the standby, in that mode.
standby_is() {
  sql_answers primary "SELECT sync_state FROM pg_stat_replication WHERE \
application_name = 'standby1' AND state = 'streaming'" "$1"
}

pg_pid() {
  local f=$PGS_BASE/$1/postmaster.pid
  [[ -f "$f" ]] && head -n 1 "$f"
}

# pg_start primary|standby: starts the server and waits until it answers.
pg_start() {
  local which=$1
  if ! as_pg_user "$PG_BIN/pg_ctl" -D "$PGS_BASE/$which" -l "$PGS_BASE/$which.log" -w \
      -t "$WAIT_SECONDS" start >"$PGS_BASE/$which.pg_ctl.log" 2>&1; then
    cat "$PGS_BASE/$which.pg_ctl.log" >&2
    log_tail "postgres $which" "$PGS_BASE/$which.log"
    return 1
  fi
}

# The settings both servers share; the standby's port and its connection to the
# primary come on top. The promoted standby has no standby of its own, so it must
# not wait for one (synchronous_standby_names = '' there).
pg_conf() {
  local port=$1
  cat <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$PGS_BASE'
max_connections = 300
shared_buffers = 32MB
fsync = off
full_page_writes = off
wal_level = replica
max_wal_senders = 4
wal_keep_size = 64MB
hot_standby = on
synchronous_commit = on
synchronous_standby_names = ''
EOF
}

start_pgstandby() {
  local b
  for b in initdb pg_ctl postgres pg_basebackup psql; do
    [[ -x "$PG_BIN/$b" ]] || command -v "$b" >/dev/null 2>&1 ||
      die "$PG_BIN/$b not found; install postgresql-15 (apt-get)"
  done
  [[ $PG_SYNC == 0 || $PG_SYNC == 1 ]] || die "IDEM_CLUSTER_PG_SYNC must be 0 or 1, not '$PG_SYNC'"
  PG_USER=$(pg_os_user)
  PGS_BASE=$(make_pg_base "$DIR/pgstandby") || return 1
  local ports
  mapfile -t ports < <(distinct_ports 2)
  echo "${ports[0]}" >"$PGS_BASE/primary.port"
  echo "${ports[1]}" >"$PGS_BASE/standby.port"
  if ! as_pg_user "$PG_BIN/initdb" -N -D "$PGS_BASE/primary" -U postgres --auth-local=trust \
      --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$PGS_BASE/initdb.log" 2>&1; then
    log_tail "initdb" "$PGS_BASE/initdb.log"
    return 1
  fi
  # Asynchronous until the standby streams: a synchronous primary without its
  # standby would wait forever at the first commit.
  pg_conf "${ports[0]}" | as_pg_user tee -a "$PGS_BASE/primary/postgresql.conf" \
    >/dev/null
  pg_start primary || return 1
  local pass repl_pass
  pass=$(random_password)
  repl_pass=$(random_password)
  pg_sql primary "CREATE ROLE repl REPLICATION LOGIN PASSWORD '$repl_pass'" >/dev/null &&
    pg_sql primary "CREATE ROLE idem LOGIN CREATEDB PASSWORD '$pass'" >/dev/null &&
    pg_sql primary "CREATE DATABASE idem_test OWNER idem" >/dev/null || return 1
  # The replication password in a passfile (mode 600), never on a command line.
  echo "127.0.0.1:${ports[0]}:*:repl:$repl_pass" | as_pg_user tee "$PGS_BASE/pgpass" >/dev/null
  as_pg_user chmod 600 "$PGS_BASE/pgpass"
  if ! as_pg_user env PGPASSFILE="$PGS_BASE/pgpass" "$PG_BIN/pg_basebackup" -h 127.0.0.1 \
      -p "${ports[0]}" -U repl -D "$PGS_BASE/standby" -X stream -c fast -N \
      >"$PGS_BASE/basebackup.log" 2>&1; then
    log_tail "pg_basebackup" "$PGS_BASE/basebackup.log"
    return 1
  fi
  {
    pg_conf "${ports[1]}"
    echo "primary_conninfo = 'host=127.0.0.1 port=${ports[0]} user=repl" \
      "passfile=$PGS_BASE/pgpass application_name=standby1'"
  } | as_pg_user tee -a "$PGS_BASE/standby/postgresql.conf" >/dev/null
  as_pg_user touch "$PGS_BASE/standby/standby.signal"
  pg_start standby || return 1
  # Streaming, and (when synchronous) counted as the synchronous standby.
  local want=async
  if [[ $PG_SYNC == 1 ]]; then
    want=sync
    pg_sql primary "ALTER SYSTEM SET synchronous_standby_names = 'standby1'" >/dev/null &&
      pg_sql primary "SELECT pg_reload_conf()" >/dev/null || return 1
  fi
  if ! wait_until "$WAIT_SECONDS" standby_is "$want"; then
    log_tail "the standby's replication ($want)" "$PGS_BASE/standby.log"
    return 1
  fi
  local multi="postgres://idem:$pass@127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}/idem_test"
  {
    echo "# Written by scripts/cluster.sh; stop with: scripts/cluster.sh stop pgstandby $DIR"
    echo "export IDEM_CLUSTER_DIR=$DIR"
    echo "export IDEM_CLUSTER_PG_URL=$multi?target_session_attrs=read-write"
    echo "export IDEM_CLUSTER_PG_PRIMARY_URL=postgres://idem:$pass@127.0.0.1:${ports[0]}/idem_test"
    echo "export IDEM_CLUSTER_PG_STANDBY_URL=postgres://idem:$pass@127.0.0.1:${ports[1]}/idem_test"
    echo "export IDEM_CLUSTER_PG_SYNC=$PG_SYNC"
    echo "export IDEM_CLUSTER_PG_PRIMARY_PID=$(pg_pid primary)"
    echo "export IDEM_CLUSTER_PG_STANDBY_PID=$(pg_pid standby)"
  } >"$DIR/env.sh.tmp"
  mv "$DIR/env.sh.tmp" "$DIR/env.sh"
}

pgs_base_or_die() {
  [[ -e "$DIR/pgstandby" ]] || die "no pgstandby under $DIR (run start first)"
  PG_USER=$(pg_os_user)
  PGS_BASE=$(readlink -f "$DIR/pgstandby")
}

cmd_detach_pgstandby() {
  pgs_base_or_die
  # First everything committed so far reaches the standby (so that what is lost
  # afterwards is exactly what was committed after this point), then the cut.
  local lsn
  lsn=$(pg_sql primary "SELECT pg_current_wal_lsn()")
  wait_until 20 sql_answers standby "SELECT pg_last_wal_replay_lsn() >= '$lsn'" t ||
    die "the standby did not replay up to $lsn"
  pg_sql standby "ALTER SYSTEM SET primary_conninfo = ''" >/dev/null
  pg_sql standby "SELECT pg_reload_conf()" >/dev/null
  wait_until 20 sql_answers standby "SELECT count(*) FROM pg_stat_wal_receiver" 0 ||
    die "the standby's WAL receiver did not stop"
  echo "$SCRIPT_NAME: the standby no longer receives WAL" >&2
}

# Every process of the server, so that no backend outlives its postmaster.
kill_server_tree() {
  local pid=$1 child
  for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
    kill -KILL "$child" 2>/dev/null || true
  done
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_failover_pgstandby() {
  pgs_base_or_die
  local pid
  pid=$(pg_pid primary || true)
  is_our_process "$pid" postgres || die "the primary is not running"
  kill -STOP "$pid"  # no new backends while its children are killed
  kill_server_tree "$pid"
  wait_until 10 bash -c "! kill -0 $pid" || die "the primary (pid $pid) survived SIGKILL"
  if ! as_pg_user "$PG_BIN/pg_ctl" -D "$PGS_BASE/standby" -w -t "$WAIT_SECONDS" promote \
      >"$PGS_BASE/promote.log" 2>&1; then
    cat "$PGS_BASE/promote.log" >&2
    log_tail "promotion" "$PGS_BASE/standby.log"
    exit 1
  fi
  wait_until "$WAIT_SECONDS" sql_answers standby "SELECT pg_is_in_recovery()" f ||
    die "the promoted standby still is in recovery"
  echo "$SCRIPT_NAME: killed the primary (pid $pid); the standby is the primary now" >&2
}

stop_pgstandby() {
  [[ -e "$DIR/pgstandby" ]] || return 0
  PG_USER=$(pg_os_user)
  PGS_BASE=$(readlink -f "$DIR/pgstandby")
  # SIGQUIT, PostgreSQL's immediate shutdown: no shutdown checkpoint, no waiting
  # for the standby; the data is removed next anyway.
  local which pid
  for which in primary standby; do
    pid=$(pg_pid "$which" || true)
    [[ -n "$pid" ]] && stop_pid "$pid" postgres QUIT
  done
  stop_pid "$(env_value IDEM_CLUSTER_PG_PRIMARY_PID)" postgres QUIT
  stop_pid "$(env_value IDEM_CLUSTER_PG_STANDBY_PID)" postgres QUIT
  remove_owned_dir "$DIR/pgstandby"
}

cluster_stop() {
  case "$1" in
    galera) stop_galera ;;
    pgstandby) stop_pgstandby ;;
  esac
  rm -f "$DIR/env.sh"
}

cluster_start() {
  local what=$1
  if [[ -d "$DIR" ]]; then
    cluster_stop "$what"
    rm -rf "$DIR"
  fi
  mkdir -p "$DIR"
  chmod 755 "$DIR"
  if ! "start_$what"; then
    echo "$SCRIPT_NAME: start failed; stopping what was started under $DIR" >&2
    cluster_stop "$what"
    exit 1
  fi
  echo "$SCRIPT_NAME: $what started; source $DIR/env.sh" >&2
  grep -E '_URL[_0-9]*=|_PID' "$DIR/env.sh" | sed 's/:[^:@/]*@/:***@/' >&2
}

(($# >= 3)) || cluster_usage
command=$1 what=$2
DIR=$(mkdir -p "$(dirname "$3")" && cd "$(dirname "$3")" && pwd)/$(basename "$3")
[[ "$DIR" != "/" && "$(basename "$DIR")" != ".." && "$(basename "$DIR")" != "." ]] ||
  die "refusing to use '$3' as the cluster directory"
node=${4:-}
case "$command/$what" in
  start/galera | start/pgstandby) (($# == 3)) || cluster_usage; cluster_start "$what" ;;
  stop/galera | stop/pgstandby)
    (($# == 3)) || cluster_usage
    cluster_stop "$what"
    echo "$SCRIPT_NAME: stopped $what under $DIR" >&2
    ;;
  kill/galera | rejoin/galera)
    [[ $# -eq 4 && "$node" =~ ^[123]$ ]] || cluster_usage
    "cmd_${command}_galera" "$node"
    ;;
  detach/pgstandby | failover/pgstandby) (($# == 3)) || cluster_usage; "cmd_${command}_pgstandby" ;;
  *) cluster_usage ;;
esac
