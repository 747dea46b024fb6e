"""One ``parcat`` command under two source trees (or two dependency sets), interleaved.

``A`` and ``B`` are ``PYTHONPATH`` values (e.g. another checkout's ``src``, or a folder
holding another version of a dependency put before ``src``); ``benchmarks`` is appended to
both, so ``wait_policy:Wait`` resolves. Printed as :func:`field.compare` prints: each side's
median wall time and the median of per-repeat ratios B/A (below 1: B is faster)::

    python benchmarks/ab.py REPEATS A B -- ARGS...
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from field import PARCAT, QUIET, compare

HERE = Path(__file__).resolve().parent


def under(path: str, args: list[str]) -> Callable[[], float]:
    """``parcat ARGS`` with ``PYTHONPATH=path`` (and this folder), timed whole."""
    env = {**os.environ, "PYTHONPATH": f"{path}:{HERE}"}

    def run() -> float:
        start = time.perf_counter()
        subprocess.run([*PARCAT, *args], env=env, check=True, **QUIET)  # type: ignore[arg-type]
        return time.perf_counter() - start
    return run


def main() -> None:
    if len(sys.argv) < 6 or sys.argv[4] != "--":
        sys.exit(__doc__)
    repeats, a, b, args = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[5:]
    compare(" ".join(args), {f"A ({a})": under(a, args), f"B ({b})": under(b, args)}, repeats)


if __name__ == "__main__":
    main()
