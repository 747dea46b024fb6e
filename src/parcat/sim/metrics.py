"""Evaluating a simulation record (``summary.json``, ``parcat sim --format json``).

Three sections: ``mission_metrics`` (episodes, and the mean of every ``episode_stats()``
number; a ``*_step`` one also as ``*_time_s``), ``env`` (requested and achieved step rate,
intervals, lateness against the schedule, step cost) and ``agents`` (per agent: ``cycled``, at
its own ``cycle_time``, or ``lockstep``, computed in the environment's process every step;
cycle time, cycles, missed cycles, action age, compute time, and steps played with the default
action). A cycled agent's missed cycles count against the run's time, so one that froze shows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from parcat.core.jsontext import finite
from parcat.sim.record import SimRecord


def summarize(record: SimRecord) -> dict[str, Any]:
    """The evaluation of a record, JSON-ready (NaN becomes ``None``)."""
    meta = record.meta
    document = {
        "schema": "parcat.sim",
        "version": 1,
        "mission": meta["mission"],
        "mode": meta["mode"],
        "fast": meta["fast"],
        "seed": meta["seed"],
        "iters": meta["iters"],
        "steps": meta["steps"],
        "interrupted": meta["interrupted"],
        "mission_metrics": mission_metrics(record),
        "env": env_metrics(record),
        "agents": [agent_metrics(record, i) for i in range(len(meta["agents"]))],
        "files": list(record.files),
    }
    result: dict[str, Any] = finite(document)
    return result


def mission_metrics(record: SimRecord) -> dict[str, Any]:
    """Episode counts and the mean of every ``episode_stats()`` number over the episodes
    that ended; with none ended, the running episode's, except ``*_step`` ones (a capture
    step an unfinished episode reports is its step limit, not an event)."""
    episodes = record.meta["episodes"]
    complete = [e for e in episodes if e["complete"]]
    chosen = complete or episodes
    keys = [k for k in (chosen[0] if chosen else {}) if k not in ("episode", "complete")]
    if not complete:
        keys = [k for k in keys if not k.endswith("_step")]
    metrics: dict[str, Any] = {"episodes": len(episodes), "complete_episodes": len(complete)}
    period = float(record.meta["period_s"])
    for key in keys:
        values = [float(e[key]) for e in chosen if e.get(key) is not None]
        mean = float(np.mean(values)) if values else math.nan
        name = "episode_steps" if key == "steps" else key
        metrics[name] = mean
        if key.endswith("_step"):
            metrics[f"{key[: -len('_step')]}_time_s"] = mean * period
    return metrics


def env_metrics(record: SimRecord) -> dict[str, Any]:
    """Requested and achieved rate, interval percentiles, lateness and step cost."""
    meta, arrays = record.meta, record.arrays
    period = float(meta["period_s"])
    times = arrays["time_s"]
    intervals = np.diff(times)
    span = float(times[-1] - times[0]) if len(times) > 1 else math.nan
    paced = meta["mode"] == "parallel" and not meta["fast"]
    lateness = times - np.arange(len(times)) * period if paced else np.zeros(0)
    return {
        "requested_period_s": period,
        "requested_rate_hz": 1.0 / period,
        "achieved_rate_hz": (len(times) - 1) / span if span and span > 0 else math.nan,
        "interval_mean_ms": _ms(_mean(intervals)),
        "interval_p95_ms": _ms(_pct(intervals, 95)),
        "interval_max_ms": _ms(float(intervals.max()) if len(intervals) else math.nan),
        "lateness_p95_ms": _ms(_pct(lateness, 95)),
        "lateness_max_ms": _ms(float(lateness.max()) if len(lateness) else math.nan),
        "step_cost_mean_ms": _ms(_mean(arrays["step_cost_s"])),
        "wall_s": meta["wall_s"],
    }


def agent_metrics(record: SimRecord, index: int) -> dict[str, Any]:
    """Cycle time, action age and compute time of one agent."""
    agent = record.meta["agents"][index]
    based_on = record.arrays["based_on"][:, index]
    known = based_on >= 0
    age_steps = record.arrays["age_steps"][known, index].astype(np.float64)
    age_s = record.arrays["age_s"][known, index]
    return {
        "agent": agent["agent"],
        "policy": agent["policy"],
        "kind": agent["kind"],
        "requested_cycle_s": agent["cycle_time_s"],
        "achieved_cycle_s": agent["achieved_cycle_s"],
        "cycles": agent["cycles"],
        "missed_cycles": agent["missed_cycles"],
        "default_steps": int((~known).sum()),
        "age_steps_mean": _mean(age_steps),
        "age_steps_p95": _pct(age_steps, 95),
        "age_steps_max": float(age_steps.max()) if len(age_steps) else math.nan,
        "age_ms_mean": _ms(_mean(age_s)),
        "age_ms_p95": _ms(_pct(age_s, 95)),
        "compute_ms_mean": _ms(agent["compute_mean_s"]),
        "compute_ms_max": _ms(agent["compute_max_s"]),
    }


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else math.nan


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def _ms(seconds: float | None) -> float:
    return math.nan if seconds is None else float(seconds) * 1e3
