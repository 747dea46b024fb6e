"""parcat bench history and compare, parcat plot, and the CI / cron scripts."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parcat.bench.suite import (
    MEASUREMENTS,
    SLOWDOWN_VARIABLE,
    Work,
    append_record,
    read_history,
    read_slowdown,
    run_suite,
)
from parcat.cli.charts import bar_chart, line_chart
from parcat.cli.main import app
from parcat.core.errors import ConfigError
from parcat.eval.compare import (
    FigureChange,
    Verdict,
    compare_bench,
    compare_records,
    pool_records,
)

ROOT = Path(__file__).resolve().parents[1]


SHAPE = {"suite": "parcat-bench", "suite_version": 2, "quick": True,
         "machine": {"cpus": 2, "machine_cpus": 2}}
QUIET = {"before": {"loadavg": [0.1], "other_busy_cpus": 0},
         "after": {"loadavg": [0.1], "other_busy_cpus": 0}, "other_cpus": 0.02}


def figure(median: float, low: float, high: float, better: str = "higher", cpus: int = 1,
           other_cpus: float = 0.0) -> dict[str, object]:
    return {"median": median, "low": low, "high": high, "better": better, "cpus": cpus,
            "other_cpus": other_cpus}


def record(load: dict[str, object] | None = None, **figures: dict[str, object]
           ) -> dict[str, Any]:
    return {**SHAPE, "load": load or QUIET, "figures": figures}


def verdicts(previous: dict[str, Any], current: dict[str, Any],
             threshold: float = 0.2) -> dict[str, FigureChange]:
    comparison = compare_records(previous, current, threshold)
    assert comparison.incomparable is None
    return {c.figure: c for c in comparison.changes}


def test_directions_sign_the_change_by_value_and_judge_by_direction(tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    append_record(history, record(rate=figure(1000, 990, 1010),
                                  cost=figure(5.0, 4.9, 5.1, "lower"),
                                  cheap=figure(5.0, 4.9, 5.1, "lower")))
    append_record(history, record(rate=figure(700, 690, 710),  # 30% slower
                                  cost=figure(6.5, 6.4, 6.6, "lower"),  # 1.3x the cost
                                  cheap=figure(3.0, 2.9, 3.1, "lower")))
    changes = verdicts(*read_history(history))
    assert changes["rate"].verdict is Verdict.REGRESSION and changes["rate"].change < 0
    assert math.isclose(changes["rate"].worse_by, 1000 / 700)
    assert changes["cost"].verdict is Verdict.REGRESSION and changes["cost"].change > 0
    assert math.isclose(changes["cost"].worse_by, 1.3)
    cheap = changes["cheap"]
    assert cheap.verdict is Verdict.IMPROVEMENT and not cheap.regression
    assert math.isclose(cheap.change, -0.4) and cheap.worse_by < 1


def test_a_change_within_the_repeats_range_is_noise() -> None:
    previous = record(rate=figure(1000, 650, 1100), cost=figure(5.0, 4.0, 9.0, "lower"))
    current = record(rate=figure(700, 680, 1000), cost=figure(8.0, 7.0, 8.5, "lower"))
    changes = verdicts(previous, current)
    assert {c.verdict for c in changes.values()} == {Verdict.NOISE}
    assert changes["rate"].worse_by > 1.4 and changes["cost"].worse_by > 1.5


def test_the_threshold_decides_beyond_the_noise() -> None:
    previous = record(rate=figure(1000, 995, 1005))
    current = record(rate=figure(900, 895, 905))  # 1.11x worse, ranges apart
    assert verdicts(previous, current, 0.2)["rate"].verdict is Verdict.NOISE
    assert verdicts(previous, current, 0.1)["rate"].verdict is Verdict.REGRESSION
    with pytest.raises(ConfigError, match=re.escape(
            "--threshold must be 0 or more (0.2 flags figures 1.2 times worse); got -0.1")):
        compare_records(previous, current, -0.1)


def test_a_figure_measured_under_load_is_not_judged() -> None:
    loaded = {**QUIET, "other_cpus": 1.4,
              "before": {"loadavg": [3.5], "other_busy_cpus": 2}}
    previous = record(rate=figure(1000, 990, 1010, cpus=2),
                      solo=figure(1000, 990, 1010))
    # one process on 2 CPUs keeps a free CPU beside 0.9 busy ones; two processes do not
    current = record(loaded, rate=figure(600, 590, 610, cpus=2, other_cpus=0.9),
                     solo=figure(600, 590, 610, other_cpus=0.9))
    comparison = compare_records(previous, current, 0.2)
    changes = {c.figure: c for c in comparison.changes}
    assert changes["rate"].verdict is Verdict.UNDER_LOAD
    assert [c.figure for c in comparison.regressions] == ["solo"]
    assert comparison.notes == (
        "the current record was taken under load: other processes used 1.4 CPUs on average "
        "while it ran (busy before/after: 2/0; load average 3.5 -> 0.1)",)


def test_one_process_figures_are_judged_relative_to_the_machine_speed() -> None:
    def solo(median: float, speed: float) -> dict[str, object]:
        relative = {"median": median / speed, "low": median / speed * 0.98,
                    "high": median / speed * 1.02}
        return {**figure(median, median * 0.98, median * 1.02), "relative": relative}

    previous = {**record(rate=solo(1000, 10)), "load": {**QUIET, "speed": 10}}
    # the whole machine ran 30% slower: not parcat
    slower = {**record(rate=solo(700, 7)), "load": {**QUIET, "speed": 7}}
    comparison = compare_records(previous, slower, 0.2)
    (change,) = comparison.changes
    assert change.relative and change.verdict is Verdict.NOISE
    assert math.isclose(change.change, -0.3) and math.isclose(change.worse_by, 1.0)
    assert comparison.notes == (
        "the machine ran 0.70x as fast for the current record as for the previous one "
        "(reference loop); one-process figures are judged relative to it",)
    # parcat 30% slower on a machine as fast as before
    (change,) = compare_records(previous, record(rate=solo(700, 10)), 0.2).changes
    assert change.verdict is Verdict.REGRESSION


def test_a_record_is_compared_with_the_pooled_repeats_of_the_latest_records() -> None:
    def run(*values: float) -> dict[str, object]:
        return {**figure(sorted(values)[len(values) // 2], min(values), max(values)),
                "values": list(values)}

    loaded = {**QUIET, "other_cpus": 1.6}
    history = [record(rate=run(500, 500, 500, 500, 500)),  # the 6th latest: left out
               record(rate=run(1000, 990, 1010, 1005, 995)),
               record(rate=run(1010, 1000, 990, 1020, 1000)),
               record(rate=run(1000, 995, 985, 1010, 990)),
               record(rate=run(900, 880, 890, 910, 905)),  # one run at a slow moment
               record(loaded, rate=run(1000, 1010, 990, 1000, 995))]
    current = record(rate=run(740, 750, 760, 745, 755))
    # against the slow run alone: 1.2x worse, not beyond the threshold
    assert verdicts(history[-2], current)["rate"].verdict is Verdict.NOISE
    comparison = compare_bench(history, current, 0.2)
    (change,) = comparison.changes
    assert change.verdict is Verdict.REGRESSION and change.previous == 995  # pooled median
    assert len(pool_records(history[1:])["figures"]["rate"]["values"]) == 25
    # two earlier runs do not show how much runs differ yet
    short = compare_bench(history[-2:], current, 0.2)
    assert [c.verdict for c in short.changes] == [Verdict.SHORT_HISTORY]
    assert ("only 2 comparable earlier record(s): changes are judged from 3 on, which show "
            "how much runs differ") in short.notes
    assert comparison.against is not None and comparison.against.startswith(
        "the last 5 comparable records")
    assert comparison.notes == (
        "1 of the 5 previous records were taken under load; in the latest, other processes "
        "used 1.6 CPUs on average while it ran (busy before/after: 0/0; load average 0.1 -> "
        "0.1)",)


@pytest.mark.parametrize(("change", "reason"), [
    ({"suite_version": 1}, "the previous record is suite version 1, this one 2"),
    ({"quick": False}, "the previous record is a full run, this one a --quick run"),
    ({"machine": {"cpus": 4}}, "the previous record had 4 CPUs, this one 2"),
    ({"figures": {"rate": figure(1, 1, 1), "old": figure(1, 1, 1)}},
     "figures missing from the previous record: ['new'], from this one: ['old']"),
])
def test_nothing_comparable_says_why_in_one_line(change: dict[str, Any], reason: str) -> None:
    current = record(rate=figure(1, 1, 1), new=figure(1, 1, 1))
    previous = {**current, **change}
    assert compare_records(previous, current, 0.2).incomparable == reason
    assert compare_bench([previous], current, 0.2).incomparable == (
        f"{reason} (no earlier record of the history is comparable)")
    # the latest comparable record is the one compared with
    assert compare_bench([current, previous], current, 0.2).incomparable is None
    assert compare_bench([], current, 0.2).incomparable == "the history has no earlier record"


def test_work_is_slowed_by_the_requested_fraction() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 0.001
        return now[0]

    def piece() -> None:
        now[0] += 1.0

    assert math.isclose(Work(0.0).time(piece, clock), 1.001)
    assert 1.3 <= Work(0.3).time(piece, clock) <= 1.31


def test_the_slowdown_variable_is_read_and_checked() -> None:
    assert read_slowdown({}) == 0.0
    assert read_slowdown({SLOWDOWN_VARIABLE: "0.3"}) == 0.3
    message = ("PARCAT_BENCH_SLOWDOWN must be a number from 0 to 10 (0.3 makes the measured "
               "work 30% slower); got 'slow': unset it or set e.g. PARCAT_BENCH_SLOWDOWN=0.3")
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_slowdown({SLOWDOWN_VARIABLE: "slow"})


def test_a_slowed_down_record_compares_as_a_regression(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    # the rollout alone (one process, timed in CPU time): real runs, a few seconds
    rollout = [m for m in MEASUREMENTS if m.name == "rollout"]
    monkeypatch.delenv(SLOWDOWN_VARIABLE, raising=False)
    plain = run_suite(quick=True, repeats=3, measurements=rollout)
    monkeypatch.setenv(SLOWDOWN_VARIABLE, "1.5")  # 2.5x the work: far beyond any load noise
    slowed = run_suite(quick=True, repeats=3, measurements=rollout)
    assert slowed["slowdown"] == 1.5 and plain["slowdown"] == 0.0
    comparison = compare_records(plain, slowed, 0.2)
    change = comparison.changes[0]
    assert change.figure == "rollout_agent_steps_per_s" and change.worse_by > 1.2
    # judged relative to the machine's speed, so a loaded machine does not hide it
    assert change.relative and change.verdict is Verdict.REGRESSION
    assert "the current record was measured with PARCAT_BENCH_SLOWDOWN=1.5" in comparison.notes
    # records note the load they ran under
    for rec in (plain, slowed):
        load = rec["load"]
        assert set(load) == {"before", "after", "other_cpus", "retried_repeats", "speed"}
        assert len(load["before"]["loadavg"]) == 3 and load["after"]["other_busy_cpus"] >= 0
        assert load["other_cpus"] >= 0
        entry = rec["figures"]["rollout_agent_steps_per_s"]
        assert entry["better"] == "higher" and len(entry["values"]) == 3
        assert entry["low"] <= entry["median"] <= entry["high"] and entry["other_cpus"] >= 0
        assert entry["speed"] > 0 and set(entry["relative"]) == {"median", "low", "high", "values"}


def test_bench_quick_appends_a_record_and_compares(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    history = tmp_path / "h.jsonl"
    append_record(history, {"suite": "parcat-bench", "suite_version": 1, "quick": True,
                            "figures": {"agent_overhead_us": 5.0}})
    runner = CliRunner()
    args = ["bench", "--quick", "--history", str(history), "--compare", "--threshold",
            "100", "--max-jobs", "2", "--repeats", "1"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert ("nothing comparable: the previous record is suite version 1, this one 2 (no "
            "earlier record of the history is comparable)\n") in first.stdout
    records = read_history(history)
    assert len(records) == 2
    assert {"rollout_agent_steps_per_s", "speedup_jobs_2", "agent_overhead_us",
            "train_collection_steps_per_s"} <= set(records[-1]["figures"])
    assert records[-1]["suite_version"] == 2 and records[-1]["machine"]["cpus"] >= 1
    assert {f["better"] for f in records[-1]["figures"].values()} == {"higher", "lower"}
    # a second run compares with it: the rollout alone, measured again, against the first
    # run's rollout (in a record of that figure alone), not the whole suite twice
    rollout = "rollout_agent_steps_per_s"
    append_record(history, {**records[-1], "figures": {rollout: records[-1]["figures"][rollout]}})
    monkeypatch.setattr("parcat.bench.suite.MEASUREMENTS",
                        tuple(m for m in MEASUREMENTS if m.name == "rollout"))
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(read_history(history)) == 4
    comparison = json.loads(result.stdout)["comparison"]
    assert comparison["incomparable"] is None and comparison["changes"]
    assert not any(c["regression"] for c in comparison["changes"])


def test_bench_rejects_a_bad_slowdown_or_threshold_before_measuring(tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    bad = CliRunner().invoke(app, ["bench", "--quick", "--history", str(history)],
                             env={SLOWDOWN_VARIABLE: "-1"})
    assert bad.exit_code == 2 and "PARCAT_BENCH_SLOWDOWN must be a number" in bad.output
    bad = CliRunner().invoke(app, ["bench", "--history", str(history), "--compare",
                                   "--threshold", "-1"])
    assert bad.exit_code == 2 and "--threshold must be 0 or more" in bad.output
    assert not history.exists()


def test_charts_render_plain_text() -> None:
    assert "#" in bar_chart({"1": 1.0, "2": 1.9})
    chart = line_chart({"agent_0": [0.0, 1.0, 2.0], "agent_1": [2.0, 1.0, float("nan")]})
    assert "a = agent_0" in chart and "b = agent_1" in chart


def test_plot_reads_a_metrics_log(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"epoch": i, "reward": {"agent_0": i * 0.5}}) + "\n"
                           for i in range(1, 6)))
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 0 and "agent_0" in result.stdout
    bad = CliRunner().invoke(app, ["plot", str(tmp_path), "--field", "nope"])
    assert bad.exit_code == 2


def run_script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    parcat = Path(sys.executable).with_name("parcat")
    environment = {**os.environ, "PARCAT": str(parcat), "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], env=environment,
                          capture_output=True, text=True, timeout=300, check=False)


def test_ci_eval_script_gates_on_the_lower_bound(tmp_path: Path) -> None:
    env = {"EPISODES": "6", "OUTPUT": str(tmp_path / "ci.json")}
    passing = run_script("ci-eval.sh", "greedy", "5", "harvest", **env)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "PASS harvest" in passing.stdout
    failing = run_script("ci-eval.sh", "random", "5", "harvest", **env)
    assert failing.returncode == 1 and "FAIL harvest" in failing.stdout
    assert run_script("ci-eval.sh", "greedy", "5", "nope", **env).returncode == 2


def test_cron_bench_script_appends_to_the_history(tmp_path: Path) -> None:
    history = tmp_path / "bench" / "history.jsonl"
    # MAX_JOBS=1: what is tested is the script, not the scaling (measured in the tests above)
    done = run_script("cron-bench.sh", HISTORY=str(history), QUICK="1", MAX_JOBS="1",
                      THRESHOLD="100")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(read_history(history)) == 1


def test_charts_as_files_with_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    pytest.importorskip("matplotlib")
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"epoch": i, "reward": {"agent_0": i * 0.5}}) + "\n"
                           for i in range(1, 6)))
    runner = CliRunner()
    for name in ("curve.svg", "curve.png"):
        result = runner.invoke(app, ["plot", str(log), "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert (tmp_path / name).stat().st_size > 1000
    assert (tmp_path / "curve.svg").read_text().lstrip().startswith("<?xml")
    chart = tmp_path / "scaling.svg"
    # the chart is the episode scaling's: the bench measures that alone here (the whole
    # suite runs in test_bench_quick_appends_a_record_and_compares)
    scaling = [m for m in MEASUREMENTS if m.name == "episode scaling"]
    monkeypatch.setattr("parcat.bench.suite.MEASUREMENTS", tuple(scaling))
    result = runner.invoke(app, ["bench", "--quick", "--max-jobs", "2", "--history",
                                 str(tmp_path / "h.jsonl"), "--chart", str(chart)])
    assert result.exit_code == 0, result.output
    assert chart.stat().st_size > 1000
