#!/usr/bin/env bash
# Throwaway test servers on loopback: PostgreSQL 15, MariaDB 10.11 and Redis 7 from
# the Debian packages, with all their data under one directory. Never via systemd,
# never on a fixed port.
#
#   scripts/services.sh start DIR   wipe DIR, start the three servers on free ports on
#                                   127.0.0.1, create database idem_test and a user with
#                                   a random password, write DIR/env.sh
#   scripts/services.sh stop DIR    stop what `start DIR` started (safe to run twice)
#
# DIR/env.sh exports IDEM_TEST_POSTGRES_URL, IDEM_TEST_MYSQL_URL, IDEM_TEST_REDIS_URL,
# the servers' pids (IDEM_TEST_*_PID) and IDEM_SERVICES_DIR; `source` it before ctest.
# The test users may create databases/schemas (tests isolate themselves that way).
# Only servers whose binaries are installed are started unless IDEM_SERVICES lists
# them (default: "postgres mysql redis"); a listed server that is missing is an error.
# The servers skip fsync (throwaway data, fast tests) unless IDEM_SERVICES_DURABLE=1,
# which keeps the servers' durable defaults (PostgreSQL fsync and synchronous_commit
# on, InnoDB flushing its log at every commit): what benchmarks of commit cost need.
#
# PostgreSQL refuses to run as root: as root it runs as the user `postgres` (created
# by the Debian package; `idem-pg` is created when that user is missing); as
# another user everything runs as that user. Failures print the server's log tail
# and exit non-zero.
set -euo pipefail

readonly PG_BIN=/usr/lib/postgresql/15/bin
readonly WAIT_SECONDS=${IDEM_SERVICES_WAIT:-60}
readonly STOP_SECONDS=20
readonly DURABLE=${IDEM_SERVICES_DURABLE:-0}
[[ $DURABLE == 0 || $DURABLE == 1 ]] || {
  echo "services.sh: IDEM_SERVICES_DURABLE must be 0 or 1, not '$DURABLE'" >&2
  exit 2
}

# Scripts that source this file (scripts/cluster.sh) set SCRIPT_NAME for messages.
SCRIPT_NAME=${SCRIPT_NAME:-services.sh}

die() {
  echo "$SCRIPT_NAME: $*" >&2
  exit 1
}

usage() {
  echo "usage: scripts/services.sh start|stop DIR" >&2
  exit 2
}

# Prints a TCP port on 127.0.0.1 that nothing listens on right now. The kernel picks
# it (bind to port 0); there is a small window before the server binds it, which
# start_with_retry covers.
free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
    return
  fi
  # No python3: probe random high ports until one refuses connections.
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  die "no free port found on 127.0.0.1"
}

random_password() {
  head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'
}

# True when pid $1 is alive and its command line mentions $2 (guards against a
# recycled pid belonging to something else).
is_our_process() {
  local pid=$1 name=$2
  [[ -n "$pid" && "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name"
}

# stop_pid PID NAME SIGNAL: graceful signal, then SIGKILL after STOP_SECONDS.
stop_pid() {
  local pid=$1 name=$2 sig=$3
  is_our_process "$pid" "$name" || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_SECONDS))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "$SCRIPT_NAME: $name (pid $pid) did not stop within ${STOP_SECONDS}s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
  done
}

log_tail() {
  local what=$1 log=$2
  echo "$SCRIPT_NAME: $what did not start; last lines of $log:" >&2
  if [[ -f "$log" ]]; then tail -n 40 "$log" >&2; else echo "  (no log written)" >&2; fi
}

# wait_until SECONDS CMD...: runs CMD every 0.2 s until it succeeds or time runs out.
wait_until() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

wanted() {
  [[ " ${IDEM_SERVICES:-postgres mysql redis} " == *" $1 "* ]]
}

# ---- PostgreSQL ----

pg_os_user() {
  if [[ $(id -u) -ne 0 ]]; then
    id -un
  elif id postgres >/dev/null 2>&1; then
    echo postgres
  else
    if ! id idem-pg >/dev/null 2>&1; then
      useradd --system --no-create-home --shell /usr/sbin/nologin idem-pg
    fi
    echo idem-pg
  fi
}

as_pg_user() {
  as_user "$PG_USER" "$@"
}

# Removes DIR/postgres, and the private directory it links to (see make_pg_base).
remove_postgres_dir() {
  remove_owned_dir "$DIR/postgres"
}

