"""Stopping a test's local Ray cluster so it leaves nothing behind (processes, temp dir)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import psutil


def ray_processes() -> list[psutil.Process]:
    """Every Ray process on the machine (raylet, GCS, workers)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if any(k in cmd for k in ("raylet", "gcs_server", "ray::", "default_worker.py")):
            found.append(proc)
    return found


def shutdown_and_clean(ray: Any, temp: str) -> list[dict[str, Any]]:
    """``ray.shutdown()``, wait for its processes to end, then remove ``temp`` (Ray's
    processes write their logs there until they exit, so removing it first leaves it
    recreated). Returns the processes still running after 10 s each."""
    ray.shutdown()
    stuck = []
    for proc in [p for p in ray_processes() if p.is_running()]:
        try:
            proc.wait(10)
        except psutil.TimeoutExpired:
            stuck.append(proc.info)
    shutil.rmtree(temp, ignore_errors=True)
    assert not Path(temp).exists()
    return stuck
