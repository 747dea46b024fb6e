"""What ``parcat plot`` and ``parcat bench -o`` draw: results documents, run directories,
bench records and simulation records turned into :mod:`parcat.core.figures` figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core.errors import ConfigError
from parcat.core.figures import (
    CrossSide,
    Curve,
    Marks,
    Point,
    across_runs,
    bench_figure,
    columns_of,
    cross_figure,
    results_figure,
)

METRICS_FILES = ("metrics.jsonl", "metrics.csv")
BAND = {"reward": ("reward_min", "reward_max")}
"""Fields drawn with a band from the epoch's other fields: min to max return."""


def results_points(document: dict[str, Any], statistic: str, source: str) -> list[Point]:
    """Per mission and policy, the statistic of an eval (``parcat.eval``) or ``--each``
    (``parcat.each/2``) file with its 95% interval."""
    if "each" in document:
        points = [_each_point(row, statistic) for row in document["each"]["rows"]]
    else:
        points = _eval_points(document["episodes"], statistic)
    if not points:
        raise ConfigError(f"'{source}' holds no finished episode to draw")
    return points


def results_of(points: Sequence[Point], statistic: str, source: str) -> Any:
    """The figure of :func:`results_points`."""
    return results_figure(points, statistic, f"{source}: {statistic} return per agent, 95% "
                          f"interval{'' if statistic == 'mean' else ' (bootstrap)'}")


def _each_point(row: dict[str, Any], statistic: str) -> Point:
    value = row[statistic]
    mission = row["mission"] + (" (normalised)" if row["mission"] == "overall" else "")
    return Point(mission, row["policy"], _number(value["value"]), _number(value["low"]),
                 _number(value["high"]), int(row["episodes"]))


def _eval_points(episodes: Sequence[dict[str, Any]], statistic: str) -> list[Point]:
    """Per mission and policy (and side, where the agents have several roles, as the eval
    table's rows): each finished episode's mean return of the policy's agents."""
    from parcat.episode.results import EpisodeResult
    from parcat.eval.report import agent_role, describe
    from parcat.eval.stats import aggregate_iqm, stratified_bootstrap
    values: dict[tuple[str, str], list[float]] = {}
    agents: dict[tuple[str, str], dict[str, None]] = {}
    for data in episodes:
        episode = EpisodeResult.from_dict(data)
        roles = [agent_role(str(a.agent_id)) for a in episode.agents]
        sides = roles if len(set(roles)) > 1 else [""] * len(roles)
        labels = [a.policy + (f" [{side}]" if side else "")
                  for a, side in zip(episode.agents, sides, strict=True)]
        for agent, label in zip(episode.agents, labels, strict=True):
            agents.setdefault((episode.mission, label), {})[str(agent.agent_id)] = None
        for label in dict.fromkeys(labels):
            rewards = [a.reward for a, b in zip(episode.agents, labels, strict=True)
                       if b == label]
            if episode.ok and all(math.isfinite(r) for r in rewards):
                values.setdefault((episode.mission, label), []).append(
                    math.fsum(rewards) / len(rewards))
    points = []
    for (mission, policy), sample in values.items():
        if statistic == "iqm":
            interval = stratified_bootstrap({mission: sample}, aggregate_iqm)
            low, value, high = interval.low, interval.value, interval.high
        else:
            summary = describe(mission, policy, sample, 0)
            low, value, high = summary.ci95_low, summary.mean, summary.ci95_high
        points.append(Point(mission, policy, value, low, high, len(sample),
                            tuple(agents[mission, policy])))
    return points


def metrics_path(path: Path) -> Path:
    """The metrics log of a run directory (or ``path`` itself, a log)."""
    if path.is_dir():
        found = [path / n for n in METRICS_FILES if (path / n).is_file()]
        path = found[0] if found else path / METRICS_FILES[0]
    if not path.is_file():
        raise ConfigError(f"no metrics log at '{path}' (parcat train writes metrics.jsonl)")
    return path


def training_of(paths: Sequence[Path], field: str, statistic: str
                ) -> tuple[list[Curve], Marks, str]:
    """The curves, marks and title of one run, or of several (seeds of one config: the
    statistic across them with a 95% bootstrap band); :func:`training_figure` draws them."""
    from parcat.train.metrics import read_metrics
    logs = [metrics_path(p) for p in paths]
    runs = [read_metrics(log) for log in logs]
    for log, records in zip(logs, runs, strict=True):
        if not records or field not in records[0]:
            valid = ", ".join(k for k in (records[0] if records else {}) if k != "epoch")
            raise ConfigError(f"'{log}' has no field '{field}'; valid: {valid or 'none'}")
    mission = _manifest(logs[0].parent).get("mission", "")
    name = logs[0].parent.name if len(logs) == 1 else ", ".join(p.parent.name for p in logs)
    title = (f"run {name}" + (f" on {mission}" if mission else "")
             + f": {field.replace('_', ' ')}")
    if len(runs) == 1:
        return _one_run(runs[0], field), _marks(runs[0], logs[0].parent, field), title
    title += f" ({statistic} of {len(runs)} runs, 95% bootstrap band)"
    return _many_runs(runs, field, statistic), Marks(), title


