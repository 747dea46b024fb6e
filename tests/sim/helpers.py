"""Helpers for the simulator's tests: configs written to files, and leftover checks."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from parcat.ipc.shm_names import block_creator, this_creator
from parcat.sim import SimConfig, load_sim_config
from tests.conftest import worker_children


def write_yaml(path: Path, data: Any) -> Path:
    """Write ``data`` as YAML to ``path`` (folders created); return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sim_data(agents: list[dict[str, Any]], mission: str = "evade", period: float = 0.01,
             iters: int = 50, params: dict[str, Any] | None = None,
             **extra: Any) -> dict[str, Any]:
    """The mapping of a sim config file (no output files unless asked for)."""
    data: dict[str, Any] = {
        "environment": {"mission": mission, "period": period, "params": params or {}},
        "agents": agents,
        "iters": iters,
        "seed": 0,
        "output": None,
    }
    data.update(extra)
    return data


def make_config(tmp_path: Path, agents: list[dict[str, Any]], **kwargs: Any) -> SimConfig:
    """Write a sim config to ``tmp_path/sim.yaml`` and load it."""
    return load_sim_config(write_yaml(tmp_path / "sim.yaml", sim_data(agents, **kwargs)))


def worker_processes() -> set[int]:
    """Pids of live descendants, without the fork server and resource tracker."""
    return {proc.pid for proc in worker_children()}


def my_blocks() -> set[str]:
    """Shared-memory blocks this process created and has not unlinked."""
    folder = Path("/dev/shm")
    me = this_creator()
    return {p.name for p in folder.iterdir() if block_creator(p.name) == me} \
        if folder.is_dir() else set()


def settles(predicate: Any, timeout: float = 5.0) -> bool:
    """Whether ``predicate()`` becomes true within ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())
