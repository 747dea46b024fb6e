"""Peak memory and CPU time of a whole command: the process and every process below it.

Samples every ``--every-ms`` milliseconds the sum of PSS (each shared page counted once
across the processes that share it: what they cost the machine together) and of RSS (an
upper bound), and each process's CPU time (user + system, as last seen: a process that
lived less than a sample is missed); prints the peaks, the CPU seconds and the wall time.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/tree_memory.py [--repeats N] \\
        [--per-process] -- .venv/bin/python -m parcat eval -m harvest ...

``--waiting`` (no command) measures issue 22's waiting workload (``wait_policy:Wait,ms=5``,
8 episodes x 4 agents x 50 steps) at ``--jobs 1``, by default and with ``--jobs 32
--parallel-policy``, and prints each peak over ``--jobs 1``'s (target: at most 3x). Memory
does not depend on the machine's load, so these figures can be taken on a busy machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil


def peak_memory(command: list[str], every_s: float = 0.02,
                processes: dict[str, float] | None = None) -> tuple[float, float, float, float]:
    """(peak PSS MB, peak RSS MB, wall seconds, CPU seconds) of ``command`` and its
    descendants; ``processes``, if given, gets each process's CPU seconds under its role
    (:func:`role`)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = psutil.Process(child.pid)
    peak_pss = peak_rss = 0.0
    cpu: dict[int, float] = {}
    roles: dict[int, str] = {}
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
            if processes is not None and process.pid not in roles:
                roles[process.pid] = role(process, root)
            pss += getattr(info, "pss", info.rss)
            rss += info.rss
        peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
        time.sleep(every_s)
    if child.wait() != 0:
        raise RuntimeError(f"the command failed: {' '.join(command)}")
    for pid, seconds in cpu.items():
        if processes is not None:
            processes[roles[pid]] = processes.get(roles[pid], 0.0) + seconds
    return peak_pss / 2**20, peak_rss / 2**20, time.perf_counter() - start, sum(cpu.values())


def role(process: psutil.Process, root: psutil.Process) -> str:
    """"parent", "fork server", "resource tracker" or "worker" (a fork server's child)."""
    if process.pid == root.pid:
        return "parent"
    try:
        line = " ".join(process.cmdline())
        parent = process.parent()
    except psutil.Error:
        return "worker"
    if "forkserver" in line:  # its children, the workers, have its command line
        return "fork server" if parent is not None and parent.pid == root.pid else "worker"
    if "resource_tracker" in line:
        return "resource tracker"
    return "worker" if parent is None or parent.pid != root.pid else "child"


WAIT = ("eval", "-m", "harvest", "--set", "agents=4", "--set", "max_steps=50", "-n", "8",
        "-p", "wait_policy:Wait,ms=5")
WAIT_PLANS = {"--jobs 1": ("--jobs", "1"), "default": (),
              "--jobs 32 --parallel-policy": ("--jobs", "32", "--parallel-policy")}


def waiting(repeats: int, every_s: float) -> None:
    """Peak memory of the waiting workload's three plans, against ``--jobs 1``'s."""
    root = Path(__file__).resolve().parents[1]
    os.environ["PYTHONPATH"] = f"{root / 'src'}:{root / 'benchmarks'}"  # finds wait_policy
    first: tuple[float, float] | None = None
    for name, flags in WAIT_PLANS.items():
        runs = [peak_memory([sys.executable, "-m", "parcat", *WAIT, *flags], every_s)
                for _ in range(repeats)]
        pss, rss = (statistics.median(column) for column in list(zip(*runs, strict=True))[:2])
        first = first or (pss, rss)
        print(f"{name:<28} peak PSS {pss:4.0f} MB ({pss / first[0]:.2f}x), peak RSS "
              f"{rss:4.0f} MB ({rss / first[1]:.2f}x): all processes together, medians of "
              f"{repeats}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every-ms", type=float, default=20.0)
    parser.add_argument("--per-process", action="store_true",
                        help="also each kind of process's CPU seconds (summed over repeats)")
    parser.add_argument("--waiting", action="store_true",
                        help="the waiting workload's plans against --jobs 1 (no command)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.waiting:
        waiting(args.repeats, args.every_ms / 1000)
        return
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command to measure after --, or --waiting")
    processes: dict[str, float] = {}
    runs = [peak_memory(command, args.every_ms / 1000, processes)
            for _ in range(args.repeats)]
    pss, rss, wall, cpu = (statistics.median(column) for column in zip(*runs, strict=True))
    print(f"peak PSS {pss:.0f} MB, peak RSS {rss:.0f} MB, {cpu:.2f} s of CPU (all processes "
          f"together), {wall:.2f} s: medians of {args.repeats}")
    if args.per_process:
        print("CPU seconds a run: " + ", ".join(
            f"{name} {seconds / args.repeats:.2f}" for name, seconds in sorted(processes.items())))


if __name__ == "__main__":
    main()
