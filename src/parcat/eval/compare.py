"""``parcat compare A.json B.json`` (is B better than A, per mission and overall?) and the
comparison of ``parcat bench`` records (did a figure regress beyond its noise?).

An episode's score is the mean per-agent return of one policy (default: all agents). Each row
holds A's and B's mean and IQM, B − A with a stratified bootstrap 95% interval, and P(B > A).
Then the same for each metric per side (:mod:`parcat.eval.side_metrics`: win/draw/loss,
illegal moves, evade's capture rate and time to capture) the two files share.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core.errors import ConfigError, clip
from parcat.episode.results import EpisodeResult
from parcat.eval.report import ALL_POLICIES
from parcat.eval.results_file import read_results
from parcat.eval.side_metrics import side_metrics
from parcat.eval.stats import (
    Interval,
    aggregate_iqm,
    aggregate_mean,
    average_improvement_probability,
    mean_difference,
    normalised,
    paired_bootstrap,
    stratified_bootstrap,
)

OVERALL = "overall"


@dataclass(frozen=True)
class Comparison:
    """One row: a mission (or ``overall``)."""

    mission: str
    episodes_a: int
    episodes_b: int
    mean_a: float
    mean_b: float
    iqm_a: float
    iqm_b: float
    difference: Interval
    improvement: Interval
    side: str = ALL_POLICIES
    """The side the row is of (``*``: every agent of the policy)."""
    metric: str = "return"
    """What is compared: the mean per-agent return, or a metric of the side."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "mission": self.mission, "side": self.side, "metric": self.metric,
            "episodes_a": self.episodes_a,
            "episodes_b": self.episodes_b, "mean_a": self.mean_a, "mean_b": self.mean_b,
            "iqm_a": self.iqm_a, "iqm_b": self.iqm_b,
            "difference": vars(self.difference), "p_improvement": vars(self.improvement),
        }


def compare_files(a: str | Path, b: str | Path, policy: str = ALL_POLICIES, seed: int = 0
                  ) -> list[Comparison]:
    """:func:`compare` of the scores of ``policy`` in two results files, then a row per
    metric and side the two share, per mission (``ConfigError``: not a parcat results
    file, a malformed episode, or the policy played no finished episode). A mission with
    a return per side (evade's pursuers and evaders, a game's players) has those rows
    instead of one that mixes the sides, and stays out of ``overall``."""
    first, second = load_episodes(a), load_episodes(b)
    mine, theirs = side_metrics(first, policy), side_metrics(second, policy)
    shared = [key for key in mine if key in theirs]
    sided = {mission for mission, _, metric in shared if metric == "return"}
    all_a, all_b = ({m: v for m, v in scores(episodes, policy, path).items() if m not in sided}
                    for episodes, path in ((first, a), (second, b)))
    rows = compare(all_a, all_b, seed=seed) if set(all_a) & set(all_b) or not sided else []
    for mission, side, metric in shared:
        row = _row(mission, {mission: np.asarray(mine[mission, side, metric])},
                   {mission: np.asarray(theirs[mission, side, metric])}, seed, 2000)
        rows.append(replace(row, side=side, metric=metric))
    return rows


def load_episodes(path: str | Path) -> list[EpisodeResult]:
    """The episodes of a results file (``ConfigError``: not a parcat results file, or an
    episode is malformed)."""
    document = read_results(Path(path), "compare")
    found = []
    for index, data in enumerate(document.get("episodes", [])):
        try:
            found.append(EpisodeResult.from_dict(data))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"compare: '{path}': episode {index} is malformed "
                              f"({clip(repr(exc), 200)})") from exc
    return found


