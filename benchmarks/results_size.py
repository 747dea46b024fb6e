"""Results at any size: what writing ``--output`` costs per episode, and memory before the
first episode as ``-n`` grows.

1. Whole ``parcat eval -m harvest -p random --set max_steps=1 --jobs 1`` commands with and
   without ``-o results.json``, for 100, 2,000 and 20,000 episodes, interleaved repeat by
   repeat; the ratio (with / without) is the paired median. Flat ratios mean writing costs
   the same per episode however many came before (issue 12's target: within 1.1x at 20,000).
2. Peak resident memory of the parcat process when its first episode finishes, for
   ``-n 1,000`` and ``-n 10,000,000`` (the run is then stopped): flat means no memory per
   episode is spent before the run starts.

    .venv/bin/python benchmarks/results_size.py [--repeats N] [--load]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from neighbour import busy_neighbour

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COMMAND = [sys.executable, "-m", "parcat", "eval", "-m", "harvest", "-p", "random", "--set",
           "max_steps=1", "--jobs", "1", "-f", "json", "--no-progress"]

FIRST_EPISODE = """
import resource, sys
from parcat.eval.evaluate import StopRun, evaluate, make_config
from parcat.parallel.run_options import RunOptions

def first(result):
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    raise StopRun

evaluate(make_config(["harvest"], ["random"], episodes=int(sys.argv[1])),
         RunOptions(jobs=1), on_result=first)
"""


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def write_cost(repeats: int) -> None:
    print("1. --output cost (whole commands, paired medians)")
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "results.json")
        for episodes in (100, 2_000, 20_000):
            plain: list[float] = []
            written: list[float] = []
            for repeat in range(repeats):
                order = [([], plain), (["-o", out], written)]
                for extra, times in order if repeat % 2 == 0 else order[::-1]:
                    times.append(timed([*COMMAND, "-n", str(episodes), *extra]))
            ratios = [w / p for p, w in zip(plain, written, strict=True)]
            print(f"  -n {episodes:>6}: without {statistics.median(plain):6.2f} s, with -o "
                  f"{statistics.median(written):6.2f} s, ratio {statistics.median(ratios):.3f} x")


def memory_before_first_episode() -> None:
    print("2. peak RSS of the parcat process when the first episode finishes")
    for episodes in (1_000, 10_000_000):
        proc = subprocess.run([sys.executable, "-c", FIRST_EPISODE, str(episodes)], cwd=ROOT,
                              check=True, capture_output=True, text=True)
        print(f"  -n {episodes:>10,}: {float(proc.stdout.split()[0]):7.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", action="store_true", help="one foreign busy process")
    args = parser.parse_args()
    with busy_neighbour(args.load) as busy:
        print(f"{'one foreign busy process' if busy else 'no other load'}")
        write_cost(args.repeats)
        memory_before_first_episode()


if __name__ == "__main__":
    main()
