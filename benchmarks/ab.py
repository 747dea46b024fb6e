"""One ``parcat`` command under two source trees (or two dependency sets), interleaved.

``A`` and ``B`` are ``PYTHONPATH`` values (e.g. another checkout's ``src``, or a folder
holding another version of a dependency put before ``src``); ``benchmarks`` is appended to
both, so ``wait_policy:Wait`` resolves. Printed: each side's median wall time and the
median of per-repeat ratios B/A (below 1: B is faster)::

    python benchmarks/ab.py REPEATS A B -- ARGS...
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(path: str, args: list[str]) -> float:
    """Seconds ``parcat ARGS`` takes with ``PYTHONPATH=path`` (and this folder)."""
    env = {**os.environ, "PYTHONPATH": f"{path}:{HERE}"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "parcat", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    if len(sys.argv) < 6 or sys.argv[4] != "--":
        sys.exit(__doc__)
    repeats, paths, args = int(sys.argv[1]), {"A": sys.argv[2], "B": sys.argv[3]}, sys.argv[5:]
    times: dict[str, list[float]] = {"A": [], "B": []}
    for repeat in range(repeats):
        for side in ("A", "B") if repeat % 2 == 0 else ("B", "A"):
            times[side].append(timed(paths[side], args))
    ratio = statistics.median(b / a for a, b in zip(times["A"], times["B"], strict=True))
    print(f"  {' '.join(args)}\n    A {statistics.median(times['A']):.3f} s  "
          f"B {statistics.median(times['B']):.3f} s  B/A {ratio:.3f}  ({repeats} repeats)")


if __name__ == "__main__":
    main()