# remove_owned_dir LINK: removes LINK and the private directory it may link to.
remove_owned_dir() {
  local link=$1
  if [[ -L "$link" ]]; then
    rm -rf "$(readlink -f "$link")"
  fi
  rm -rf "$link"
}

# make_pg_base LINK: creates the directory LINK for a PostgreSQL data directory
# writable by PG_USER and prints its real path (see make_owned_dir).
make_pg_base() {
  make_owned_dir "$1" "$PG_USER"
}

# as_user USER CMD...: CMD as USER (as root), or as ourselves.
as_user() {
  local user=$1
  shift
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u "$user" -- "$@"
  else
    "$@"
  fi
}

# make_owned_dir LINK USER: creates the directory LINK, owned by (as root) and
# writable by USER, and prints its real path: LINK itself, or a private directory
# under /tmp that LINK links to when USER cannot reach DIR (a checkout under /root,
# mode 700, on a fresh Debian), so that everything of a run is still found under
# DIR and removed with it. Remove it with remove_owned_dir LINK.
make_owned_dir() {
  local base=$1 user=$2
  remove_owned_dir "$base"
  mkdir -p "$base"
  [[ $(id -u) -eq 0 ]] && chown "$user" "$base"
  chmod 700 "$base"
  if ! as_user "$user" test -w "$base"; then
    rm -rf "$base"
    local private
    private=$(mktemp -d /tmp/idem-data.XXXXXX)
    [[ $(id -u) -eq 0 ]] && chown "$user" "$private"
    chmod 700 "$private"
    ln -s "$private" "$base"
    as_user "$user" test -w "$private" || die "user $user cannot write $private"
    echo "$SCRIPT_NAME: user $user cannot reach $DIR; its data is in $private" \
      "(linked from $base)" >&2
  fi
  readlink -f "$base"
}

start_postgres() {
  local port=$1
  PG_BASE=$(make_pg_base "$DIR/postgres") || return 1
  local log=$PG_BASE/postgres.log
  if ! as_pg_user "$PG_BIN/initdb" -D "$PG_BASE/data" -U postgres --auth-local=trust \
      --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$PG_BASE/initdb.log" 2>&1; then
    log_tail "initdb" "$PG_BASE/initdb.log"
    return 1
  fi
  # Throwaway data: durability off for speed (unless IDEM_SERVICES_DURABLE=1);
  # enough connections for parallel tests that each open pools.
  local durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  [[ $DURABLE == 1 ]] && durability=""
  if ! as_pg_user "$PG_BIN/pg_ctl" -D "$PG_BASE/data" -l "$log" -w -t "$WAIT_SECONDS" start -o \
      "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$PG_BASE \
       -c max_connections=300 -c shared_buffers=32MB $durability" >"$PG_BASE/pg_ctl.log" 2>&1; then
    cat "$PG_BASE/pg_ctl.log" >&2
    log_tail "postgres" "$log"
    return 1
  fi
  if ! wait_until "$WAIT_SECONDS" "$PG_BIN/pg_isready" -h 127.0.0.1 -p "$port" -t 1; then
    log_tail "postgres (pg_isready)" "$log"
    return 1
  fi
  PG_PID=$(head -n 1 "$PG_BASE/data/postmaster.pid")
  PG_PORT=$port
}

setup_postgres() {
  local pass
  pass=$(random_password)
  if ! as_pg_user psql -X -q -v ON_ERROR_STOP=1 -h "$PG_BASE" -p "$PG_PORT" -U postgres \
      -d postgres >"$PG_BASE/setup.log" 2>&1 <<SQL; then
CREATE ROLE idem LOGIN CREATEDB PASSWORD '$pass';
CREATE DATABASE idem_test OWNER idem;
-- bench/claims.sh has PostgreSQL write a checkpoint before each cell.
GRANT pg_checkpoint TO idem;
SQL
    log_tail "postgres setup" "$PG_BASE/setup.log"
    return 1
  fi
  POSTGRES_URL="postgres://idem:$pass@127.0.0.1:$PG_PORT/idem_test"
}

# ---- MariaDB ----

# mariadb-install-db gives socket (unix_socket) access to root and to the OS user
# running it.
mysql_admin() {
  if [[ $(id -u) -eq 0 ]]; then echo root; else id -un; fi
}

