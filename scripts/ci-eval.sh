#!/usr/bin/env bash
# CI gate: evaluate a policy on missions; fail when a mission's score is below a threshold,
# judged on the lower end of its 95% confidence interval (not on a lucky mean).
#
#   scripts/ci-eval.sh POLICY THRESHOLD MISSION [MISSION ...]
#   EPISODES=50 SEED=0 JOBS=2 OUTPUT=ci-eval.json scripts/ci-eval.sh greedy 5.0 harvest
#
# Exit codes: 0 pass, 1 below threshold (or a failed episode), 2 bad input.
set -euo pipefail
if [ "$#" -lt 3 ]; then
    echo "usage: $0 POLICY THRESHOLD MISSION [MISSION ...]" >&2
    exit 2
fi
policy="$1"; threshold="$2"; shift 2
parcat="${PARCAT:-parcat}"
output="${OUTPUT:-ci-eval.json}"
args=()
for mission in "$@"; do args+=(-m "$mission"); done
status=0
"$parcat" eval "${args[@]}" -p "$policy" -n "${EPISODES:-30}" --seed "${SEED:-0}" \
    ${JOBS:+--jobs "$JOBS"} --format json --output "$output" > /dev/null || status=$?
if [ "$status" -eq 2 ]; then exit 2; fi
python3 - "$output" "$threshold" "$status" <<'PY'
import json, sys
path, threshold, status = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
doc = json.load(open(path))
failed = False
for row in doc["summary"]:
    if row["policy"] != "*":
        continue
    low, mean = row["ci95_low"], row["mean"]
    ok = low is not None and low >= threshold
    failed |= not ok
    shown = "n/a (no finished episode)" if mean is None else f"{mean:.3f}"
    print(f"{'PASS' if ok else 'FAIL'} {row['mission']}: mean {shown}, "
          f"95% CI low {low if low is None else round(low, 3)} vs threshold {threshold}")
sys.exit(1 if failed or status != 0 else 0)
PY
