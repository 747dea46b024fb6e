"""The commands README tells users to run, timed whole, quiet and beside a busy neighbour.

Each comparison runs its commands interleaved repeat by repeat (order alternating) and
quotes the median of per-repeat ratios, so slow drift cancels. Every comparison runs twice
in one go: with no other load, and with one foreign busy process (``python -c 'while 1:
pass'``, started by this script) — a laptop with a browser, a shared CI runner.

1. ``parcat eval -m harvest`` (defaults) vs ``--jobs 1``.
2. ``parcat eval -m harvest -n 64 -p mlp,width=256 --jobs 2`` vs ``--jobs 1``, and vs the
   same work split over two ``--jobs 1`` processes started together from the shell
   (``-n 32`` each, two seeds).

0. This machine's own ceiling for two processes: the same CPU-bound numpy loop (a 256-wide
   tanh layer, as ``mlp,width=256`` steps) run once alone and as two copies at once. Two
   virtual CPUs that share a physical core, a cache or a memory bus give less than 2x;
   no parcat plan can beat this figure.

Targets (issue 13): parallel ≤ 1.05x the sequential wall time everywhere; 64 episodes
≥ 1.7x faster on a quiet machine; ``--jobs 2`` at least as fast as the shell split.

    .venv/bin/python benchmarks/field.py [--repeats N] [--only quiet|load]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from neighbour import busy_neighbour

ROOT = Path(__file__).resolve().parents[1]
PARCAT = [sys.executable, "-m", "parcat"]
QUIET = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def command(*args: str) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        subprocess.run([*PARCAT, *args], cwd=ROOT, check=True, **QUIET)  # type: ignore[arg-type]
        return time.perf_counter() - start
    return run


def shell_split(*args: str) -> Callable[[], float]:
    """Two ``--jobs 1`` processes of half the episodes each, started together."""
    def run() -> float:
        start = time.perf_counter()
        procs = [subprocess.Popen([*PARCAT, *args, "--seed", str(seed)], cwd=ROOT, **QUIET)  # type: ignore[call-overload]
                 for seed in (1, 2)]
        for proc in procs:
            if proc.wait() != 0:
                raise RuntimeError("a shell-split run failed")
        return time.perf_counter() - start
    return run


CEILING_LOOP = ("import numpy as np\n"
                "rng = np.random.default_rng(0)\n"
                "w = rng.random((256, 256), dtype=np.float32) / 256\n"
                "v = rng.random((4, 256), dtype=np.float32)\n"
                "for _ in range(40000): v = np.tanh(v @ w)\n")


def copies(count: int) -> Callable[[], float]:
    """``count`` copies of :data:`CEILING_LOOP` started together (one BLAS thread each)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}

    def run() -> float:
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", CEILING_LOOP], env=env)
                 for _ in range(count)]
        if any(proc.wait() != 0 for proc in procs):
            raise RuntimeError("a ceiling loop failed")
        return time.perf_counter() - start
    return run


def compare(label: str, variants: dict[str, Callable[[], float]], repeats: int,
            limit: Callable[[dict[str, list[float]]], str] | None = None) -> None:
    """Time the variants interleaved; print medians, paired ratios to the first and, given
    ``limit``, what it says of the times (the best any plan could do)."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    for repeat in range(repeats):
        for name in order if repeat % 2 == 0 else order[::-1]:
            times[name].append(variants[name]())
    base = order[0]
    print(f"  {label}")
    for name in order:
        line = f"    {name:<44} {statistics.median(times[name]):7.2f} s"
        if name != base:
            ratio = statistics.median(b / a for a, b in zip(times[base], times[name],
                                                            strict=True))
            line += f"   {name.split()[0]} / {base.split()[0]} = {ratio:.3f}x"
        print(line, flush=True)
    if limit is not None:
        print(f"    limit: {limit(times)}", flush=True)


def default_plans(count: int) -> str:
    """What the default plan of ``eval -m harvest`` is right now, ``count`` times over:
    a loaded run can only lose to ``--jobs 1`` if the plan missed the busy neighbour."""
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        shown = subprocess.run([*PARCAT, "plan", "-m", "harvest", "-f", "json"], cwd=ROOT,
                               check=True, capture_output=True, text=True).stdout
        plan = json.loads(shown)
        seen[f"{plan['executor']} x{plan['episode_workers']}"] += 1
    return ", ".join(f"{plan} in {n} of {count}" for plan, n in seen.most_common())


def suite(repeats: int) -> None:
    print(f"  the default plan of eval -m harvest: {default_plans(repeats * 2)}", flush=True)
    compare("0. this machine's ceiling (2 copies of work = 2x the work; ceiling = 2 / ratio)", {
        "one copy": copies(1),
        "two copies at once": copies(2),
    }, repeats)
    compare("1. parcat eval -m harvest", {
        "sequential (--jobs 1)": command("eval", "-m", "harvest", "--jobs", "1"),
        "default (no --jobs)": command("eval", "-m", "harvest"),
    }, repeats)
    big = ("eval", "-m", "harvest", "-p", "mlp,width=256")
    compare("2. parcat eval -m harvest -n 64 -p mlp,width=256", {
        "sequential (--jobs 1)": command(*big, "-n", "64", "--jobs", "1"),
        "parallel (--jobs 2)": command(*big, "-n", "64", "--jobs", "2"),
        "shell split (2 x --jobs 1 -n 32)": shell_split(*big, "-n", "32", "--jobs", "1"),
    }, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=["quiet", "load"])
    args = parser.parse_args()
    with open("/proc/loadavg") as handle:
        print(f"load average before: {handle.read().split()[:3]}")
    if args.only != "load":
        print("no other load")
        suite(args.repeats)
    if args.only != "quiet":
        with busy_neighbour():
            time.sleep(0.5)
            print("one foreign busy process")
            suite(args.repeats)


if __name__ == "__main__":
    main()
