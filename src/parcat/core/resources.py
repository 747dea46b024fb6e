"""Measuring the machine: CPUs this process may use, how many of them other processes keep
busy right now, GPUs, and BLAS thread limits."""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

FREE_CPUS_VARIABLE = "PARCAT_FREE_CPUS"
"""Set to a number to fix what :func:`free_cpus` reports (tests, or a machine whose load
parcat should not second-guess); ``all`` means every available CPU."""

BLAS_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.floor(quota)))
    return max(1, cpus)


def other_busy_cpus(samples: int = 7, gap_s: float = 0.0005) -> int:
    """CPUs that other processes keep busy right now: the median over a few milliseconds
    of the machine's runnable tasks (``/proc/loadavg``; a short-lived one rarely counts),
    less this process. Compare it with :func:`os.cpu_count`, not a container's quota."""
    counts = []
    for index in range(samples):
        try:
            running = Path("/proc/loadavg").read_text().split()[3].split("/")[0]
            counts.append(int(running))
        except (OSError, IndexError, ValueError):
            return 0
        if index < samples - 1:
            time.sleep(gap_s)
    return max(0, int(statistics.median(counts)) - 1)


def free_cpus(cpus: int | None = None) -> int:
    """CPUs this process can use right now: :func:`available_cpus` (or ``cpus``), less
    those other processes keep busy (at least 1). ``PARCAT_FREE_CPUS`` overrides it."""
    cpus = available_cpus() if cpus is None else cpus
    fixed = os.environ.get(FREE_CPUS_VARIABLE, "").strip()
    if fixed == "all":
        return cpus
    if fixed:
        with contextlib.suppress(ValueError):
            return max(1, min(cpus, int(fixed)))
    machine = os.cpu_count() or cpus
    return max(1, min(cpus, machine - other_busy_cpus()))


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cgroup CPU limit in CPUs (v2 ``cpu.max`` or v1 quota/period), if one is set."""
    try:
        text = (root / "cpu.max").read_text().split()
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def pids_headroom(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Processes and threads this process's pids cgroup still allows (the tightest limit
    of it and its ancestors, cgroup v1 or v2), or ``None`` when nothing limits them."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    headroom: int | None = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers not in ("pids", ""):
            continue
        base = root / "pids" if controllers else root
        folder = base / path.lstrip("/")
        while True:
            with contextlib.suppress(OSError, ValueError):
                limit = (folder / "pids.max").read_text().strip()
                if limit != "max":
                    left = int(limit) - int((folder / "pids.current").read_text())
                    headroom = left if headroom is None else min(headroom, left)
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return headroom


def visible_gpus() -> int:
    """GPUs named by ``CUDA_VISIBLE_DEVICES``, or found under /proc/driver/nvidia; 0 if none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


_blas_controller: Any = None


def blas_limited(threads: int) -> Any:
    """A context in which BLAS runs ``threads`` threads (as before, after): on small
    matrices more threads than the plan gives cost far more than they give."""
    global _blas_controller
    if _blas_controller is None:
        from threadpoolctl import ThreadpoolController

        _blas_controller = ThreadpoolController()
    return _blas_controller.limit(limits=threads, user_api="blas")


def limit_blas_threads(threads: int) -> None:
    """Cap BLAS/OpenMP threads in this process (libraries loaded now and later)."""
    for name in BLAS_VARIABLES:
        os.environ[name] = str(threads)
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:  # optional at run time; the variables still apply to new imports
        return
    # only touch the pools when needed: setting a limit can start (spinning) BLAS threads
    if any(pool.get("num_threads") != threads for pool in threadpool_info()):
        threadpool_limits(limits=threads)
