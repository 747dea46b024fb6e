"""The checkpoint format: a directory of arrays plus a JSON manifest.

One agent's policy::

    agent_0/
      manifest.json   {"format": "parcat.policy", "version": 1, "policy": "module:Class",
                       "kwargs": {...}, "agent_id": "agent_0", "mission": "harvest", ...}
      arrays.npz      the policy's state_dict()

A run (written by ``parcat train``) is a directory of such agent directories with its own
manifest (``"format": "parcat.run"``, ``"agents": {"agent_0": "agent_0", ...}``). Writes go
to a temporary sibling directory that is renamed into place, so a reader never sees half
a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parcat.errors import CheckpointError

POLICY_FORMAT = "parcat.policy"
RUN_FORMAT = "parcat.run"
VERSION = 1
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"
STATE = "state.npz"


@dataclass(frozen=True)
class PolicyCheckpoint:
    """One agent's saved policy."""

    policy: str
    """``module:Class`` that rebuilds the policy as ``Class(spec, **kwargs)``."""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Constructor arguments."""
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)
    """What ``load_state_dict`` receives."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Anything else worth keeping: mission, agent id, spaces, epoch, seed."""
    state: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Training state to continue from (optimizer, buffer, counters), in ``state.npz``;
    read only by ``parcat train --resume`` (:func:`load_state`)."""


def save_policy(path: str | Path, checkpoint: PolicyCheckpoint) -> Path:
    """Write one agent's checkpoint directory atomically; return its path."""
    path = Path(path)
    manifest = {
        "format": POLICY_FORMAT,
        "version": VERSION,
        "policy": checkpoint.policy,
        "kwargs": dict(checkpoint.kwargs),
        **dict(checkpoint.meta),
    }

    def write(tmp: Path) -> None:
        arrays: dict[str, Any] = {k: np.asarray(v) for k, v in checkpoint.arrays.items()}
        np.savez(tmp / ARRAYS, **arrays)
        if checkpoint.state:
            state: dict[str, Any] = {k: np.asarray(v) for k, v in checkpoint.state.items()}
            np.savez(tmp / STATE, **state)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))

    _write_dir_atomically(path, write)
    return path


def save_run(
    path: str | Path,
    agents: Mapping[str, PolicyCheckpoint],
    meta: Mapping[str, Any],
    keep: tuple[str, ...] = (),
) -> Path:
    """Write a run checkpoint (one policy directory per agent) atomically.

    Args:
        path: The run directory; replaced as a whole.
        agents: Each agent's policy (and training state).
        meta: Written into the run's manifest.
        keep: Files of the old directory carried into the new one (e.g. the metrics log).
    """
    path = Path(path)
    names = {agent_id: _dir_name(agent_id) for agent_id in agents}

    def write(tmp: Path) -> None:
        for name in keep:
            if (path / name).is_file():
                shutil.copy2(path / name, tmp / name)
        for agent_id, checkpoint in agents.items():
            save_policy(tmp / names[agent_id], checkpoint)
        manifest = {"format": RUN_FORMAT, "version": VERSION, "agents": names, **dict(meta)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))

    _write_dir_atomically(path, write)
    return path


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and check a checkpoint manifest.

    Raises:
        CheckpointError: no manifest, unreadable JSON, or an unknown format or version.
    """
    recover_swap(Path(path))
    file = Path(path) / MANIFEST
    if not file.is_file():
        raise CheckpointError(f"'{path}' is not a parcat checkpoint: no {MANIFEST} in it")
    try:
        manifest = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint manifest '{file}' is unreadable: {exc}") from exc
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    if fmt not in (POLICY_FORMAT, RUN_FORMAT):
        raise CheckpointError(
            f"checkpoint manifest '{file}': format {fmt!r} is not "
            f"'{POLICY_FORMAT}' or '{RUN_FORMAT}'"
        )
    if manifest.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint '{path}' has version {manifest.get('version')!r}; "
            f"this parcat reads version {VERSION}"
        )
    return dict(manifest)


def load_policy(path: str | Path) -> PolicyCheckpoint:
    """Read one agent's checkpoint directory."""
    manifest = read_manifest(path)
    if manifest["format"] != POLICY_FORMAT:
        raise CheckpointError(f"'{path}' is a run checkpoint; name one agent's directory in it")
    try:
        with np.load(Path(path) / ARRAYS) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{path}': cannot read {ARRAYS}: {exc}") from exc
    meta = {k: v for k, v in manifest.items() if k not in ("policy", "kwargs")}
    return PolicyCheckpoint(manifest["policy"], manifest.get("kwargs", {}), arrays, meta)


def load_state(path: str | Path) -> dict[str, np.ndarray]:
    """The training state saved beside one agent's policy (empty if there is none)."""
    file = Path(path) / STATE
    if not file.is_file():
        return {}
    try:
        with np.load(file) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{path}': cannot read {STATE}: {exc}") from exc


def _dir_name(agent_id: Any) -> str:
    text = str(agent_id)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or "agent"


def _write_dir_atomically(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_swap(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        write(tmp)
        if not path.exists():
            tmp.rename(path)
            return
        # A directory cannot be replaced in one rename: old aside, new in. Ctrl-C and
        # SIGTERM wait until both renames are done; after a SIGKILL in between,
        # recover_swap() (run by every reader and writer) puts the old one back.
        old = path.with_name(f".{path.name}.old.{os.getpid()}")
        with _signals_deferred():
            path.rename(old)
            tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def recover_swap(path: Path) -> None:
    """Put back a checkpoint directory that a killed writer moved aside, if any."""
    if path.exists():
        return
    aside = sorted(path.parent.glob(f".{path.name}.old.*")) if path.parent.is_dir() else []
    if aside:
        aside[-1].rename(path)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    deferred = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
