#!/usr/bin/env bash
# Nightly benchmark: run the fixed suite, append one record to the history, and exit
# non-zero when a figure got worse than the latest comparable record by more than the
# threshold AND beyond the range of both records' repeats (figures measured while other
# processes took the CPUs they need are reported, not judged).
#
#   crontab: 17 3 * * *  cd /path/to/project && scripts/cron-bench.sh >> bench/cron.log 2>&1
#   HISTORY=bench/history.jsonl THRESHOLD=0.2 QUICK=1 scripts/cron-bench.sh
#   PARCAT_BENCH_SLOWDOWN=0.3 scripts/cron-bench.sh   # 30% more work: must be flagged
#   QUICK=1 REPEATS=1 MAX_JOBS=2 scripts/cron-bench.sh  # a smoke run (README's test)
set -euo pipefail
parcat="${PARCAT:-parcat}"
history="${HISTORY:-bench/history.jsonl}"
load="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
echo "== parcat bench $(date -u +%Y-%m-%dT%H:%M:%SZ) -> $history (load average $load)"
exec "$parcat" bench --history "$history" --compare --threshold "${THRESHOLD:-0.2}" \
    ${QUICK:+--quick} ${REPEATS:+--repeats "$REPEATS"} ${MAX_JOBS:+--max-jobs "$MAX_JOBS"}
