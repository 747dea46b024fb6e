"""Shared helpers for the reliability tests: run the CLI as a real process, watch it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


SLOW_MISSION = """\
name: slow
description: ScriptedEnv with CPU-burning steps, for interrupting runs
env: tests.fakes:ScriptedEnv
params: {agents: 2, max_steps: 10, fail_at: -1, busy_us: 20000}
"""


def write_slow_mission(folder: Path) -> Path:
    """A mission whose episodes take ~0.2 s; returns its path."""
    path = folder / "slow.yaml"
    path.write_text(SLOW_MISSION)
    return path


def episodes_journaled(out: Path) -> int:
    """Episodes a running ``parcat eval -o out`` has appended to its journal so far."""
    from parcat.eval.results_file import journal_path

    try:
        lines = journal_path(out).read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0
    return max(0, lines - 1)  # the first line is the header


def shm_blocks(pids: Collection[int]) -> set[str]:
    """parcat's shared-memory blocks that processes ``pids`` made (a run's: the tests
    beside this one, under pytest-xdist, make their own)."""
    from parcat.ipc.shm_names import block_creator

    folder = Path("/dev/shm")
    creators = ((p.name, block_creator(p.name)) for p in folder.iterdir()) \
        if folder.is_dir() else iter(())
    return {name for name, creator in creators if creator is not None and creator.pid in pids}


def run_pids(pid: int) -> set[int]:
    """``pid`` and its live descendants: a run's processes now."""
    return {pid, *(p.pid for p in descendants(pid))}


def start_cli(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """``python -m parcat ARGS`` in its own process group, tests importable."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen(
        [sys.executable, "-m", "parcat", *args], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )


def descendants(pid: int) -> list[psutil.Process]:
    """Every live process below ``pid``."""
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if p.is_running()]
    except psutil.NoSuchProcess:
        return []


def wait_until(predicate, timeout: float, every: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it is true or ``timeout`` passes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def gone(pids: list[int]) -> bool:
    """Whether none of ``pids`` is alive (zombies count as gone)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Make sure nothing of a test's run survives the test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def loaded_numpy(pid: int) -> bool:
    """Whether the process has loaded numpy: parcat's own code runs, its handlers are set
    (before that, a signal is the interpreter's to handle). True once it has exited."""
    try:
        return "numpy" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return True


def session_processes(sid: int) -> list[psutil.Process]:
    """Live processes of the session ``sid`` (a run started with ``start_new_session``):
    the run and everything it started, orphans included."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found
