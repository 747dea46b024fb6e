"""What isolating user code costs at ``--jobs 1``: whole ``parcat eval`` commands.

The same episodes (harvest, the random policy) are run twice per repeat, interleaved:
``-p random`` (parcat's own policy: runs inline in the parcat process) and
``-p foreign_policy:Random`` (the same class reached as ``module:Class``, i.e. code from
outside parcat: its episodes run in a worker process, started with the fork server, so an
``os._exit`` in it cannot end the run). Each command is timed end to end as a user runs it
(process start, imports, worker start-up, episodes, exit), for a 10-episode run and a
200-episode run, on a quiet machine and with one foreign busy process (``--load``).

    .venv/bin/python benchmarks/isolation.py [--repeats N] [--load]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from neighbour import busy_neighbour

HERE = Path(__file__).resolve().parent
COMMAND = [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "--jobs", "1", "--seed",
           "3", "--format", "json"]


def run(policy: str, episodes: int) -> float:
    """Wall seconds of one whole command."""
    start = time.perf_counter()
    subprocess.run([*COMMAND, "-p", policy, "-n", str(episodes)], cwd=HERE, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def paired(episodes: int, repeats: int) -> tuple[list[float], list[float]]:
    """Wall seconds of the inline and the isolated command, interleaved repeat by repeat."""
    inline: list[float] = []
    isolated: list[float] = []
    for repeat in range(repeats):
        order = [("random", inline), ("foreign_policy:Random", isolated)]
        for policy, times in order if repeat % 2 == 0 else order[::-1]:
            times.append(run(policy, episodes))
    return inline, isolated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--load", action="store_true", help="one foreign busy process")
    args = parser.parse_args()
    with busy_neighbour(args.load) as busy:
        print(f"isolation at --jobs 1, {args.repeats} interleaved repeats, "
              f"{'one foreign busy process' if busy else 'no other load'}")
        for episodes in (10, 200):
            inline, isolated = paired(episodes, args.repeats)
            ratios = [b / a for a, b in zip(inline, isolated, strict=True)]
            print(f"  -n {episodes:>3}: inline {statistics.median(inline) * 1e3:7.0f} ms, "
                  f"isolated {statistics.median(isolated) * 1e3:7.0f} ms, "
                  f"isolated / inline {statistics.median(ratios):.3f} x (paired median), "
                  f"extra {(statistics.median(isolated) - statistics.median(inline)) * 1e3:+.0f}"
                  " ms")


if __name__ == "__main__":
    main()