start_mysql() {
  local port=$1
  local base=$DIR/mysql
  local log=$base/mariadbd.log
  rm -rf "$base"
  mkdir -p "$base"
  local user_flag=()
  [[ $(id -u) -eq 0 ]] && user_flag=(--user=root)
  if ! mariadb-install-db --no-defaults --datadir="$base/data" "${user_flag[@]}" \
      --auth-root-authentication-method=socket --skip-test-db >"$base/install.log" 2>&1; then
    log_tail "mariadb-install-db" "$base/install.log"
    return 1
  fi
  local flush=0  # the log is written at commit and flushed once a second
  [[ $DURABLE == 1 ]] && flush=1
  # stdin/stdout closed so the caller's pipes do not wait on the server.
  setsid mariadbd --no-defaults --datadir="$base/data" --socket="$base/mysqld.sock" \
    --port="$port" --bind-address=127.0.0.1 "${user_flag[@]}" --pid-file="$base/mariadbd.pid" \
    --log-error="$log" --skip-name-resolve --innodb-buffer-pool-size=64M \
    --innodb-flush-log-at-trx-commit=$flush --max-connections=300 </dev/null >>"$log" 2>&1 &
  local launcher=$!
  if ! wait_until "$WAIT_SECONDS" mariadb-admin --no-defaults --socket="$base/mysqld.sock" \
      -u "$(mysql_admin)" ping; then
    kill -KILL "$launcher" 2>/dev/null || true
    log_tail "mariadbd" "$log"
    return 1
  fi
  MYSQL_PID=$(cat "$base/mariadbd.pid")
  MYSQL_PORT=$port
}

setup_mysql() {
  local pass
  pass=$(random_password)
  # ALL ON *.* (without GRANT OPTION): tests create a database per test. A second
  # user, idem_noroutine (same password), may do all a store needs but CREATE
  # ROUTINE: tests of the store without its procedures (docs/operations.md §3).
  if ! mariadb --no-defaults --socket="$DIR/mysql/mysqld.sock" -u "$(mysql_admin)" \
      >"$DIR/mysql/setup.log" 2>&1 <<SQL; then
CREATE DATABASE idem_test;
CREATE USER 'idem'@'127.0.0.1' IDENTIFIED BY '$pass';
CREATE USER 'idem'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL PRIVILEGES ON *.* TO 'idem'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'idem'@'localhost';
CREATE USER 'idem_noroutine'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, EXECUTE, LOCK TABLES,
  CREATE TEMPORARY TABLES ON *.* TO 'idem_noroutine'@'127.0.0.1';
SQL
    log_tail "mariadb setup" "$DIR/mysql/setup.log"
    return 1
  fi
  MYSQL_URL="mysql://idem:$pass@127.0.0.1:$MYSQL_PORT/idem_test"
}

# ---- Redis ----

start_redis() {
  local port=$1
  local base=$DIR/redis
  local log=$base/redis.log
  rm -rf "$base"
  mkdir -p "$base"
  if ! redis-server --port "$port" --bind 127.0.0.1 --dir "$base" --daemonize yes \
      --pidfile "$base/redis.pid" --logfile "$log" --save "" --appendonly no \
      </dev/null >"$base/launch.log" 2>&1; then
    cat "$base/launch.log" >&2
    log_tail "redis-server" "$log"
    return 1
  fi
  if ! wait_until "$WAIT_SECONDS" bash -c "[[ \$(redis-cli -h 127.0.0.1 -p $port ping) == PONG ]]"; then
    log_tail "redis-server" "$log"
    return 1
  fi
  wait_until 5 test -s "$base/redis.pid" || true
  REDIS_PID=$(cat "$base/redis.pid")
  REDIS_PORT=$port
}

