"""Agent-level handoffs on a quiet and on a loaded machine: whole ``parcat eval`` commands.

One episode of harvest with 2 agents, 1,000 steps, played by ``work_policy:Work`` tuned to
~0.2 ms and to ~2 ms a step (calibrated here first), as
``--jobs 2 --parallel-policy --policy-strategy process`` (the episode's process steps one
agent, a policy worker the other) and as ``--jobs 1`` (both inline), interleaved repeat by
repeat; the figure is the paired median of (jobs 2 time / jobs 1 time). ``--load`` starts
one foreign busy process for the whole measurement (it ends by itself after ``--load-s``).
``PARCAT_FREE_CPUS=all`` keeps the plan at 2 jobs under load (otherwise the planner trims
``--jobs`` to the free CPUs and no handoff happens): this measures the handoff itself.
Targets: at most 1.05x of inline everywhere; the 2 ms policy at least 1.7x faster quiet.

    .venv/bin/python benchmarks/handoff_load.py [--repeats N] [--load]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
from neighbour import busy_neighbour
from work_policy import Work

from parcat.envs.base import AgentSpec

HERE = Path(__file__).resolve().parent
STEPS = 1000


AUTO = False
"""``--auto``: the command as users run it (the planner picks the strategy and sees the
machine's load), instead of a forced ``--policy-strategy process`` on a pinned plan."""


def command(reps: int, jobs: int) -> list[str]:
    strategy = [] if AUTO else ["--policy-strategy", "process"]
    return [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "--set", "agents=2",
            "--set", f"max_steps={STEPS}", "-n", "1", "--jobs", str(jobs), "--parallel-policy",
            *strategy, "-p", f"work_policy:Work,reps={reps}", "--seed", "3", "--format", "json"]


def reps_for(target_s: float) -> int:
    """Repetitions that make one step of :class:`Work` take about ``target_s``."""
    spec = AgentSpec("harvest", "a", 0, gymnasium.spaces.Box(0, 1, (3,)),
                     gymnasium.spaces.Discrete(5))
    policy = Work(spec, reps=100)
    policy.reset(0)
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(50):
            policy.step(None)
        samples.append((time.perf_counter() - start) / 50 / 100)
    return max(1, round(target_s / statistics.median(samples)))


def run(reps: int, jobs: int) -> float:
    """Wall seconds of one whole command."""
    env = dict(os.environ) if AUTO else dict(os.environ, PARCAT_FREE_CPUS="all")
    start = time.perf_counter()
    subprocess.run(command(reps, jobs), cwd=HERE, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def paired(reps: int, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds at --jobs 1 and at --jobs 2, interleaved."""
    one: list[float] = []
    two: list[float] = []
    for repeat in range(repeats):
        for jobs in [1, 2] if repeat % 2 == 0 else [2, 1]:
            (one if jobs == 1 else two).append(run(reps, jobs))
    return one, two


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--load", action="store_true", help="one foreign busy process")
    parser.add_argument("--load-s", type=float, default=900.0,
                        help="the busy process ends by itself after this many seconds")
    parser.add_argument("--auto", action="store_true",
                        help="the planner's own choice (no --policy-strategy, load seen)")
    args = parser.parse_args()
    global AUTO
    AUTO = args.auto
    policies = {"0.2 ms": reps_for(0.2e-3), "2 ms": reps_for(2e-3)}
    with busy_neighbour(args.load, args.load_s) as busy:
        print(f"handoffs, {args.repeats} interleaved repeats, "
              f"{'one foreign busy process' if busy else 'no other load'}; "
              f"load average before: {os.getloadavg()[0]:.2f}")
        for name, reps in policies.items():
            one, two = paired(reps, args.repeats)
            ratio = statistics.median(b / a for a, b in zip(one, two, strict=True))
            target = ratio <= 1.05 and (busy is not None or name != "2 ms" or ratio <= 1 / 1.7)
            print(f"  {name} policy (reps={reps}): --jobs 1 {statistics.median(one):6.2f} s, "
                  f"--jobs 2 {statistics.median(two):6.2f} s, jobs 2 / jobs 1 {ratio:.3f} x "
                  f"(speedup {1 / ratio:.2f}x) "
                  f"{'PASS' if target else 'FAIL'}", flush=True)
        print(f"  command: {' '.join(command(policies['2 ms'], 2)[1:])}")


if __name__ == "__main__":
    main()
