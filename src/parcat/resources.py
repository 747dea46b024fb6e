"""Measuring the machine: CPUs this process may use, GPUs, and BLAS thread limits."""

from __future__ import annotations

import math
import os
from pathlib import Path

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
        if controllers == "pids":
            base = root / "pids"
        elif controllers == "":
            base = root
        else:
            continue
        folder = base / path.lstrip("/")
        while True:
            try:
                limit = (folder / "pids.max").read_text().strip()
                if limit != "max":
                    left = int(limit) - int((folder / "pids.current").read_text())
                    headroom = left if headroom is None else min(headroom, left)
            except (OSError, ValueError):
                pass
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
