"""Stopping a test's local Ray cluster so it leaves nothing behind (processes, temp dir)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import psutil


def ray_processes(temp: str) -> list[psutil.Process]:
    """The Ray processes of the cluster whose temp dir is ``temp``: its GCS and raylet (their
    command lines name it) and what they started (workers, whose titles do not); other
    clusters on the machine (another test run's) are not this test's to judge."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if temp in cmd and any(k in cmd for k in ("raylet", "gcs_server")):
            with contextlib.suppress(psutil.Error):
                found += [proc, *proc.children(recursive=True)]
    return found


def shutdown_and_clean(ray: Any, temp: str) -> list[dict[str, Any]]:
    """``ray.shutdown()``, wait for its processes to end, then remove ``temp`` (Ray's
    processes write their logs there until they exit, so removing it first leaves it
    recreated). Returns the processes still running after 10 s each."""
    ray.shutdown()
    stuck = []
    for proc in [p for p in ray_processes(temp) if p.is_running()]:
        try:
            proc.wait(10)
        except psutil.TimeoutExpired:
            with contextlib.suppress(psutil.Error):
                stuck.append({"pid": proc.pid, "cmdline": proc.cmdline()})
    shutil.rmtree(temp, ignore_errors=True)
    assert not Path(temp).exists()
    return stuck
