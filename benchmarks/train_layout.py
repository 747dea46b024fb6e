"""`parcat train`'s planned layout against the in-process run: whole commands.

1. What the layout planner's constants (``parcat.parallel.planner.PARKED_HANDOFF_S``,
   ``FIRST_WORKER_S``, ``NEXT_WORKER_S``) stand on: the extra time of a vector step whose
   one environment (goal_tasks) steps in a parked, or a spinning, environment worker instead
   of in-process (``vec.step`` + ``vec.gather("obs")``, interleaved, medians); and, in a
   fresh process, the time to start the first environment worker (fork server included) and
   a second.
2. Whole ``parcat train`` commands timed end to end as a user runs them (start, imports,
   planning, workers, epochs, checkpoints, exit), interleaved repeat by repeat with the
   order alternating; ratios are medians of per-repeat ratios against ``--env-workers 0``
   in the same repeat:
   a. ``-c configs/train.yaml`` (goal_tasks, a ~20 us step): the default (planned) layout,
      ``--env-workers 0``, ``--env-workers 1`` (what configs/train.yaml used to force) and
      ``--mode async``.
   b. a 0.5 ms-step environment (``BusyStep-v0`` of ``train.py``, 8 environments, 10 epochs
      of 50 steps, 50 train steps a round): default, ``--env-workers 0``, ``--mode async``.
   The plan each default run chose is read from its ``--format json`` output.

Quiet, or with ``--load``: one foreign busy process (``python -c 'while 1: pass'``) that
this script starts and stops. The CPU that processes outside this script's tree used
meanwhile is printed (the busy process is in the tree: it is not counted).

    PYTHONPATH=src .venv/bin/python benchmarks/train_layout.py [--repeats N] [--load]
        [--sections 12]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from neighbour import busy_neighbour

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import harness  # noqa: E402

GOAL = {"agents": 2, "task_kind": "direction", "max_steps": 50}
BUSY_MISSION = ("name: busy500\nenv: gymnasium:train:BusyStep-v0\nmax_steps: 200\n"
                "params:\n  busy_us: 500\n")
BUSY_ARGS = ["--epochs", "10", "--steps-per-epoch", "50", "--envs-per-worker", "8",
             "--gradient-steps", "50"]


def child_env() -> dict[str, str]:
    """This tree's parcat (``src``) and ``train.py`` (BusyStep-v0) for the commands."""
    paths = [str(ROOT / "src"), str(HERE), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


# -- 1. the planner's constants -------------------------------------------------------------


def step_us(vec: Any, steps: int) -> float:
    """Microseconds of one ``vec.step`` + ``vec.gather("obs")``, zero actions."""
    import numpy as np

    vec.reset()
    actions = {a: np.zeros(vec.num_envs, np.int64) for a in vec.agents}
    start = time.perf_counter()
    for _ in range(steps):
        vec.step(actions)
        vec.gather("obs")
    return (time.perf_counter() - start) / steps * 1e6


def handoff(repeats: int) -> dict[str, float]:
    """Median extra us a step of one environment in a parked / spinning worker."""
    from parcat.envs.missions import load_mission
    from parcat.train.vecenv import VecEnv

    mission = load_mission("goal_tasks", GOAL)
    vecs = {"inline": VecEnv(mission, 0, 1, 0),
            "parked": VecEnv(mission, 1, 1, 0, spin=False),
            "spinning": VecEnv(mission, 1, 1, 0, spin=True)}
    try:
        times: dict[str, list[float]] = {name: [] for name in vecs}
        for repeat in range(repeats):
            order = list(vecs) if repeat % 2 == 0 else list(vecs)[::-1]
            for name in order:
                times[name].append(step_us(vecs[name], 2000))
    finally:
        for vec in vecs.values():
            vec.close()
    return {name: statistics.median(a - b for a, b in zip(times[name], times["inline"],
                                                           strict=True))
            for name in ("parked", "spinning")} | {"inline": statistics.median(times["inline"])}


def startup_probe() -> None:
    """In a fresh process: ms to the first environment worker ready, then a second."""
    from parcat.envs.missions import load_mission
    from parcat.train.vecenv import VecEnv

    mission = load_mission("goal_tasks", GOAL)
    figures = []
    for _ in range(2):
        start = time.perf_counter()
        VecEnv(mission, 1, 1, 0).close()
        figures.append((time.perf_counter() - start) * 1e3)
    print(json.dumps(figures))


def startup(repeats: int) -> tuple[float, float]:
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", "import train_layout; "
                              "train_layout.startup_probe()"], env=child_env(), check=True,
                             capture_output=True, text=True, cwd=HERE).stdout
        runs.append(json.loads(out))
    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))


