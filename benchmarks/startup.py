"""How long the CLI takes to start: ``parcat --help``, ``parcat --version``, ``parcat eval --help``.

Each command is run whole, as a user runs it (``python -m parcat ...``: interpreter start,
imports, help text, exit), N times, interleaved; the median wall time of each is printed.
``--load`` starts one foreign busy process (``python -c 'while 1: pass'``) for the duration.

    .venv/bin/python benchmarks/startup.py [--repeats N] [--load]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from neighbour import busy_neighbour

COMMANDS = (["--help"], ["--version"], ["eval", "--help"])


def run(args: list[str]) -> float:
    """Wall seconds of one whole ``python -m parcat ARGS``."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "parcat", *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--load", action="store_true", help="one foreign busy process")
    args = parser.parse_args()
    with busy_neighbour(args.load) as busy:
        run(["--version"])  # warm the file cache and the bytecode
        times: dict[str, list[float]] = {" ".join(c): [] for c in COMMANDS}
        for _ in range(args.repeats):
            for command in COMMANDS:
                times[" ".join(command)].append(run(command))
        print(f"parcat start-up, {args.repeats} interleaved repeats, {os.cpu_count()} CPUs, "
              f"{'one foreign busy process' if busy else 'no other load of ours'}, "
              f"load average {os.getloadavg()[0]:.2f}")
        for name, values in times.items():
            print(f"  parcat {name:<12} median {statistics.median(values) * 1e3:5.0f} ms  "
                  f"(min {min(values) * 1e3:.0f}, max {max(values) * 1e3:.0f})")


if __name__ == "__main__":
    main()
