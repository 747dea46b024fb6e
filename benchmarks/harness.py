"""The measurement harness shared by ``parallel.py`` and ``train.py``.

A quiet-machine check (:class:`LoadMonitor`, :func:`settle`), interleaved repeats that are
re-run when other processes load the machine (:func:`interleave`), paired ratios of
variants that ran back to back (:func:`paired`), a table that prints rows as they come and
counts targets (:class:`Table`), worker-memory probes (:func:`memory_of`,
:func:`bare_memory`), and the options and first line every run has (:func:`options`,
:func:`begin`).

The scripts run as ``python benchmarks/X.py``, so this directory is on ``sys.path`` and
they import this module as ``harness``. Their forkserver/spawn workers re-import the script
(as ``__mp_main__``) and with it this module: keep its top level to definitions.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

QUIET_CORES = 0.15
"""Other processes using less CPU than this (in cores) count as a quiet machine."""
BARE_CODE = "import sys, numpy, gymnasium; print('ready', flush=True); sys.stdin.read()"
"""A bare process to compare a worker's memory with: it imports what every worker does."""


# -- load of other processes ----------------------------------------------------------------


class LoadMonitor:
    """CPU used by processes outside this benchmark's process tree, over a time window.

    System-wide busy time minus the CPU of this process and its descendants (workers
    that ended are counted through their reaper's ``children_*`` times).
    """

    def __init__(self) -> None:
        self.start()

    @staticmethod
    def _tree_cpu() -> float:
        me = psutil.Process()
        total = 0.0
        for process in (me, *me.children(recursive=True)):
            try:
                t = process.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    @staticmethod
    def _system() -> tuple[float, float]:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system + t.irq + t.softirq, t.steal

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.busy0, self.steal0 = self._system()
        self.tree0 = self._tree_cpu()

    def stop(self) -> tuple[float, float]:
        """(other processes' CPU in cores, steal as a fraction of all CPUs) since start."""
        wall = max(time.perf_counter() - self.t0, 1e-9)
        busy, steal = self._system()
        other = (busy - self.busy0) - (self._tree_cpu() - self.tree0)
        cpus = psutil.cpu_count() or 1
        return max(0.0, other / wall), (steal - self.steal0) / wall / cpus

    def other(self) -> float:
        """Other processes' CPU, in cores, since start."""
        return self.stop()[0]


def settle(limit_s: float, say_if_loaded: bool = False) -> LoadMonitor:
    """Wait (up to ``limit_s``) for a quiet second; return a monitor started afterwards.

    With ``say_if_loaded``, print a line when the machine is still loaded at the deadline.
    """
    deadline = time.perf_counter() + limit_s
    while limit_s > 0:
        other = LoadMonitor()
        time.sleep(1.0)
        cores = other.other()
        if cores < QUIET_CORES or time.perf_counter() > deadline:
            if say_if_loaded and cores >= QUIET_CORES:
                print(f"\n    [still {cores:.2f} cores used by other processes after "
                      f"{limit_s:.0f} s: measuring anyway]", flush=True)
            break
    return LoadMonitor()


# -- interleaved repeats --------------------------------------------------------------------


class Runs(dict[str, list[float]]):
    """Per-repeat figures of each variant, and how many repeats ran under outside load."""

    discarded = 0
    """Repeats thrown away (and run again) because other processes loaded the machine."""
    loaded = 0
    """Loaded repeats kept anyway (no retries left)."""
    labels: dict[str, str]
    """Each variant's row label, where the caller sets them."""


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def interleave(variants: dict[str, Callable[[], float]], repeats: int, retries: int,
               flip_on_retry: bool = False) -> Runs:
    """Call every variant once per repeat, alternating the order; collect what they return.

    A repeat during which other processes used ``QUIET_CORES`` or more is thrown away and
    run again, at most ``retries`` times in all; after that loaded repeats are kept and
    counted. The order flips with every repeat kept (so no variant always runs first after
    a switch), and with ``flip_on_retry`` with every repeat thrown away too.
    """
    runs = Runs({name: [] for name in variants})
    names = list(variants)
    while len(runs[names[0]]) < repeats:
        turn = len(runs[names[0]]) + (runs.discarded if flip_on_retry else 0)
        order = names if turn % 2 == 0 else names[::-1]
        monitor = LoadMonitor()
        row = {name: variants[name]() for name in order}
        if monitor.other() >= QUIET_CORES:
            if runs.discarded < retries:
                runs.discarded += 1
                continue
            runs.loaded += 1
        for name, value in row.items():
            runs[name].append(value)
    return runs


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def paired(runs: Runs, num: str, den: str, scale: float = 1.0) -> float:
    """Median over repeats of ``num / (scale * den)``: each pair ran back to back, so drift
    cancels."""
    return med([a / (scale * b) for a, b in zip(runs[num], runs[den], strict=True)])