def constants(repeats: int) -> None:
    monitor = harness.LoadMonitor()
    figures = handoff(repeats)
    first, second = startup(repeats)
    print("1. the planner's constants (goal_tasks, 1 environment, 2000 steps a repeat)")
    print(f"   in-process vector step              {figures['inline']:8.1f} us")
    print(f"   + parked worker handoff             {figures['parked']:8.1f} us  (PARKED_HANDOFF_S)")
    print(f"   + spinning worker handoff           {figures['spinning']:8.1f} us")
    print(f"   first worker ready, fresh process   {first:8.0f} ms  (FIRST_WORKER_S)")
    print(f"   second worker ready                 {second:8.0f} ms  (NEXT_WORKER_S)")
    print(f"   other processes used {monitor.other():.2f} cores", flush=True)


# -- 2. whole commands ----------------------------------------------------------------------


def command(base: list[str], extra: list[str], run_dir: str) -> tuple[float, dict[str, Any]]:
    """Wall seconds of one whole ``parcat train`` command, and its plan."""
    args = [sys.executable, "-m", "parcat", "train", *base, *extra, "--run-dir", run_dir,
            "--format", "json"]
    start = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, env=child_env(), capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return wall, json.loads(done.stdout)["plan"]


def case(title: str, base: list[str], variants: dict[str, list[str]], repeats: int,
         tmp: Path) -> None:
    monitor = harness.LoadMonitor()
    walls: dict[str, list[float]] = {name: [] for name in variants}
    plans: dict[str, dict[str, Any]] = {}
    for repeat in range(repeats):
        order = list(variants) if repeat % 2 == 0 else list(variants)[::-1]
        for name in order:
            wall, plans[name] = command(base, variants[name], str(tmp / f"r{repeat}{name}"))
            walls[name].append(wall)
    print(f"{title}\n   other processes used {monitor.other():.2f} cores")
    for name, times in walls.items():
        ratio = statistics.median(a / b for a, b in zip(times, walls["--env-workers 0"],
                                                        strict=True))
        plan = plans[name]
        print(f"   {name:<18} {statistics.median(times) * 1e3:7.0f} ms  {ratio:6.3f} x  "
              f"(planned {plan['env_workers']} worker(s), spin {plan['spin']})")
    print("   default plan: " + " | ".join(plans["default"]["reasons"]), flush=True)


def commands(repeats: int, tmp: Path) -> None:
    print("2. whole parcat train commands: median wall, paired median ratio to "
          "--env-workers 0", flush=True)
    config = ["-c", "configs/train.yaml"]
    case("a. -c configs/train.yaml (goal_tasks)", config,
         {"default": [], "--env-workers 0": ["--env-workers", "0"],
          "--env-workers 1": ["--env-workers", "1"], "--mode async": ["--mode", "async"]},
         repeats, tmp)
    busy = tmp / "busy500.yaml"
    busy.write_text(BUSY_MISSION)
    case(f"b. -m busy500.yaml {' '.join(BUSY_ARGS)} (0.5 ms step)",
         ["-m", str(busy), *BUSY_ARGS],
         {"default": [], "--env-workers 0": ["--env-workers", "0"],
          "--mode async": ["--mode", "async"]}, repeats, tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--load", action="store_true", help="one foreign busy process")
    parser.add_argument("--sections", default="12")
    args = parser.parse_args()
    with busy_neighbour(args.load) as busy:
        print(f"parcat train layout: {os.cpu_count()} CPUs, {args.repeats} interleaved repeats, "
              f"{'one foreign busy process' if busy else 'no load of our own'}; loadavg "
              f"{Path('/proc/loadavg').read_text().split()[0]}", flush=True)
        if "1" in args.sections:
            constants(args.repeats)
        if "2" in args.sections:
            with tempfile.TemporaryDirectory(prefix="parcat-layout") as tmp:
                commands(args.repeats, Path(tmp))


if __name__ == "__main__":
    main()