def scores(episodes: list[EpisodeResult], policy: str, path: str | Path
           ) -> dict[str, np.ndarray]:
    """Per mission, the per-episode score of ``policy`` in ``episodes``, read from ``path``
    (``ConfigError``: the policy played no finished episode)."""
    found: dict[str, list[float]] = {}
    for episode in episodes:
        rewards = [a.reward for a in episode.agents if policy in ("*", a.policy)]
        if episode.ok and rewards:
            found.setdefault(episode.mission, []).append(sum(rewards) / len(rewards))
    if not found:
        raise ConfigError(f"'{path}' has no finished episodes of policy '{policy}'")
    return {k: np.asarray(v) for k, v in found.items()}


def compare(a: dict[str, np.ndarray], b: dict[str, np.ndarray], seed: int = 0,
            reps: int = 2000, normalise: bool = True) -> list[Comparison]:
    """Rows for every mission both sides evaluated, then ``overall``.

    ``overall`` aggregates per-mission normalised scores (:func:`~parcat.eval.stats.normalised`)
    so missions on different scales weigh alike; ``normalise=False`` when they are already.
    ``ConfigError`` when the two share no mission.
    """
    common = sorted(set(a) & set(b))
    if not common:
        raise ConfigError(f"the results share no mission (A: {sorted(a)}, B: {sorted(b)})")
    rows = [_row(m, {m: a[m]}, {m: b[m]}, seed, reps) for m in common]
    if len(common) > 1:
        pair = [{m: a[m] for m in common}, {m: b[m] for m in common}]
        if normalise:
            pair = normalised(pair)
        rows.append(_row(OVERALL, pair[0], pair[1], seed, reps))
    return rows


@dataclass(frozen=True)
class SeedComparison:
    """One mission's final scores of two groups of training runs (seeds)."""

    mission: str
    seeds_a: int
    seeds_b: int
    iqm_a: Interval
    """Group A's IQM over its seeds, with a bootstrap 95% interval (rliable's)."""
    iqm_b: Interval
    difference: Interval
    """Mean of B minus mean of A, seeds resampled in each group."""
    improvement: Interval
    """P(a seed of B scores above a seed of A)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"mission": self.mission, "seeds_a": self.seeds_a, "seeds_b": self.seeds_b,
                **{name: vars(getattr(self, name))
                   for name in ("iqm_a", "iqm_b", "difference", "improvement")}}


def compare_seeds(a: dict[str, list[float]], b: dict[str, list[float]], seed: int = 0,
                  reps: int = 2000) -> list[SeedComparison]:
    """Final scores of two groups of seeds (:func:`parcat.train.seeds.final_scores`), per
    mission both have: each group's IQM and B − A with bootstrap 95% intervals."""
    rows = []
    for row in compare({k: np.asarray(v) for k, v in a.items()},
                       {k: np.asarray(v) for k, v in b.items()}, seed, reps):
        if row.mission == OVERALL:
            continue
        iqm_a, iqm_b = (stratified_bootstrap({row.mission: np.asarray(group[row.mission])},
                                             aggregate_iqm, reps=reps, seed=seed)
                        for group in (a, b))
        rows.append(SeedComparison(row.mission, row.episodes_a, row.episodes_b, iqm_a, iqm_b,
                                   row.difference, row.improvement))
    return rows


def _row(name: str, a: dict[str, np.ndarray], b: dict[str, np.ndarray], seed: int,
         reps: int) -> Comparison:
    return Comparison(
        mission=name,
        episodes_a=sum(v.size for v in a.values()),
        episodes_b=sum(v.size for v in b.values()),
        mean_a=aggregate_mean(a), mean_b=aggregate_mean(b),
        iqm_a=stratified_bootstrap(a, aggregate_iqm, reps=200, seed=seed).value,
        iqm_b=stratified_bootstrap(b, aggregate_iqm, reps=200, seed=seed).value,
        difference=paired_bootstrap(a, b, lambda x, y: mean_difference(y, x), reps=reps,
                                    seed=seed),
        improvement=paired_bootstrap(a, b, lambda x, y: average_improvement_probability(y, x),
                                     reps=reps, seed=seed + 1),
    )


