"""Statistics: IQM, stratified bootstrap coverage, probability of improvement, compare."""

from __future__ import annotations

import itertools
import json
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.eval import evaluate as evaluate_module
from parcat.eval.evaluate import evaluate_to_precision, make_config
from parcat.eval.report import strip_timings
from parcat.eval.stats import (
    CHUNK_REPS,
    Interval,
    Scores,
    aggregate_iqm,
    aggregate_mean,
    iqm,
    mean_difference,
    paired_bootstrap,
    probability_of_improvement,
    stratified_bootstrap,
)


def test_iqm_trims_a_quarter_from_each_end() -> None:
    assert iqm([1, 2, 3, 4, 100, -100, 5, 6]) == pytest.approx(np.mean([2, 3, 4, 5]))
    assert iqm(list(range(10))) == pytest.approx(np.mean(range(2, 8)))


def test_stratified_bootstrap_coverage_is_close_to_nominal() -> None:
    rng = np.random.default_rng(0)
    trials, hits = 150, 0
    for trial in range(trials):
        scores = {"a": rng.normal(0.0, 1.0, 30), "b": rng.exponential(1.0, 40) - 1.0}
        interval = stratified_bootstrap(scores, aggregate_mean, reps=400, seed=trial)
        hits += interval.low <= 0.0 <= interval.high
    coverage = hits / trials
    # nominal 0.95; the percentile bootstrap runs slightly narrow at n = 30–40
    assert 0.88 <= coverage <= 0.99, coverage


def test_probability_of_improvement() -> None:
    assert probability_of_improvement([2, 3], [0, 1]) == 1.0
    assert probability_of_improvement([1, 1], [1, 1]) == 0.5
    assert probability_of_improvement([0], [1]) == 0.0


class TickingClock:
    """``time`` for parcat.eval.evaluate whose ``perf_counter`` ticks by one each reading: which
    readings a figure spans, with no real time in the test."""

    def __init__(self) -> None:
        self.readings = itertools.count(1000)

    def perf_counter(self) -> float:
        return float(next(self.readings))


def test_precision_stops_below_the_target_and_is_deterministic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = make_config(["harvest"], ["random"], episodes=4, seed=2,
                         overrides={"max_steps": 30})
    clock = TickingClock()
    monkeypatch.setattr(evaluate_module, "time", clock)
    before = clock.perf_counter()
    first = evaluate_to_precision(config, precision=0.08)
    after = clock.perf_counter()
    monkeypatch.undo()
    second = evaluate_to_precision(config, precision=0.08)
    # the run's time spans every batch, from its first reading to its last, not only the
    # last batch's (a bug quoted 0.07 s of 2.96)
    assert first.elapsed_s == (after - 1) - (before + 1)
    summary = first.to_document()["summary"][0]
    assert (summary["ci95_high"] - summary["ci95_low"]) / 2 < 0.08
    assert len(first.episodes) > 4 and len(first.episodes) % 4 == 0
    assert strip_timings(first.to_document()) == strip_timings(second.to_document())


def test_compare_command(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = ["eval", "-m", "harvest", "-n", "8", "--set", "max_steps=40"]
    assert runner.invoke(app, [*base, "-p", "random", "-o", str(a)]).exit_code == 0
    assert runner.invoke(app, [*base, "-p", "greedy", "-o", str(b)]).exit_code == 0
    result = runner.invoke(app, ["compare", str(a), str(b), "--format", "json"])
    assert result.exit_code == 0, result.output
    row, *per_side = json.loads(result.stdout)
    assert (row["side"], row["metric"]) == ("*", "return")
    assert {r["metric"] for r in per_side} == {"deliveries", "pickups"}  # harvest's numbers
    assert row["mission"] == "harvest" and row["difference"]["low"] > 0
    assert row["p_improvement"]["value"] > 0.9
    bad = runner.invoke(app, ["compare", str(a), str(tmp_path / "missing.json")])
    assert bad.exit_code == 2


def _rep_by_rep(x: Scores, y: Scores, statistic: Callable[[Scores, Scores], float],
                reps: int, seed: int) -> Interval:
    """main's paired_bootstrap before resampling was batched: the numbers it must keep."""
    rng = np.random.default_rng(seed)
    xa = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    ya = {k: np.asarray(v, dtype=float) for k, v in y.items()}
    draws = np.empty(reps)
    for r in range(reps):
        xs = {k: a[rng.integers(0, a.size, a.size)] for k, a in xa.items()}
        ys = {k: a[rng.integers(0, a.size, a.size)] for k, a in ya.items()}
        draws[r] = statistic(xs, ys)
    tail = (1 - 0.95) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(statistic(xa, ya), float(low), float(high))


@pytest.mark.parametrize("statistic", [aggregate_mean, aggregate_iqm], ids=["mean", "iqm"])
def test_the_chunked_bootstrap_gives_the_numbers_of_the_rep_by_rep_one(
        statistic: Callable[[Scores], float]) -> None:
    rng = np.random.default_rng(3)
    reps = 2 * CHUNK_REPS + 50  # two full chunks and a part
    for sizes in ([1], [7], [40, 3], [5] * 9, [0, 6]):
        scores = {f"m{i}": rng.normal(size=n) * 10 for i, n in enumerate(sizes)}
        other = {k: v + 1 for k, v in scores.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an empty mission's mean
            batched = stratified_bootstrap(scores, statistic, reps=reps, seed=4)
            one_by_one = _rep_by_rep(scores, {}, lambda s, _: statistic(s), reps, seed=4)
            paired = paired_bootstrap(scores, other, mean_difference, reps=reps, seed=5)
            paired_reference = _rep_by_rep(scores, other, mean_difference, reps, seed=5)
        assert repr(batched) == repr(one_by_one)
        assert repr(paired) == repr(paired_reference)


def test_the_bootstrap_holds_a_chunk_of_resamples_not_all_of_them() -> None:
    scores = {"m": np.random.default_rng(0).normal(size=10_000)}
    tracemalloc.start()  # numpy reports its arrays' memory to tracemalloc
    try:
        stratified_bootstrap(scores, aggregate_iqm, reps=2000)
        paired_bootstrap(scores, scores, mean_difference, reps=2000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # all 2000 reps at once: 160 MB each for indices, values, the IQM's pooled and sorted
    # copies; a chunk of reps: a tenth
    assert peak < 160 * 2**20, f"{peak / 2**20:.0f} MiB"