def _steps(records: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([float(r.get("total_env_steps", r["epoch"])) for r in records])


def _one_run(records: Sequence[dict[str, Any]], field: str) -> list[Curve]:
    steps, curves = _steps(records), []
    low, high = (columns_of(records, k) for k in BAND.get(field, (field, field)))
    for name, values in columns_of(records, field).items():
        band = field in BAND and name in low
        curves.append(Curve(name, steps, np.array(values),
                            np.array(low[name]) if band else None,
                            np.array(high[name]) if band else None, "min to max"))
    return curves


def _many_runs(runs: Sequence[Sequence[dict[str, Any]]], field: str,
               statistic: str) -> list[Curve]:
    """Per series, the statistic over runs at each step all of them reached."""
    length = min(len(r) for r in runs)
    columns = [columns_of(r[:length], field) for r in runs]
    curves = []
    for name in columns[0]:
        values = np.array([c.get(name, [math.nan] * length) for c in columns]).T
        value, low, high = across_runs(values, statistic)
        curves.append(Curve(f"{name} ({statistic})", _steps(runs[0][:length]), value, low,
                            high, "95% interval over runs", raw=False))
    return curves


def _marks(records: Sequence[dict[str, Any]], run: Path, field: str) -> Marks:
    """The evaluation return at the checkpoints and the best checkpoint, for returns."""
    if not field.startswith("reward"):
        return Marks()
    steps = _steps(records)
    evaluation = []
    for name, values in columns_of(records, "eval_return").items():
        finite = np.isfinite(np.array(values))
        if name != "total" and finite.any():
            evaluation.append(Curve(name, steps[finite], np.array(values)[finite]))
    manifest = _manifest(run / "best")
    # one best per side: each side's epoch (RUN/best pairs them); else the checkpoint's
    sides = {f"best {side} (epoch {entry.get('epoch')})": entry.get("epoch")
             for side, entry in (manifest.get("sides") or {}).items() if side != "total"}
    wanted = sides or {f"best checkpoint (epoch {manifest.get('epoch')})": manifest.get("epoch")}
    at = {r.get("epoch"): float(s) for s, r in zip(steps, records, strict=True)}
    best = [(at[epoch], label) for label, epoch in wanted.items()
            if isinstance(epoch, int) and epoch in at]
    return Marks(evaluation, best)


def _manifest(run: Path) -> dict[str, Any]:
    """A checkpoint's manifest, or nothing when there is none (a log alone)."""
    from parcat.core.errors import CheckpointError
    from parcat.policies.checkpoint import read_manifest
    try:
        return read_manifest(run)
    except CheckpointError:
        return {}


def cross_of(table: dict[str, Any], source: str) -> Any:
    """The two-sided heat map of one mission's ``--cross`` table."""
    cells = table["cells"]

    def grid(side: str, key: str) -> np.ndarray:
        return np.array([[_number(c[side][key]) for c in row] for row in cells])

    sides = [CrossSide(f"{who} side ({', '.join(table[f'{side}_agents'])})",
                       grid(side, "value"), grid(side, "low"), grid(side, "high"))
             for side, who in (("row", "row"), ("col", "column"))]
    episodes = np.array([[int(c["episodes"]) for c in row] for row in cells])
    return cross_figure(table["policies"], sides, episodes,
                        f"{source}: cross-play on {table['mission']}, mean return per agent "
                        "of each side with its 95% interval and episodes")


def bench_of(record: dict[str, Any]) -> Any:
    """The episode-scaling figure of a bench record, with its load in a note."""
    figures = record["figures"]
    jobs = sorted(int(k.removeprefix("speedup_jobs_")) for k in figures
                  if k.startswith("speedup_jobs_"))
    speedups = [(f["median"], f["low"], f["high"])
                for f in (figures[f"speedup_jobs_{j}"] for j in jobs)]
    load = record["load"]
    machine = record.get("machine") or {}
    averages = [(load[k]["loadavg"] or ["?"])[0] for k in ("before", "after")]
    note = (f"load: other processes used {load['other_cpus']} CPUs on average; load average "
            f"{averages[0]} -> {averages[1]}; "
            f"{load['retried_repeats']} repeats measured again; median of "
            f"{record['repeats']} repeats")
    cpus = machine.get("cpus") if isinstance(machine, dict) else None
    title = (f"episode scaling (harvest, 200 steps){f' on {cpus} CPUs' if cpus else ''}, "
             f"{str(record.get('time', ''))[:16].replace('T', ' ')}")
    return bench_figure(jobs, speedups, title, note)


def _number(value: Any) -> float:
    """A JSON number, or NaN for ``null`` (``TypeError`` for anything else)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)
