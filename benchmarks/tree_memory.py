"""Peak memory and CPU time of a whole command: the process and every process below it.

Samples every ``--every-ms`` milliseconds the sum of PSS (each shared page counted once
across the processes that share it: what they cost the machine together) and of RSS (an
upper bound), and each process's CPU time (user + system, as last seen: a process that
lived less than a sample is missed); prints the peaks, the CPU seconds and the wall time.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/tree_memory.py [--repeats N] \\
        -- .venv/bin/python -m parcat eval -m harvest ...
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import psutil


def peak_memory(command: list[str], every_s: float = 0.02) -> tuple[float, float, float, float]:
    """(peak PSS MB, peak RSS MB, wall seconds, CPU seconds) of ``command`` and its
    descendants."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = psutil.Process(child.pid)
    peak_pss = peak_rss = 0.0
    cpu: dict[int, float] = {}
    while child.poll() is None:
        pss = rss = 0.0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            break
        for process in tree:
            try:
                info = process.memory_full_info()
                times = process.cpu_times()
            except psutil.Error:
                continue
            cpu[process.pid] = times.user + times.system
            pss += getattr(info, "pss", info.rss)
            rss += info.rss
        peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
        time.sleep(every_s)
    if child.wait() != 0:
        raise RuntimeError(f"the command failed: {' '.join(command)}")
    return peak_pss / 2**20, peak_rss / 2**20, time.perf_counter() - start, sum(cpu.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every-ms", type=float, default=20.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    runs = [peak_memory(command, args.every_ms / 1000) for _ in range(args.repeats)]
    pss, rss, wall, cpu = (statistics.median(column) for column in zip(*runs, strict=True))
    print(f"peak PSS {pss:.0f} MB, peak RSS {rss:.0f} MB, {cpu:.2f} s of CPU (all processes "
          f"together), {wall:.2f} s: medians of {args.repeats}")


if __name__ == "__main__":
    main()
