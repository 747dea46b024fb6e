"""The checkpoint format: a directory of arrays plus a JSON manifest.

One agent's policy::

    agent_0/
      manifest.json   {"format": "parcat.policy", "version": 2, "policy": "module:Class",
                       "kwargs": {...}, "agent_id": "agent_0", "mission": "harvest", ...,
                       "files": {"arrays.npz": {"size": 20914, "sha256": "..."}, ...}}
      arrays.npz      the policy's state_dict()
      state.npz       training state (optional)

A run (``parcat train``) is a directory of such agent directories with its own manifest
(``"format": "parcat.run"``, ``"agents": {...}``) whose ``"files"`` lists every file below it.
A write goes to ``.checkpoint.new.*`` inside the directory; its entries are then renamed into
place, the manifest last, the replaced ones moved aside into ``.checkpoint.old.*`` first, with
Ctrl-C and SIGTERM held back. A writer killed in between leaves its checkpoint marked complete
and the next writer (or reader) finishes the swap. Of the replaced entries, whatever parcat
cannot prove it wrote (:func:`proven_files`) is moved back (as ``NAME.kept`` if the new
checkpoint took its name): the folder itself and the user's files are never touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from parcat.core import jsontext, runlock
from parcat.core.errors import CheckpointError, OutputError
from parcat.ipc.start import interrupts_deferred
from parcat.policies.checkpoint_manifest import (
    FIX,
    MANIFEST,
    POLICY_FORMAT,
    RUN_FORMAT,
    VERSION,
    parse_manifest,
)

__all__ = [
    "ARRAYS", "BEST", "MANIFEST", "POLICY_FORMAT", "RUN_FORMAT", "STATE", "VERSION",
    "PolicyCheckpoint", "check_finite", "load_policy", "load_run_arrays", "load_state",
    "proven_files", "read_manifest", "recover_swap", "remove_proven", "save_run",
    "signals_deferred",
]

ARRAYS = "arrays.npz"
STATE = "state.npz"
BEST = "best"
"""The sub-folder of a run holding the checkpoint with the best evaluation return."""
_CHUNK = 1 << 20


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


def save_run(path: str | Path, agents: Mapping[str, PolicyCheckpoint], meta: Mapping[str, Any],
             copy_to: str = "", arrays: Mapping[str, Mapping[str, np.ndarray]] | None = None,
             keep: Collection[str] = (), copy_meta: Mapping[str, Any] | None = None) -> Path:
    """Write a run checkpoint (one policy directory per agent) atomically into ``path``,
    replacing only the checkpoint's own entries (:func:`entries`).

    Args:
        meta: Written into the run's manifest.
        copy_to: A sub-folder that receives a copy of this checkpoint (e.g. ``best``), in
            the same atomic replacement.
        arrays: More ``.npz`` files by name, recorded in the manifest
            (:func:`load_run_arrays`).
        keep: Agents whose policy directories ``copy_to`` keeps from the copy already in
            ``path`` (one best per side: the other side's best stays).
        copy_meta: Added to ``meta`` in the copy's manifest.
    """
    path = Path(path)
    names = {agent_id: _dir_name(agent_id) for agent_id in agents}

    def write(tmp: Path) -> None:
        files: dict[str, Any] = {name: _write_npz(tmp / name, data)
                                 for name, data in (arrays or {}).items()}
        for agent_id, checkpoint in agents.items():
            (tmp / names[agent_id]).mkdir()
            written = _write_policy(tmp / names[agent_id], checkpoint)
            files.update({f"{names[agent_id]}/{k}": v for k, v in written.items()})
        manifest = {**dict(meta), "format": RUN_FORMAT, "version": VERSION, "agents": names,
                    "files": files}
        _write_file(tmp / MANIFEST, jsontext.dumps(manifest, indent=2, sort_keys=True).encode())
        if copy_to:
            _write_copy(path / copy_to, tmp, copy_to, {a: names[a] for a in keep},
                        {**manifest, **(copy_meta or {})})

    _write_dir_atomically(path, write)
    return path


def _write_copy(old: Path, tmp: Path, copy_to: str, kept: Mapping[str, str],
                manifest: dict[str, Any]) -> None:
    """``tmp/copy_to``: a copy of the checkpoint written in ``tmp`` (``manifest``), but the
    ``kept`` agents' directories from ``old`` (checked against its manifest first)."""
    files = {k: v for k, v in manifest["files"].items() if k.split("/")[0] not in kept.values()}
    if kept:
        old_files = read_manifest(old)["files"]
        files |= {k: v for k, v in old_files.items() if k.split("/")[0] in kept.values()}
    (tmp / copy_to).mkdir()
    for name in {k.split("/")[0] for k in files}:
        source = (old if name in kept.values() else tmp) / name
        if source.is_dir():
            shutil.copytree(source, tmp / copy_to / name, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(source), str(tmp / copy_to / name))
    text = jsontext.dumps({**manifest, "files": files}, indent=2, sort_keys=True).encode()
    _write_file(tmp / copy_to / MANIFEST, text)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # a file system without hard links
        shutil.copy2(source, target)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and check a checkpoint manifest, and the sizes of the files it records (the
    hashes of a run's agent manifests; the arrays' hashes when they are loaded); a missing
    or damaged one is a ``CheckpointError``."""
    path = Path(path)
    recover_swap(path)
    file = path / MANIFEST
    if not path.exists():
        raise CheckpointError(f"checkpoint '{path}' does not exist; give a run directory "
                              "(runs/NAME) or one agent's folder in it")
    if not file.is_file():
        raise CheckpointError(f"'{path}' is not a parcat checkpoint: no {MANIFEST} in it")
    manifest = parse_manifest(path)
    for name, record in manifest["files"].items():
        _check_size(path, name, record)
        if name.endswith(f"/{MANIFEST}"):
            _check_hash(path, name, record)
    return manifest


def load_policy(path: str | Path, agent_id: str | None = None) -> PolicyCheckpoint:
    """Read one agent's checkpoint directory (``agent_id``: the agent it must belong to).

    Raises:
        CheckpointError: no policy checkpoint or another agent's, a file damaged or
            missing, or a weight NaN or infinite.
    """
    path = Path(path)
    manifest = read_manifest(path)
    if manifest["format"] != POLICY_FORMAT:
        raise CheckpointError(f"'{path}' is a run checkpoint; name one agent's directory in it")
    saved_id = manifest.get("agent_id", agent_id)
    if agent_id is not None and saved_id != agent_id:
        raise CheckpointError(
            f"checkpoint '{path}' is corrupted: its manifest names another agent than "
            f"'{agent_id}'; {FIX}"
        )
    arrays = _read_npz(path, ARRAYS, manifest)
    check_finite(path, str(manifest.get("agent_id", path.name)), arrays, ARRAYS)
    meta = {k: v for k, v in manifest.items() if k not in ("policy", "kwargs", "files")}
    return PolicyCheckpoint(manifest["policy"], manifest.get("kwargs", {}), arrays, meta)


def load_run_arrays(path: str | Path, name: str) -> dict[str, np.ndarray] | None:
    """The arrays :func:`save_run` wrote as ``name`` (``None`` if the run has no such file)."""
    manifest = read_manifest(path := Path(path))
    return _read_npz(path, name, manifest) if name in manifest["files"] else None


def load_state(path: str | Path) -> dict[str, np.ndarray]:
    """The training state saved beside one agent's policy (empty if there is none)."""
    return load_run_arrays(path, STATE) or {}


def check_finite(path: Path, agent: str, arrays: Mapping[str, np.ndarray], name: str,
                 skip: tuple[str, ...] = ()) -> None:
    """Refuse (``CheckpointError``) NaN or infinite values in the float arrays of file
    ``name`` (a diverged run's weights), except keys starting with one of ``skip``."""
    for key, array in arrays.items():
        if key.startswith(skip) or array.dtype.kind not in "fc":
            continue
        if not np.isfinite(array).all():
            raise CheckpointError(
                f"checkpoint '{path}': agent '{agent}', array '{key}' in {name} holds NaN or "
                "infinite values (the run diverged); use an earlier checkpoint or train again, "
                "e.g. with a lower learning rate"
            )


def _write_policy(directory: Path, checkpoint: PolicyCheckpoint) -> dict[str, Any]:
    files = {ARRAYS: _write_npz(directory / ARRAYS, checkpoint.arrays)}
    if checkpoint.state:
        files[STATE] = _write_npz(directory / STATE, checkpoint.state)
    manifest = {
        **dict(checkpoint.meta),
        "format": POLICY_FORMAT,
        "version": VERSION,
        "policy": checkpoint.policy,
        "kwargs": dict(checkpoint.kwargs),
        "files": files,
    }
    text = jsontext.dumps(manifest, indent=2, sort_keys=True).encode()
    return {**files, MANIFEST: _write_file(directory / MANIFEST, text)}


def _write_npz(file: Path, arrays: Mapping[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = {k: np.asarray(v) for k, v in arrays.items()}
    return _write_file(file, lambda handle: np.savez(handle, **plain))


def _write_file(file: Path, data: bytes | Callable[[BinaryIO], object]) -> dict[str, Any]:
    """Write ``data`` (or what it writes) to ``file``, synced; the manifest's record of it."""
    with file.open("wb") as handle:
        if callable(data):
            data(handle)
        else:
            handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return {"size": file.stat().st_size, "sha256": _sha256(file)}


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_size(path: Path, name: str, record: Mapping[str, Any]) -> None:
    file = path / name
    try:
        size = file.stat().st_size if file.is_file() else None
    except OSError:
        size = None
    if size is None:
        raise CheckpointError(f"checkpoint '{path}' is incomplete: '{name}' is missing; {FIX}")
    if size != record["size"]:
        raise CheckpointError(
            f"checkpoint '{path}' is truncated or corrupted: '{name}' has {size} bytes, its "
            f"manifest records {record['size']}; {FIX}"
        )


def _check_hash(path: Path, name: str, record: Mapping[str, Any]) -> None:
    try:
        digest = _sha256(path / name)
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint '{path}': cannot read '{name}': {exc.strerror}; {FIX}"
        ) from exc
    if digest != record["sha256"]:
        raise CheckpointError(
            f"checkpoint '{path}' is corrupted: '{name}' does not match the SHA-256 its "
            f"manifest records; {FIX}"
        )


def _read_npz(path: Path, name: str, manifest: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The arrays of ``path/name``, checked against the manifest's record of it."""
    record = manifest["files"][name]
    _check_size(path, name, record)
    _check_hash(path, name, record)
    try:
        with np.load(path / name, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except Exception as exc:  # whatever a damaged archive makes numpy or zipfile raise
        raise CheckpointError(
            f"checkpoint '{path}' is truncated or corrupted: '{name}' is not a readable numpy "
            f"archive ({type(exc).__name__}); {FIX}"
        ) from exc


def _dir_name(agent_id: Any) -> str:
    text = str(agent_id)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or "agent"


SWAP_NEW = ".checkpoint.new."  # where the next checkpoint is written
SWAP_OLD = ".checkpoint.old."  # where the replaced entries wait until they are deleted


def entries(manifest: Mapping[str, Any]) -> set[str]:
    """The names a checkpoint's manifest makes its own in its directory: the manifest, the
    agents' directories and the first part of every file it records."""
    names = {MANIFEST}
    agents = manifest.get("agents")
    files = manifest.get("files")
    candidates = [*(agents.values() if isinstance(agents, dict) else ()),
                  *(str(k).split("/")[0] for k in (files if isinstance(files, dict) else ()))]
    names.update(n for n in candidates if isinstance(n, str) and _is_plain_name(n))
    return names


def _is_plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def _write_dir_atomically(path: Path, write: Any) -> None:
    """Write a checkpoint into ``path`` so a reader sees the old one or the new one whole."""
    path.mkdir(parents=True, exist_ok=True)
    with runlock.acquire(path / runlock.LOCK_FILE, f"checkpoint '{path}'",
                         "write the checkpoint elsewhere"):
        _recover(path)
        new = Path(tempfile.mkdtemp(prefix=SWAP_NEW, dir=path))
        try:
            write(new)
            _write_file(new / ".complete", b"")
            with signals_deferred():
                _swap_in(path, new)
        finally:
            with signals_deferred():
                _remove_swap_folders(path)


def _swap_in(path: Path, new: Path, old: Path | None = None) -> None:
    """Move the entries of ``new`` into ``path``, the manifest last, the replaced ones aside
    into ``old`` (the old manifest first), then move back those parcat cannot prove it wrote."""
    old = old or Path(tempfile.mkdtemp(prefix=SWAP_OLD, dir=path))
    replaced = _old_entries(path) | {e.name for e in new.iterdir()}
    for name in sorted(replaced, key=lambda n: n != MANIFEST):
        if name != ".complete" and os.path.lexists(path / name):
            (path / name).rename(old / name)
    for name in sorted((e.name for e in new.iterdir()), key=lambda n: n == MANIFEST):
        if name != ".complete":
            (new / name).rename(path / name)
    _move_back(old, path, "", proven_files(old))


def _old_entries(path: Path) -> set[str]:
    try:
        return entries(parse_manifest(path)) if (path / MANIFEST).is_file() else set()
    except CheckpointError:
        return set()  # a damaged manifest: only what the new checkpoint writes goes


def proven_files(path: Path) -> set[str]:
    """The files in ``path`` parcat can prove it wrote, as relative paths: the run's and
    ``best/``'s manifests, and the files they record whose size and SHA-256 match."""
    proven: set[str] = set()
    for prefix in ("", f"{BEST}/"):
        folder = path / prefix
        if not _is_plain_file(path, prefix + MANIFEST):
            continue
        try:
            files = parse_manifest(folder)["files"]
        except CheckpointError:
            continue
        proven.add(prefix + MANIFEST)
        proven.update(prefix + name for name, record in files.items()
                      if _is_plain_file(path, prefix + name) and _matches(folder / name, record))
    return proven


def _is_plain_file(root: Path, name: str) -> bool:
    parts = name.split("/")
    if not all(_is_plain_name(part) for part in parts):
        return False
    try:
        for depth in range(1, len(parts) + 1):
            mode = os.lstat(root.joinpath(*parts[:depth])).st_mode
            if not (stat.S_ISREG(mode) if depth == len(parts) else stat.S_ISDIR(mode)):
                return False
    except OSError:
        return False
    return True


def _matches(file: Path, record: Mapping[str, Any]) -> bool:
    try:
        return file.stat().st_size == record.get("size") and _sha256(file) == record.get("sha256")
    except OSError:
        return False


def _move_back(source: Path, target: Path, rel: str, proven: set[str]) -> None:
    """Move what below ``source`` is not in ``proven`` to the same place below ``target``."""
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        name = rel + entry.name
        if name in proven:
            continue
        destination = target / entry.name
        if entry.is_dir(follow_symlinks=False) and (
                any(p.startswith(f"{name}/") for p in proven)
                or (destination.is_dir() and not destination.is_symlink())):
            _move_back(Path(entry.path), destination, f"{name}/", proven)
            continue
        target.mkdir(parents=True, exist_ok=True)
        number = 1
        while os.path.lexists(destination):  # the new checkpoint took the name
            destination = target / f"{entry.name}.kept{'' if number == 1 else f'-{number}'}"
            number += 1
        Path(entry.path).rename(destination)


def remove_proven(path: Path) -> None:
    """Delete the files in ``path`` parcat proves it wrote (the manifests last) and the
    folders this leaves empty."""
    with signals_deferred():
        for name in sorted(proven_files(path), key=lambda n: (n.endswith(MANIFEST), -len(n))):
            (path / name).unlink(missing_ok=True)
            parent = (path / name).parent
            while parent != path:
                with contextlib.suppress(OSError):
                    parent.rmdir()  # only when empty
                parent = parent.parent


def _remove_swap_folders(path: Path) -> None:
    for old in sorted(path.glob(f"{SWAP_OLD}*")):
        _move_back(old, path, "", proven_files(old))
    for folder in path.glob(".checkpoint.*"):
        shutil.rmtree(folder, ignore_errors=True)


def _recover(path: Path) -> None:
    """Finish a swap a killed writer left halfway (its new checkpoint complete, the manifest
    not in place yet) and drop what else it left."""
    for new in path.glob(f"{SWAP_NEW}*"):
        if (new / ".complete").is_file() and not (path / MANIFEST).exists():
            olds = sorted(path.glob(f"{SWAP_OLD}*"))
            _swap_in(path, new, olds[0] if olds else None)
    _remove_swap_folders(path)


def recover_swap(path: Path) -> None:
    """Finish or undo what a killed checkpoint writer left in ``path``, if anything, unless
    a live writer holds the folder (it does that itself)."""
    if not path.is_dir() or not any(path.glob(".checkpoint.*")):
        return
    try:
        lock = runlock.acquire(path / runlock.LOCK_FILE, f"checkpoint '{path}'", "retry")
    except OutputError:
        return  # a writer is at work, or the folder is read-only: nothing to do here
    with lock:
        _recover(path)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back until the block ends (main thread only)."""
    # blocking them in this thread is not enough: another thread (numpy's BLAS pool) takes
    # the signal and Python still runs the handler here; the CLI's handlers postpone it
    with interrupts_deferred(frozenset({signal.SIGINT, signal.SIGTERM})):
        yield
