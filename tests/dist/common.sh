# Sourced by the dist tests: a scratch directory ($work) removed at exit, a
# background process ($pid) stopped at exit, fail, and wait_listening.
work=$(mktemp -d)
pid=
cleanup() {
  if [[ -n "$pid" ]]; then
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# wait_listening STDOUT_FILE STDERR_FILE TENTHS: waits up to TENTHS/10 s for the
# "listening on" line of $pid, failing with its stderr if it exits first.
wait_listening() {
  local out=$1 err=$2 tenths=$3 i
  for ((i = 0; i < tenths; i++)); do
    grep -q '^listening on' "$out" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { tail -30 "$err" >&2; fail "exited before listening"; }
    sleep 0.1
  done
  fail "no 'listening on' line after $((tenths / 10)) s"
}
