#!/usr/bin/env bash
# Nightly benchmark: run the fixed suite, append one record to the history, and exit
# non-zero when a figure regressed past the threshold against the previous record.
#
#   crontab: 17 3 * * *  cd /path/to/project && scripts/cron-bench.sh >> bench/cron.log 2>&1
#   HISTORY=bench/history.jsonl THRESHOLD=0.2 QUICK=1 scripts/cron-bench.sh
set -euo pipefail
parcat="${PARCAT:-parcat}"
history="${HISTORY:-bench/history.jsonl}"
echo "== parcat bench $(date -u +%Y-%m-%dT%H:%M:%SZ) -> $history"
exec "$parcat" bench --history "$history" --compare --threshold "${THRESHOLD:-0.2}" \
    ${QUICK:+--quick} ${MAX_JOBS:+--max-jobs "$MAX_JOBS"}
