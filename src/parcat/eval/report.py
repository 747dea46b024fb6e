"""Reports: per-mission and per-policy summaries, and the JSON / CSV results formats.

The JSON document (``schema: parcat.eval``, ``version: 1``)::

    {
      "schema": "parcat.eval", "version": 1, "parcat_version": "0.1.0",
      "status": "complete" | "interrupted" | "failed",
      "config": {"missions": [...], "policies": [...], "episodes": N, "seed": S, ...},
      "summary": [{"mission", "policy", "episodes", "failed", "mean", "std", "min", "max",
                   "ci95_low", "ci95_high", "non_finite", "retries"}, ...],
      "episodes": [EpisodeResult.to_dict(), ...],     # in task order; each with "warnings"
                                                    # and per agent late_actions, retries
      "reproducible": true | false | null,          # false: some environment ignores its seed
      "environments": {"<mission>": {"reproducible", "leaks_state", "note"}, ...},
      "execution": {"jobs", "executor", "parallel_policy", "policy_strategy", ...,
                    "plan": {...}},                 # how it ran: never changes the results
      "timing": {"started": ISO-8601, "elapsed_s": float}
    }

A summary row with ``policy == "*"`` covers all agents of the mission. The sample of one
episode for a policy is the mean reward of the agents it played in that episode, so the
statistics describe a per-agent return however many agents a policy gets. On a mission
whose agents have different roles (their ids without a trailing number: evade's
``pursuer_0``.. and ``evader``), sides score on different scales, so every row is of one
side (its ``side``: the role) and no row mixes them.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from parcat import __version__
from parcat.core import jsontext
from parcat.envs.missions import agent_role
from parcat.episode.results import EpisodeResult

SCHEMA = "parcat.eval"
SCHEMA_VERSION = 1
ALL_POLICIES = "*"
# keys whose values differ between equivalent runs (when, how long, on how many workers)
# (and retries of transient errors, which depend on the server, never on the results)
TIMING_KEYS = frozenset({"duration_s", "timing", "elapsed_s", "started", "execution",
                         "retries"})

# two-sided 95% Student t quantiles for 1..30 degrees of freedom
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Summary:
    """Statistics of one policy (or all, ``"*"``) on one mission, over episodes."""

    mission: str
    policy: str
    """Policy name, or ``"*"`` for all agents."""
    episodes: int
    """Episodes that finished and count towards the statistics."""
    failed: int
    """Episodes that failed or timed out (excluded from the statistics)."""
    mean: float
    """Mean per-agent return."""
    std: float
    """Sample standard deviation over episodes (0 with one episode)."""
    min: float
    max: float
    ci95_low: float
    """Lower end of the 95% confidence interval of the mean (Student t)."""
    ci95_high: float
    non_finite: int = 0
    """Finished episodes whose value was NaN or infinite (excluded from the statistics)."""
    retries: int = 0
    """Calls of the policy retried after a transient error, over all its agents and
    episodes (``--retries``; they never change the statistics)."""
    side: str = ""
    """The role of the agents the row covers, on a mission whose agents have several
    (``pursuer``); empty where they share one."""


def t_quantile_95(dof: int) -> float:
    """Two-sided 95% quantile of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        return math.inf
    return _T95[dof - 1] if dof <= len(_T95) else 1.96 + 2.4 / dof


def describe(mission: str, policy: str, values: Sequence[float], failed: int,
             retries: int = 0, side: str = "") -> Summary:
    """Summary statistics of one sample of per-episode values; NaN and infinite values
    are counted in ``non_finite`` and left out."""
    finite = [v for v in values if math.isfinite(v)]
    non_finite, values, n = len(values) - len(finite), finite, len(finite)
    if n == 0:
        nan = math.nan
        return Summary(mission, policy, 0, failed, nan, nan, nan, nan, nan, nan, non_finite,
                       retries, side)
    mean = _mean(values)
    squares = _mean([(v - mean) * (v - mean) for v in values])  # inf past the largest float
    std = math.sqrt(squares * n / (n - 1)) if n > 1 else 0.0
    half = t_quantile_95(n - 1) * std / math.sqrt(n) if n > 1 else 0.0
    return Summary(
        mission, policy, n, failed, mean, std, min(values), max(values), mean - half, mean + half,
        non_finite, retries, side,
    )