# --- parcat bench records -------------------------------------------------------------

LOAD_SLACK_CPUS = 0.25
"""CPUs others may use beyond what a measurement leaves them (kernel threads, a shell)."""
BASELINE_RECORDS = 5
"""A record is compared with the pooled repeats of up to this many latest comparable ones."""
MIN_BASELINE_RECORDS = 3
"""Changes are judged once this many comparable records show how much runs differ."""


def spread(values: list[float]) -> dict[str, float]:
    """Median and range of repeats, the range without the lowest and highest fifth."""
    ordered = sorted(values)
    trim = len(ordered) // 5
    return {"median": statistics.median(ordered), "low": ordered[trim],
            "high": ordered[-1 - trim]}


def pool_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One record standing for several comparable ones: each figure's repeats pooled, its
    range all of them, the machine's speed their median."""
    figures = {}
    for name, entry in records[-1]["figures"].items():
        entries = [r["figures"][name] for r in records]
        figure = {**entry, **_pooled(_repeats(entries)),
                  "other_cpus": statistics.median(e.get("other_cpus") or 0.0 for e in entries)}
        if all("relative" in e for e in entries):
            figure["relative"] = _pooled(_repeats([e["relative"] for e in entries]))
        figures[name] = figure
    speeds = [r["load"]["speed"] for r in records if r.get("load", {}).get("speed")]
    return {**records[-1], "figures": figures, "slowdown": None,
            "load": {"speed": statistics.median(speeds) if speeds else None}}


def _pooled(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values),
            "values": values}


def _repeats(entries: list[dict[str, Any]]) -> list[float]:
    return [float(v) for e in entries for v in e.get("values") or [e["median"]]]


def under_load(other_cpus: float, cpus: int, machine_cpus: int) -> bool:
    """Whether others using ``other_cpus`` CPUs took some of the ``cpus`` a measurement needs."""
    return other_cpus + cpus > machine_cpus + LOAD_SLACK_CPUS


class Verdict(str, Enum):
    """What a figure's change between two bench records amounts to."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NOISE = "within noise"
    UNDER_LOAD = "under load, not judged"
    SHORT_HISTORY = "not judged yet"


@dataclass(frozen=True)
class FigureChange:
    """One figure of two bench records, the previous and the current."""

    figure: str
    better: str
    """``higher`` or ``lower``: which way the figure improves."""
    previous: float
    """The previous record's median (of a pooled baseline: of all its repeats)."""
    current: float
    previous_range: tuple[float, float]
    current_range: tuple[float, float]
    change: float
    """(current - previous) / previous, whatever the figure's direction."""
    worse_by: float
    """How many times worse the current median is (1.3: 30% slower; below 1: better)."""
    verdict: Verdict
    relative: bool = False
    """``worse_by`` and the verdict are relative to the machine's speed in each repeat."""

    @property
    def regression(self) -> bool:
        """The change fails the comparison."""
        return self.verdict is Verdict.REGRESSION

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {**vars(self), "verdict": self.verdict.value, "regression": self.regression}


@dataclass(frozen=True)
class BenchComparison:
    """A bench record compared with earlier ones of the same history."""

    changes: tuple[FigureChange, ...]
    notes: tuple[str, ...] = ()
    """Lines to show with the changes: records taken under load, an injected slowdown."""
    incomparable: str | None = None
    """Why nothing was compared (one line), or ``None``."""
    against: str | None = None
    """The records compared with: their times and commits."""

    @property
    def regressions(self) -> list[FigureChange]:
        """The changes that fail the comparison."""
        return [c for c in self.changes if c.regression]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"against": self.against, "incomparable": self.incomparable,
                "notes": list(self.notes), "changes": [c.to_dict() for c in self.changes]}