# -- reporting ------------------------------------------------------------------------------


class Table:
    """Rows of figures, printed as they come; targets are checked and counted.

    Subclasses set the column widths and say how many digits a unit gets.
    """

    LABEL_WIDTH = 54
    VALUE_WIDTH = 10
    TARGET_WIDTH = 8

    def __init__(self) -> None:
        self.began = time.perf_counter()
        self.checks: list[tuple[str, bool]] = []
        self.noisy: list[str] = []

    def digits(self, unit: str) -> int:
        return 3

    def section(self, title: str, *notes: str) -> None:
        print(f"\n{title}", flush=True)
        for note in notes:
            print(f"    {note}", flush=True)

    def row(self, label: str, value: float, unit: str, target: str = "",
            ok: bool | None = None) -> None:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        line = (f"  {label:<{self.LABEL_WIDTH}} {value:>{self.VALUE_WIDTH},.{self.digits(unit)}f}"
                f" {unit:<8} {target:<{self.TARGET_WIDTH}} {verdict}")
        print(line.rstrip(), flush=True)
        if ok is not None:
            self.checks.append((label, ok))

    def load_line(self, name: str, text: str, other: float, runs: Runs | None = None) -> None:
        """Print ``[text]``, the load during ``name``; flag the figures above if it was loaded.

        Loaded: ``runs`` kept loaded repeats or, without ``runs``, ``other`` (cores used by
        other processes) reached ``QUIET_CORES``.
        """
        loaded = other >= QUIET_CORES if runs is None else runs.loaded > 0
        flag = "   <-- LOADED: figures above are disturbed" if loaded else ""
        print(f"    [{text}]{flag}", flush=True)
        if flag:
            self.noisy.append(name)

    def summary(self) -> None:
        """Targets met, the missed ones, sections under load; the time since construction."""
        passed = sum(ok for _, ok in self.checks)
        print(f"\n{passed}/{len(self.checks)} targets met", flush=True)
        for label, ok in self.checks:
            if not ok:
                print(f"  FAIL: {label.strip()}", flush=True)
        if self.noisy:
            print(f"  other processes loaded the machine during: {', '.join(self.noisy)}")
        print(f"total {time.perf_counter() - self.began:.0f} s")


# -- memory ---------------------------------------------------------------------------------


def memory_of(pid: int) -> tuple[float, float]:
    """(RSS, USS) in MB; USS is NaN where psutil cannot tell."""
    process = psutil.Process(pid)
    try:
        info = process.memory_full_info()
        return info.rss / 2**20, info.uss / 2**20
    except (psutil.AccessDenied, AttributeError):
        return process.memory_info().rss / 2**20, float("nan")


def bare_memory(samples: int = 3) -> tuple[float, float]:
    """(RSS, USS) in MB of a bare ``python -c "import numpy, gymnasium"``, medians of
    ``samples`` such processes, one after the other."""
    rss, uss = zip(*(_bare_memory() for _ in range(samples)), strict=True)
    return med(rss), med(uss)


def _bare_memory() -> tuple[float, float]:
    child = subprocess.Popen([sys.executable, "-c", BARE_CODE], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        return memory_of(child.pid)
    finally:
        child.communicate("")


# -- command line ---------------------------------------------------------------------------


def options(doc: str, quick_help: str, settle_s: float, settle_help: str
            ) -> argparse.ArgumentParser:
    """A parser (described by ``doc``'s first line) with ``--quick``, ``--repeats`` and
    ``--settle`` (seconds, ``settle_s`` by default)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    parser.add_argument("--settle", type=float, default=settle_s, help=settle_help)
    return parser


def begin(name: str, args: argparse.Namespace, quick_repeats: int,
          quick_settle_s: float) -> tuple[int, float]:
    """Print the run's first line; return the repeats and the seconds to settle.

    Unless ``--repeats`` says otherwise, 7 repeats (``quick_repeats`` with ``--quick``);
    ``--quick`` also caps the settling at ``quick_settle_s``.
    """
    repeats = args.repeats or (quick_repeats if args.quick else 7)
    settle_s = min(args.settle, quick_settle_s) if args.quick else args.settle
    print(f"parcat {name} benchmarks: {psutil.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}, {repeats} interleaved repeats, medians"
          + (" (--quick)" if args.quick else ""), flush=True)
    return repeats, settle_s