# start_with_retry NAME: starts NAME on a fresh free port; a lost race for the port
# (another process bound it first) is retried with another port.
start_with_retry() {
  local name=$1 attempt
  for attempt in 1 2 3; do
    if "start_$name" "$(free_port)"; then
      return 0
    fi
    if ! grep -qsiE "address already in use|could not bind|Can't start server" \
        "$DIR/$name"/*.log; then
      return 1
    fi
    echo "services.sh: $name lost its port to another process; trying another" >&2
    stop_all_recorded
  done
  return 1
}

# Stops every server whose pid file lies under DIR (also those of a failed or
# earlier start, which never reached env.sh).
stop_all_recorded() {
  local pid
  if [[ -f "$DIR/postgres/data/postmaster.pid" ]]; then
    pid=$(head -n 1 "$DIR/postgres/data/postmaster.pid")
    # SIGINT is PostgreSQL's "fast" shutdown: it does not wait for clients to leave.
    stop_pid "$pid" postgres INT
  fi
  if [[ -f "$DIR/mysql/mariadbd.pid" ]]; then
    stop_pid "$(cat "$DIR/mysql/mariadbd.pid")" mariadbd TERM
  fi
  if [[ -f "$DIR/redis/redis.pid" ]]; then
    stop_pid "$(cat "$DIR/redis/redis.pid")" redis-server TERM
  fi
  # Pids that env.sh recorded but whose pid files are gone.
  if [[ -f "$DIR/env.sh" ]]; then
    local pg my rd
    pg=$(sed -n 's/^export IDEM_TEST_POSTGRES_PID=//p' "$DIR/env.sh")
    my=$(sed -n 's/^export IDEM_TEST_MYSQL_PID=//p' "$DIR/env.sh")
    rd=$(sed -n 's/^export IDEM_TEST_REDIS_PID=//p' "$DIR/env.sh")
    stop_pid "$pg" postgres INT
    stop_pid "$my" mariadbd TERM
    stop_pid "$rd" redis-server TERM
  fi
}

# A failed start leaves nothing running behind.
fail_start() {
  echo "services.sh: start failed; stopping what was started under $DIR" >&2
  stop_all_recorded
  exit 1
}

cmd_stop() {
  if [[ ! -d "$DIR" ]]; then
    echo "services.sh: $DIR does not exist; nothing to stop" >&2
    return 0
  fi
  stop_all_recorded
  remove_postgres_dir
  rm -f "$DIR/env.sh"
  echo "services.sh: stopped services under $DIR" >&2
}

cmd_start() {
  local need=()
  wanted postgres && need+=("$PG_BIN/initdb" "$PG_BIN/pg_ctl" "$PG_BIN/postgres" psql)
  wanted mysql && need+=(mariadb-install-db mariadbd mariadb-admin mariadb)
  wanted redis && need+=(redis-server redis-cli)
  local b
  for b in "${need[@]}"; do
    command -v "$b" >/dev/null 2>&1 ||
      die "$b not found; install postgresql-15, mariadb-server and redis-server (apt-get)"
  done

  # A stale DIR (a crashed or unfinished run) is stopped and wiped first.
  if [[ -d "$DIR" ]]; then
    stop_all_recorded
    remove_postgres_dir
    rm -rf "$DIR"
  fi
  mkdir -p "$DIR"
  chmod 755 "$DIR"

  PG_PID="" MYSQL_PID="" REDIS_PID=""
  POSTGRES_URL="" MYSQL_URL="" REDIS_URL=""
  if wanted postgres; then
    PG_USER=$(pg_os_user)
    start_with_retry postgres || fail_start
    setup_postgres || fail_start
  fi
  if wanted mysql; then
    start_with_retry mysql || fail_start
    setup_mysql || fail_start
  fi
  if wanted redis; then
    start_with_retry redis || fail_start
    REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
  fi

  {
    echo "# Written by scripts/services.sh start; stop with: scripts/services.sh stop $DIR"
    echo "export IDEM_SERVICES_DIR=$DIR"
    [[ -n "$POSTGRES_URL" ]] && echo "export IDEM_TEST_POSTGRES_URL=$POSTGRES_URL"
    [[ -n "$PG_PID" ]] && echo "export IDEM_TEST_POSTGRES_PID=$PG_PID"
    [[ -n "$MYSQL_URL" ]] && echo "export IDEM_TEST_MYSQL_URL=$MYSQL_URL"
    [[ -n "$MYSQL_PID" ]] && echo "export IDEM_TEST_MYSQL_PID=$MYSQL_PID"
    [[ -n "$REDIS_URL" ]] && echo "export IDEM_TEST_REDIS_URL=$REDIS_URL"
    [[ -n "$REDIS_PID" ]] && echo "export IDEM_TEST_REDIS_PID=$REDIS_PID"
  } >"$DIR/env.sh.tmp"
  mv "$DIR/env.sh.tmp" "$DIR/env.sh"
  echo "services.sh: started; source $DIR/env.sh" >&2
  grep -E '_URL=|_PID=' "$DIR/env.sh" | sed 's/:[^:@/]*@/:***@/' >&2
}

# Sourced (by scripts/cluster.sh): only the functions above.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

[[ $# -eq 2 ]] || usage
command=$1
[[ -n "$2" ]] || usage
mkdir -p "$(dirname "$2")"
DIR=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[[ "$DIR" != "/" && "$(basename "$DIR")" != ".." && "$(basename "$DIR")" != "." ]] ||
  die "refusing to use '$2' as the services directory"
case "$command" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  *) usage ;;
esac
