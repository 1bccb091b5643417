#!/usr/bin/env bash
# bench/cluster.sh: longer runs of the `cluster` tests: the Galera
# node restart and the PostgreSQL failovers (synchronous and asynchronous standby),
# each --runs times, with the load going on for --ops operations after the last
# fault (the short run in the test command uses 150). Prints each run's summary and
# checker table; exits 1 when a run fails.
#
#   bench/cluster.sh [--runs N] [--ops N]
#
# Builds the tests into build/ (scripts/build.sh); each test brings up and removes
# its own servers (scripts/cluster.sh). Run it alone: the servers, the load and idem
# share the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
ops=3000
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --ops) ops=${2:?--ops needs a number}; shift 2 ;;
    *) echo "usage: bench/cluster.sh [--runs N] [--ops N]" >&2; exit 2 ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ && $ops =~ ^[1-9][0-9]*$ ]] || {
  echo "bench/cluster.sh: --runs and --ops must be positive integers" >&2
  exit 2
}
scripts/build.sh idem cluster_galera_test cluster_pg_failover_test >/dev/null
failed=0
for run in $(seq 1 "$runs"); do
  echo "## run $run of $runs (--ops $ops)"
  if ! IDEM_CLUSTER_LOAD_OPS=$ops ctest --test-dir build -L cluster --output-on-failure -V \
      >"build/bench-cluster-$run.log" 2>&1; then
    failed=1
    echo "run $run FAILED; see build/bench-cluster-$run.log"
  fi
  grep -E '^[0-9]+: (galera:|synchronous|asynchronous|claims|completes|certification|failover|\|)' \
    "build/bench-cluster-$run.log" | sed 's/^[0-9]*: //'
done
exit "$failed"