def _mean(values: Sequence[float]) -> float:
    """The mean of finite values, even when their sum is past the largest float."""
    try:
        return math.fsum(values) / len(values)
    except OverflowError:
        return math.fsum(v / len(values) for v in values)


def summarize(episodes: Iterable[EpisodeResult]) -> list[Summary]:
    """Per mission: one row for all agents, then one per policy, in first-seen order (per
    side where the agents have several roles: module docstring)."""
    samples: dict[tuple[str, str, str], list[float]] = {}
    failures: Counter[str] = Counter()
    retries: Counter[tuple[str, str, str]] = Counter()
    for episode in episodes:
        ok = episode.ok and bool(episode.agents)
        failures[episode.mission] += not ok
        roles = [agent_role(a.agent_id) for a in episode.agents]
        sides = roles if len(set(roles)) > 1 else [""] * len(roles)
        groups: dict[tuple[str, str], list[float]] = {(ALL_POLICIES, s): [] for s in sides or [""]}
        for agent, side in zip(episode.agents, sides, strict=True):
            for name in (ALL_POLICIES, agent.policy):
                groups.setdefault((name, side), []).append(agent.reward)
                retries[episode.mission, name, side] += agent.retries
        for (policy, side), rewards in groups.items():
            values = samples.setdefault((episode.mission, policy, side), [])
            if ok:
                values.append(math.fsum(rewards) / len(rewards))
    # first seen first, the sides of a policy together
    seen = {pair: n for n, pair in enumerate(dict.fromkeys(k[:2] for k in samples))}
    return [
        describe(mission, policy, samples[mission, policy, side], failures[mission],
                 retries[mission, policy, side], side)
        for mission, policy, side in sorted(samples, key=lambda k: seen[k[:2]])
    ]


def reproducible(environments: Mapping[str, Mapping[str, Any]]) -> bool | None:
    """The results' verdict: false if some environment ignores its seed, null if some
    could not be checked, else true."""
    verdicts = [check.get("reproducible") for check in environments.values()]
    return False if False in verdicts else (None if None in verdicts else True)


def make_document(config: Mapping[str, Any], episodes: Sequence[EpisodeResult], status: str,
                  timing: Mapping[str, Any], execution: Mapping[str, Any] | None = None,
                  environments: Mapping[str, Mapping[str, Any]] | None = None,
                  ) -> dict[str, Any]:
    """The JSON results document (see the module docstring for the schema)."""
    checks = dict(environments or {})
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "parcat_version": __version__,
        "status": status,
        "config": dict(config),
        "summary": [jsontext.finite(asdict(s)) for s in summarize(episodes)],
        "episodes": [e.to_dict() for e in episodes],
        "reproducible": reproducible(checks),
        "environments": {name: dict(check) for name, check in checks.items()},
        "execution": dict(execution or {}),
        "timing": dict(timing),
    }


def dumps_document(document: Mapping[str, Any],
                   encode: Callable[[Any], str] = jsontext.dumps) -> str:
    """JSON text of a results document: a key per line, and a list's items a line each
    (as ``encode`` makes it). ``json.dumps(indent=2)`` runs the slow pure-Python encoder."""
    parts = []
    for key, value in document.items():
        if isinstance(value, list) and value:
            items = ",\n".join("    " + encode(item) for item in value)
            parts.append(f"  {json.dumps(key)}: [\n{items}\n  ]")
        else:
            parts.append(f"  {json.dumps(key)}: {jsontext.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def strip_timings(data: Any) -> Any:
    """A copy of a results document without timings, for comparing runs."""
    if isinstance(data, dict):
        return {k: strip_timings(v) for k, v in data.items() if k not in TIMING_KEYS}
    if isinstance(data, list):
        return [strip_timings(v) for v in data]
    return data


def summary_csv(summaries: Iterable[Summary]) -> str:
    """The summary rows as CSV text with a header (a ``side`` column where some mission's
    agents have several roles)."""
    rows = [asdict(summary) for summary in summaries]
    names = [n for n in Summary.__dataclass_fields__ if n != "side" or any(r[n] for r in rows)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=names, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