def check_threshold(threshold: float) -> None:
    """Raise ``ConfigError`` when ``threshold`` is negative (or not a number)."""
    if not threshold >= 0:
        raise ConfigError(f"--threshold must be 0 or more (0.2 flags figures 1.2 times "
                          f"worse); got {threshold}")


def why_incomparable(previous: dict[str, Any], current: dict[str, Any]) -> str | None:
    """Why two bench records cannot be compared (one line), or ``None`` when they can."""
    version, now = previous.get("suite_version"), current.get("suite_version")
    if previous.get("suite") != current.get("suite") or version != now:
        return f"the previous record is suite version {version}, this one {now}"
    if previous.get("quick") != current.get("quick"):
        kinds = ["a --quick run" if r.get("quick") else "a full run" for r in (previous, current)]
        return f"the previous record is {kinds[0]}, this one {kinds[1]}"
    cpus = [r.get("machine", {}).get("cpus") for r in (previous, current)]
    if cpus[0] != cpus[1]:
        return f"the previous record had {cpus[0]} CPUs, this one {cpus[1]}"
    before, after = set(previous.get("figures", {})), set(current.get("figures", {}))
    if before != after:
        return (f"figures missing from the previous record: {sorted(after - before)}, "
                f"from this one: {sorted(before - after)}")
    return None


def compare_bench(history: list[dict[str, Any]], record: dict[str, Any],
                  threshold: float) -> BenchComparison:
    """``record`` compared with the latest comparable records of ``history``, pooled."""
    check_threshold(threshold)
    if not history:
        return BenchComparison((), incomparable="the history has no earlier record")
    alike = [r for r in history if why_incomparable(r, record) is None][-BASELINE_RECORDS:]
    if not alike:
        return BenchComparison((), incomparable=f"{why_incomparable(history[-1], record)} "
                               f"(no earlier record of the history is comparable)")
    comparison = compare_records(pool_records(alike), record, threshold)
    notes = []
    if len(alike) < MIN_BASELINE_RECORDS:
        notes.append(f"only {len(alike)} comparable earlier record(s): changes are judged "
                     f"from {MIN_BASELINE_RECORDS} on, which show how much runs differ")
        comparison = replace(comparison, changes=tuple(
            replace(c, verdict=Verdict.SHORT_HISTORY) if c.verdict is not Verdict.NOISE
            else c for c in comparison.changes))
    loaded = [n for n in (_load_note(r) for r in alike) if n]
    if loaded:
        notes.append(f"{len(loaded)} of the {len(alike)} previous records were taken under "
                     f"load; in the latest, {loaded[-1]}")
    slowed = sum(1 for r in alike if r.get("slowdown"))
    if slowed:
        notes.append(f"{slowed} of the {len(alike)} previous records were measured with "
                     f"PARCAT_BENCH_SLOWDOWN set")
    commits = sorted({str(r.get("git_commit"))[:10] for r in alike})
    against = (f"the last {len(alike)} comparable records ({alike[0].get('time', '?')} to "
               f"{alike[-1].get('time', '?')}; commits {', '.join(commits)})")
    return replace(comparison, notes=(*notes, *comparison.notes), against=against)


def compare_records(previous: dict[str, Any], current: dict[str, Any],
                    threshold: float) -> BenchComparison:
    """Each figure of two comparable records; a regression is a median worse by more than
    ``threshold`` whose repeats' range does not overlap the previous record's. One-process
    figures are judged relative to the machine's speed; a several-process figure measured
    while others took the CPUs it needs is reported as under load, not judged."""
    check_threshold(threshold)
    reason = why_incomparable(previous, current)
    if reason is not None:
        return BenchComparison((), incomparable=reason)
    machines = [r.get("machine", {}).get("machine_cpus") or 1 for r in (previous, current)]
    changes = tuple(_figure_change(name, previous["figures"][name], figure, threshold,
                                   machines) for name, figure in current["figures"].items())
    notes = [f"the {label} record was taken under load: {note}"
             for label, note in (("previous", _load_note(previous)),
                                 ("current", _load_note(current))) if note]
    if speed_note := _speed_note(previous, current):
        notes.append(speed_note)
    for label, rec in (("previous", previous), ("current", current)):
        if rec.get("slowdown"):
            notes.append(f"the {label} record was measured with PARCAT_BENCH_SLOWDOWN="
                         f"{rec['slowdown']}")
    against = (f"the record of {previous.get('time', '?')} "
               f"(commit {str(previous.get('git_commit'))[:10]})")
    return BenchComparison(changes, tuple(notes), None, against)


