#!/usr/bin/env bash
# Model-checks the protocol models of docs/model/ with spin (docs/model/README.md).
#
#   docs/model/check.sh [--workdir DIR] verify   every property of every model holds,
#                                                 by an exhaustive search that completed
#   docs/model/check.sh [--workdir DIR] seeded   every seeded bug is found: pan reports
#                                                 an error and writes a trail that replays
#   docs/model/check.sh [--workdir DIR] deep     verify with three guard clients and four
#                                                 step runners (~20 minutes, ~2 GB; not
#                                                 part of the tests)
#
# One line per run: model, -D switches, property, result, states stored, depth
# reached, memory, time. Environment: SPIN and CC (the programs), MODEL_DEPTH (pan's
# depth limit, default 100000) and MEMLIM_MB (its memory bound, default 1024, 4096
# for deep); a search that hits either is reported INCOMPLETE and fails.
# Exit 0 when everything is as expected, 1 when not (a property violated, a search
# that did not complete, a seeded bug not found, spin or a C compiler missing), 2 on
# bad usage.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
workdir=""
usage() { echo "usage: check.sh [--workdir DIR] verify|seeded|deep" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --workdir) [[ $# -ge 2 ]] || usage; workdir=$2; shift 2 ;;
    verify|seeded|deep) mode=$1; shift ;;
    *) usage ;;
  esac
done
[[ -n "${mode:-}" ]] || usage

spin=${SPIN:-spin}
cc=${CC:-cc}
if ! command -v "$spin" >/dev/null 2>&1; then
  echo "check.sh: spin is not installed (apt-get install spin, or scripts/deps.sh)" >&2
  exit 1
fi
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "check.sh: no C compiler '$cc' to build pan with (apt-get install gcc)" >&2
  exit 1
fi
if [[ -z "$workdir" ]]; then
  workdir=$(mktemp -d)
  trap 'rm -rf "$workdir"' EXIT
fi
mkdir -p "$workdir"

# The search: exhaustive (no bitstate), a depth limit far above what the models
# reach (pan says "max search depth too small" if it is hit), and a memory bound
# (pan says "reached -DMEMLIM bound" past it).
depth=${MODEL_DEPTH:-100000}
memlim_mb=${MEMLIM_MB:-1024}

# deep: states compressed (-DCOLLAPSE), a larger hash table and memory bound.
pan_cflags=""
hash_bits=20
if [[ "$mode" == deep ]]; then
  pan_cflags="-DCOLLAPSE"
  hash_bits=24
  memlim_mb=${MEMLIM_MB:-4096}
fi

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# build OPT MODEL NAME DEFINES...: spin -a and cc OPT in $workdir/NAME; prints the
# directory. Small searches use -O0: there the compile costs more than the search.
build() {
  local opt=$1 model=$2 name=$3
  shift 3
  local dir="$workdir/$name"
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$here/$model" "$dir/"
  if ! (cd "$dir" && "$spin" "$@" -a "$model" >spin.out 2>&1); then
    echo "check.sh: spin -a $* $model failed:" >&2
    cat "$dir/spin.out" >&2
    return 1
  fi
  # pan.c is spin's generated code: its warnings are not ours.
  # shellcheck disable=SC2086  # pan_cflags is a list of words on purpose
  if ! (cd "$dir" && "$cc" "$opt" -w -DMEMLIM="$memlim_mb" $pan_cflags -o pan pan.c \
        >cc.out 2>&1); then
    echo "check.sh: $cc pan.c for $model $* failed:" >&2
    cat "$dir/cc.out" >&2
    return 1
  fi
  echo "$dir"
}

# The ltl properties a model declares, in order.
properties() { sed -n 's/^ltl \([A-Za-z_][A-Za-z0-9_]*\) .*/\1/p' "$here/$1"; }

