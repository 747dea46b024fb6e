"""``parcat bench``: a fixed, versioned benchmark suite with a history to compare against.

Each run measures the same figures on the built-in missions and appends one JSON record
(machine, versions, git commit, figures) to a history file, so cron jobs build a series and
CI can gate on regressions. Figures say which direction is better.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from parcat import __version__
from parcat.evaluate import EvalConfig, evaluate
from parcat.missions import load_mission
from parcat.parallel.launch import RunOptions
from parcat.parallel.planner import ExecutorKind
from parcat.policies.specs import parse_policy_spec
from parcat.resources import available_cpus
from parcat.rollout import EpisodeRunner, EpisodeTask
from parcat.stepping.base import InlineStepper
from parcat.stepping.process import ProcessStepper

SUITE = "parcat-bench"
SUITE_VERSION = 1
HIGHER_IS_BETTER = {"rollout_agent_steps_per_s": True, "agent_overhead_us": False,
                    "train_collection_steps_per_s": True}
"""Direction of every figure; ``speedup_jobs_N`` figures are higher-is-better."""


@dataclass(frozen=True)
class Change:
    """One figure compared with the previous record."""

    figure: str
    previous: float
    current: float
    relative: float
    """(current - previous) / previous, signed so that positive is better."""
    regression: bool


def run_suite(quick: bool = False, max_jobs: int | None = None) -> dict[str, Any]:
    """Measure every figure of the suite; return a history record."""
    scale = 1 if quick else 3
    figures: dict[str, float] = {}
    figures["rollout_agent_steps_per_s"] = _rollout(scale)
    for jobs, speedup in _episode_scaling(scale, max_jobs or available_cpus()).items():
        figures[f"speedup_jobs_{jobs}"] = speedup
    figures["agent_overhead_us"] = _agent_overhead(scale)
    figures["train_collection_steps_per_s"] = _train_collection(scale)
    return {
        "suite": SUITE, "suite_version": SUITE_VERSION,
        "time": datetime.now(timezone.utc).isoformat(), "quick": quick,
        "machine": {"host": socket.gethostname(), "cpus": available_cpus(),
                    "platform": platform.platform(), "python": platform.python_version()},
        "versions": _versions(), "git_commit": _git_commit(), "figures": figures,
    }


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _rollout(scale: int) -> float:
    mission = load_mission("harvest", {"agents": 24, "size": 32, "resources": 40,
                                       "max_steps": 200})
    runner = EpisodeRunner()
    tasks = [EpisodeTask(mission, (parse_policy_spec("random"),), 0, i) for i in range(2 * scale)]
    runner.run(tasks[0])
    seconds = _timed(lambda: [runner.run(t) for t in tasks])
    runner.close()
    return len(tasks) * 200 * 24 / seconds


def _episode_scaling(scale: int, max_jobs: int) -> dict[int, float]:
    # CPU-bound episodes (~0.1 s each, weights small enough to stay in cache): whole runs
    # are timed, worker start-up included
    mission = load_mission("harvest", {"max_steps": 200})
    config = EvalConfig((mission,), (parse_policy_spec("mlp,width=256,depth=2"),),
                        episodes=4 * scale * max(1, max_jobs // 2), seed=0)
    times: dict[int, float] = {}
    # start the fork server first: it is paid once per program, not once per run
    evaluate(EvalConfig((mission,), config.policies, episodes=1, seed=0),
             RunOptions(jobs=1, executor=ExecutorKind.PROCESS))
    for jobs in sorted({1, *range(2, max_jobs + 1)}):
        options = RunOptions(jobs=jobs, executor=ExecutorKind.INLINE if jobs == 1
                             else ExecutorKind.PROCESS)
        start = time.perf_counter()
        evaluate(config, options)
        times[jobs] = time.perf_counter() - start
    return {jobs: times[1] / t for jobs, t in times.items()}


def _agent_overhead(scale: int) -> float:
    mission = load_mission("goal_tasks", {"agents": 2, "max_steps": 500})
    task = EpisodeTask(mission, (parse_policy_spec("noop"),), 0, 0)
    measured: dict[str, float] = {}
    for name, stepper in (("inline", InlineStepper()), ("process", ProcessStepper(1))):
        runner = EpisodeRunner(stepper)
        runner.run(task)
        runs = []
        for _ in range(scale + 1):
            start = time.perf_counter()
            runner.run(task)
            runs.append(time.perf_counter() - start)
        measured[name] = min(runs)
        runner.close()
    # one of the two agents is handed to the worker each step
    return max(0.0, (measured["process"] - measured["inline"]) / 500 * 1e6)


def _train_collection(scale: int) -> float:
    import numpy as np

    from parcat.train.vecenv import VecEnv

    mission = load_mission("goal_tasks", {"agents": 2, "max_steps": 50})
    with VecEnv(mission, 2, 8, seed=0) as vec:
        vec.reset(0)
        rng = np.random.default_rng(0)
        steps = 100 * scale
        actions = [{a: rng.integers(5, size=vec.num_envs) for a in vec.agents}
                   for _ in range(steps)]
        def collect() -> None:
            for step_actions in actions:
                vec.step(step_actions)

        seconds = _timed(collect)
        return steps * vec.num_envs / seconds


def compare_records(previous: dict[str, Any], current: dict[str, Any],
                    threshold: float) -> list[Change]:
    """Each figure both records have, with whether it got worse by more than ``threshold``."""
    changes = []
    for figure, now in current["figures"].items():
        before = previous.get("figures", {}).get(figure)
        if before is None or before == 0:
            continue
        better_up = HIGHER_IS_BETTER.get(figure, True)
        relative = (now - before) / abs(before) * (1 if better_up else -1)
        changes.append(Change(figure, before, now, relative, relative < -threshold))
    return changes


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every record of a history file (JSON lines); an absent file is an empty history."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a line (one ``write`` of a whole line, so lines never interleave)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _versions() -> dict[str, str]:
    import gymnasium
    import numpy

    return {"parcat": __version__, "numpy": numpy.__version__,
            "gymnasium": gymnasium.__version__}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).parent, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
