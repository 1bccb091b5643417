#!/usr/bin/env bash
# bench/recon.sh: `idem recon` against the Unix baseline a finance engineer would
# script, on the same data in one run (a million rows by default):
#   - generates an upstream statement (CSV, rows in random key order) and a ledger of
#     the same keys with a few of every difference (0.1% missing locally, 0.1% only
#     local, 0.1% amount changed, 0.1% stuck PENDING, 0.05% duplicated), loaded
#     into a SQLite ledger with a unique index on the key, and exported as CSV;
#   - times `LC_ALL=C sort` of both CSV exports + `LC_ALL=C join -a1 -a2` (which only
#     pairs the rows: classifying them would take more), and
#   - `idem recon --dry-run` on the statement and the SQLite ledger (reading,
#     normalising, sorting, classifying), with its peak RSS.
# Prints one table (wall and CPU seconds) and `ratio idem/sort+join = X.XX`.
#
#   bench/recon.sh [--rows N] [--memory-mib M]     (default 1,000,000 rows)
#
# Works in build/bench-recon/ (generated files are kept for a rerun with the same
# N). Run it alone: the machine's two cores are shared by everything running.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rows=1000000
memory=256
while [[ $# -gt 0 ]]; do
  case $1 in
    --rows) rows=$2; shift 2 ;;
    --memory-mib) memory=$2; shift 2 ;;
    *) echo "recon.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
command -v sqlite3 >/dev/null || { echo "recon.sh: needs sqlite3 (apt-get install sqlite3)" >&2; exit 1; }
[[ -x build/src/cli/idem ]] || scripts/build.sh idem
idem=$root/build/src/cli/idem
work=$root/build/bench-recon/$rows
mkdir -p "$work"
cd "$work"

if [[ ! -f ledger.db ]]; then
  echo "generating $rows rows in $work" >&2
  /usr/bin/python3 - "$rows" <<'PY'
import random, sys
n = int(sys.argv[1])
rnd = random.Random(13)
order = list(range(n))
rnd.shuffle(order)
with open("upstream.csv", "w") as up, open("ledger.csv", "w") as lo:
    up.write("out_trade_no,total_fee,fee_type,trade_state,trade_time\n")
    for i in order:
        key = "R-%010d" % i
        fen = 100 + (i * 7919) % 100000
        t = "2024-06-18 %02d:%02d:%02d" % (i % 24, (i // 24) % 60, (i // 1440) % 60)
        up.write("%s,%d,CNY,SUCCESS,%s\n" % (key, fen, t))
        r = i % 2000
        if r < 2:
            continue                                   # missing_local
        amount = "%d.%02d" % (fen // 100, fen % 100)
        status = "PAID"
        if r < 4:
            amount = "%d.%02d" % (fen // 100 + 1, fen % 100)   # amount_mismatch
        elif r < 6:
            status = "PENDING"                         # status_mismatch
        lo.write("%s,%s,CNY,%s,%s\n" % (key, amount, status, t))
        if r == 6:
            lo.write("%s,%s,CNY,%s,%s\n" % (key, amount, status, t))  # duplicate
        if r < 2 + 2:
            pass
    for i in range(n // 1000):                         # missing_upstream
        lo.write("L-%010d,1.00,CNY,PAID,2024-06-18 12:00:00\n" % i)
PY
  sqlite3 ledger.db <<'SQL'
CREATE TABLE ledger (order_no TEXT NOT NULL, amount TEXT NOT NULL, currency TEXT NOT NULL,
                     status TEXT NOT NULL, created_at TEXT NOT NULL);
.mode csv
.import ledger.csv ledger
CREATE INDEX ledger_order_no ON ledger (order_no);
SQL
fi

# Warm the page cache for both contenders alike.
cat upstream.csv ledger.csv ledger.db > /dev/null

# Wall seconds and CPU seconds (user + sys, from /usr/bin/time): on a shared machine
# the wall time also counts waiting for a core, the CPU time does not.
/usr/bin/time -f "%e %U %S" -o sort.time bash -c '
  LC_ALL=C sort -t, -k1,1 upstream.csv > up.sorted
  LC_ALL=C sort -t, -k1,1 ledger.csv > lo.sorted
  LC_ALL=C join -t, -a1 -a2 up.sorted lo.sorted | wc -l > join.count'
rm -f up.sorted lo.sorted

/usr/bin/time -f "%e %U %S %M" -o idem.time "$idem" recon --dry-run --json --source bench \
  --statement upstream.csv \
  --map key=out_trade_no,amount=total_fee,currency=fee_type,status=trade_state,time=trade_time \
  --upstream-scale 2 --tz Asia/Shanghai --status-map SUCCESS=PAID --intermediate PENDING \
  --ledger "sqlite://$work/ledger.db" \
  --ledger-query "SELECT order_no AS key, amount AS amount, currency AS currency, status AS status, created_at AS time FROM ledger" \
  --day 2024-06-18 --memory-mib "$memory" --temp-dir "$work" > idem.out 2> idem.err

read -r s_wall s_user s_sys < sort.time
read -r i_wall i_user i_sys i_rss < idem.time
s_cpu=$(echo "$s_user + $s_sys" | bc -l)
i_cpu=$(echo "$i_user + $i_sys" | bc -l)
printf '%-34s %8s %8s %12s\n' "contender ($rows rows a side)" "wall s" "CPU s" "peak RSS"
printf '%-34s %8.2f %8.2f %12s\n' "LC_ALL=C sort x2 + join" "$s_wall" "$s_cpu" "-"
printf '%-34s %8.2f %8.2f %8d MiB\n' "idem recon (classifying)" "$i_wall" "$i_cpu" "$((i_rss / 1024))"
echo "idem: $(tail -1 idem.out)"
printf 'ratio idem/sort+join = %.2f (wall), %.2f (CPU)\n' "$(echo "$i_wall / $s_wall" | bc -l)" \
  "$(echo "$i_cpu / $s_cpu" | bc -l)"