# report DIR PROP LABEL RESULT: one line from pan's output.
report() {
  local out="$1/$2.out"
  local states depth mem secs
  states=$(sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p' "$out" | head -1)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out" | head -1)
  mem=$(sed -n 's/^ *\([0-9.]*\)[[:space:]]*total actual memory usage.*/\1/p' "$out" | head -1)
  secs=$(sed -n 's/^pan: elapsed time \([0-9.e+-]*\) seconds.*/\1/p' "$out" | head -1)
  printf '%-10s %-28s %-14s %-9s states=%s depth=%s memory=%sMB time=%ss\n' \
    "$3" "$4" "$2" "$5" "${states:-?}" "${depth:-?}" "${mem:-?}" "${secs:-?}"
}

# run DIR PROP: ./pan for one ltl property (-a: acceptance cycles too).
run() { (cd "$1" && ./pan -a -m"$depth" -w"$hash_bits" -N "$2" >"$2.out" 2>&1) || true; }

# incomplete OUT: why the search of OUT did not cover the whole state space, or nothing.
incomplete() {
  grep -E "max search depth too small|out of memory|Search not completed|reached -DMEMLIM" "$1" \
    | head -1 || true
}

verify_model() {  # OPT MODEL DEFINES...
  local opt=$1 model=$2
  shift 2
  local name dir prop out why
  name="${model%.pml}${*:+_}$(echo "$*" | tr -d ' -')"
  dir=$(build "$opt" "$model" "$name" "$@") || { fail "$model $*: could not build the verifier"; return; }
  for prop in $(properties "$model"); do
    run "$dir" "$prop"
    out="$dir/$prop.out"
    why=$(incomplete "$out")
    if ! grep -q "errors: 0" "$out"; then
      report "$dir" "$prop" "$model" "$*" VIOLATED
      fail "$model $* property $prop is violated; trail: $dir/$model.trail (replay: cd $dir && spin -t -p -g $* $model)"
    elif [[ -n "$why" ]]; then
      report "$dir" "$prop" "$model" "$*" INCOMPLETE
      fail "$model $* property $prop: the search did not complete ($why)"
    else
      report "$dir" "$prop" "$model" "$*" holds
    fi
  done
}

# seeded MODEL DEFINE PROP: the model with DEFINE must violate PROP, with a trail
# that spin replays.
seeded() {
  local model=$1 define=$2 prop=$3
  local dir out
  dir=$(build -O0 "$model" "${model%.pml}_${define}_$prop" "-D$define") \
    || { fail "$model -D$define: could not build the verifier"; return; }
  run "$dir" "$prop"
  out="$dir/$prop.out"
  if grep -q "errors: 0" "$out" || ! grep -q "errors: [1-9]" "$out"; then
    report "$dir" "$prop" "$model" "-D$define" missed
    fail "$model -D$define: the seeded bug was not found by property $prop"
    return
  fi
  if [[ ! -s "$dir/$model.trail" ]]; then
    report "$dir" "$prop" "$model" "-D$define" no-trail
    fail "$model -D$define: pan reported an error for $prop but wrote no trail"
    return
  fi
  # The trail must replay to the violation: spin -t follows it step by step.
  if ! (cd "$dir" && "$spin" -t -g "-D$define" "$model" >replay.out 2>&1) \
      || ! grep -q "trail ends after" "$dir/replay.out"; then
    report "$dir" "$prop" "$model" "-D$define" bad-trail
    fail "$model -D$define: the trail of $prop does not replay (see $dir/replay.out)"
    return
  fi
  local steps
  steps=$(sed -n 's/.*trail ends after \([0-9]*\) steps.*/\1/p' "$dir/replay.out" | head -1)
  report "$dir" "$prop" "$model" "-D$define" "found(${steps}steps)"
}

case "$mode" in
  verify)
    # guard.pml's searches take a fraction of a second: a faster compile wins.
    verify_model -O0 guard.pml
    verify_model -O1 steps.pml
    ;;
  deep)
    verify_model -O2 guard.pml -DTHREE_CLIENTS
    verify_model -O2 steps.pml -DFOUR_RUNNERS
    ;;
  seeded)
    seeded guard.pml BUG_NO_TOKEN_CHECK fenced
    seeded guard.pml BUG_TAKEOVER_NO_QUERY once
    seeded guard.pml BUG_ATTACH_EARLY attach
    seeded guard.pml NO_LEASE_BOUND once
    seeded steps.pml BUG_RESEND_WITHOUT_QUERY once
    seeded steps.pml BUG_OVERWRITE_SUCCESS no_redo
    seeded steps.pml NO_LEASE_BOUND once
    ;;
esac

if [[ $failures -gt 0 ]]; then
  echo "check.sh: $failures failure(s)" >&2
  exit 1
fi
echo "check.sh: $mode: all as expected"