def _figure_change(name: str, previous: dict[str, Any], current: dict[str, Any],
                   threshold: float, machine_cpus: list[int]) -> FigureChange:
    higher = current.get("better", "higher") == "higher"
    relative = "relative" in previous and "relative" in current
    old_entry, new_entry = ((previous["relative"], current["relative"]) if relative
                            else (previous, current))
    old, new = float(old_entry["median"]), float(new_entry["median"])
    worse_by = _ratio(old, new) if higher else _ratio(new, old)
    old_low, old_high = float(old_entry["low"]), float(old_entry["high"])
    new_low, new_high = float(new_entry["low"]), float(new_entry["high"])
    # the ranges overlap: the change is within what the repeats themselves varied
    apart_worse = new_high < old_low if higher else new_low > old_high
    apart_better = new_low > old_high if higher else new_high < old_low
    # a one-process figure is judged relative to the machine's speed, which the load moves
    loaded = not relative and any(under_load(f.get("other_cpus") or 0.0, f.get("cpus", 1), machine)
                 for f, machine in zip((previous, current), machine_cpus, strict=True))
    if worse_by > 1 + threshold and apart_worse:
        verdict = Verdict.REGRESSION
    elif worse_by * (1 + threshold) < 1 and apart_better:
        verdict = Verdict.IMPROVEMENT
    else:
        verdict = Verdict.NOISE
    if loaded and verdict is not Verdict.NOISE:
        verdict = Verdict.UNDER_LOAD
    before, now = float(previous["median"]), float(current["median"])
    change = (now - before) / abs(before) if before else (0.0 if now == before else math.inf)
    return FigureChange(name, "higher" if higher else "lower", before, now,
                        (float(previous["low"]), float(previous["high"])),
                        (float(current["low"]), float(current["high"])),
                        change, worse_by, verdict, relative)


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, for figures that may be 0."""
    if denominator > 0 and numerator >= 0:
        return numerator / denominator
    return 1.0 if numerator <= denominator else math.inf


def _speed_note(previous: dict[str, Any], current: dict[str, Any]) -> str | None:
    """How fast the machine ran for the current record against the previous one, if >10% apart."""
    speeds = [r.get("load", {}).get("speed") for r in (previous, current)]
    if not speeds[0] or not speeds[1] or 1 / 1.1 < speeds[1] / speeds[0] < 1.1:
        return None
    return (f"the machine ran {speeds[1] / speeds[0]:.2f}x as fast for the current record as "
            f"for the previous one (reference loop); one-process figures are judged "
            f"relative to it")


def _load_note(record: dict[str, Any]) -> str | None:
    """How loaded the machine was while the record ran, or ``None``."""
    load = record.get("load", {})
    other = load.get("other_cpus")
    busy = [load.get(k, {}).get("other_busy_cpus", 0) for k in ("before", "after")]
    machine = record.get("machine", {}).get("machine_cpus") or 1
    # a run's figures need one CPU at least
    if not under_load(max(other or 0.0, *busy), 1, machine):
        return None
    averages = [load.get(k, {}).get("loadavg", ["?"])[0] for k in ("before", "after")]
    return (f"other processes used {other} CPUs on average while it ran (busy before/after: "
            f"{busy[0]}/{busy[1]}; load average {averages[0]} -> {averages[1]})")
