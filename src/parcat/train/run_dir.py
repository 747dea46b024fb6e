"""Choosing and holding the run directory: folders are the user's, one writer per run.

A folder holds *parcat's run* when it holds a ``parcat.run`` manifest or a metrics log of
one; training into it needs ``--resume`` or ``--force``. Without ``--run-dir`` the default
``runs/<mission>`` moves to the next free ``runs/<mission>-2``, ... (the caller says so).
``--force`` deletes only what parcat wrote (the logs, and of the checkpoint and ``best/``
only the files their manifests prove by size and SHA-256); other files stay and the note
names one. A folder holding files parcat did not write and no run is refused: a run is
never mixed into a folder of the user's.

The run holds the directory's lock (:mod:`parcat.core.runlock`) to its end, so a second
run into it is one line, exit 2, and runs started together get ``-2``, ``-3``, ... each.
A run that is refused or leaves nothing in the folders it made removes them again.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from parcat.core import runlock
from parcat.core.errors import CheckpointError, ConfigError, RunLockedError
from parcat.core.output_paths import check_output_folder, missing_folders, remove_empty
from parcat.policies import checkpoint
from parcat.policies.checkpoint_manifest import parse_manifest
from parcat.train.config import TrainConfig
from parcat.train.metrics import TENSORBOARD_DIR
from parcat.train.runs import BEST, METRICS_FILES

MAX_NUMBERED = 10_000
"""How many numbered names are tried before giving up."""
FLAG = "--run-dir"


@dataclass(frozen=True)
class RunDirChoice:
    """Where a run goes (``config.run_dir``), and a line for stderr when it is not where the
    user said (empty: nothing to say)."""

    config: TrainConfig
    note: str = ""


def holds_run(path: Path) -> bool:
    """Whether ``path`` holds a parcat run: a run manifest or a metrics log of one."""
    return bool(_run_entries(path) - {runlock.LOCK_FILE})


def foreign_entries(path: Path) -> list[str]:
    """The names in the folder ``path`` that parcat did not write, sorted."""
    try:
        names = {entry.name for entry in path.iterdir()}
    except OSError:
        return []
    ours = _run_entries(path)
    return sorted(n for n in names if n not in ours and not _is_temporary(n))


@contextlib.contextmanager
def claim_run_dir(config: TrainConfig, resume: bool = False,
                  force: bool = False) -> Iterator[RunDirChoice]:
    """Choose the run directory for ``config`` (``run_dir`` empty: the default name) and
    hold its lock until the block ends; ``resume`` continues the run there, ``force``
    deletes it (only what parcat wrote). :class:`ConfigError` for a folder that may not be
    used so; ``OutputError`` if it cannot be written or another run holds it."""
    if resume and force:
        raise ConfigError("--resume and --force contradict each other: --resume continues "
                          "the run, --force replaces it; give one")
    path = config.run_path
    made = missing_folders(path)
    check_output_folder(path, FLAG)
    try:
        if config.run_dir or resume or force:
            lock, choice = _take(path, resume, force), RunDirChoice(config)
            if force and holds_run(path):
                choice = RunDirChoice(config, _remove_run(path))
        else:
            lock, choice = _take_default(config, path, made)
    except BaseException:
        remove_empty(made)
        raise
    try:
        with lock:
            yield choice
    finally:
        remove_empty(made)


def _lock(path: Path) -> runlock.RunLock:
    return runlock.acquire(path / runlock.LOCK_FILE, f"run directory '{path}'",
                           f"give another {FLAG}")


def _take(path: Path, resume: bool, force: bool) -> runlock.RunLock:
    """Lock the directory the user named and check it may be written as asked."""
    lock = _lock(path)
    try:
        checkpoint.recover_swap(path)
        if resume:
            return lock
        if holds_run(path):
            if not force:
                raise ConfigError(
                    f"run directory '{path}' holds another run; give --resume to continue "
                    f"it, --force to replace it, or another {FLAG}")
            return lock
        foreign = foreign_entries(path)
        if foreign:
            raise ConfigError(
                f"run directory '{path}' holds files parcat did not write (e.g. "
                f"'{foreign[0]}') and no run{' to replace' if force else ''}; parcat never "
                f"writes a run among them: give a new or empty folder, e.g. -o "
                f"{path / 'run'}")
        return lock
    except BaseException:
        lock.release()
        raise


def _take_default(config: TrainConfig, path: Path,
                  made: list[Path]) -> tuple[runlock.RunLock, RunDirChoice]:
    """Claim ``path`` or the first free ``path-N``: one no other run holds, with no run and
    no files of the user's in it (made if missing, under its lock)."""
    why, advice = "", ""
    for number in range(1, MAX_NUMBERED + 1):
        candidate = path if number == 1 else path.with_name(f"{path.name}-{number}")
        if number > 1:
            with contextlib.suppress(FileExistsError):
                candidate.mkdir()
                made.insert(0, candidate)
        try:
            lock = _lock(candidate)
        except RunLockedError as exc:
            why = why or f"'{path}' is in use by another run{_pid_of(str(exc))}"
            continue
        checkpoint.recover_swap(candidate)
        if not holds_run(candidate) and not foreign_entries(candidate):
            if number == 1:
                return lock, RunDirChoice(config)
            return lock, RunDirChoice(replace(config, run_dir=str(candidate)),
                                      f"{why}; this one goes to '{candidate}'{advice}")
        lock.release()
        if not why and holds_run(candidate):
            why = f"'{path}' holds another run"
            advice = f" (--resume continues '{path}', --force replaces it)"
        why = why or f"'{path}' holds files parcat did not write"
    raise ConfigError(f"'{path}-2' to '{path}-{MAX_NUMBERED}' are all taken; give {FLAG}")


def free_path(path: Path) -> Path:
    """``path`` or the first ``path-N`` that is missing or empty (``--seeds``' folder of
    runs, whose seeds each claim their own)."""
    for number in range(1, MAX_NUMBERED + 1):
        candidate = path if number == 1 else path.with_name(f"{path.name}-{number}")
        if not candidate.exists() or (candidate.is_dir() and not any(candidate.iterdir())):
            return candidate
    raise ConfigError(f"'{path}-2' to '{path}-{MAX_NUMBERED}' are all taken; give {FLAG}")


def _pid_of(message: str) -> str:  # the " (pid N)" part of a RunLockedError's message
    start = message.find(" (pid ")
    return message[start:message.index(")", start) + 1] if start >= 0 else ""


def _remove_run(path: Path) -> str:
    """Delete what parcat wrote in ``path``; return the line that says so."""
    for name in sorted(_run_entries(path) & {*METRICS_FILES, TENSORBOARD_DIR}):
        entry = path / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
    checkpoint.remove_proven(path)  # the checkpoint and best/: only the files it proves
    kept = foreign_entries(path)
    also = (f" (kept {len(kept)} file(s) parcat did not write, e.g. "
            f"'{_a_file_in(path, kept[0])}')" if kept else "")
    return f"--force: removed the run in '{path}'{also}; starting afresh"


def _a_file_in(path: Path, name: str) -> str:
    """``name``, or when it is a folder the first file in it (e.g. ``agent_0/NOTES.txt``)."""
    entry = path / name
    with contextlib.suppress(OSError):
        if entry.is_dir() and not entry.is_symlink():
            files = sorted(p for p in entry.rglob("*") if not p.is_dir() or p.is_symlink())
            return str((files[0] if files else entry).relative_to(path))
    return name


def _run_entries(path: Path) -> set[str]:
    """The names in ``path`` that are a parcat run's, recognised by their content."""
    names = {runlock.LOCK_FILE} if (path / runlock.LOCK_FILE).is_file() else set()
    manifest = _run_manifest(path)
    if manifest is not None:
        names |= {n for n in checkpoint.entries(manifest) if (path / n).exists()}
        if _run_manifest(path / BEST) is not None:
            names.add(BEST)
    names.update(name for name in METRICS_FILES if _is_metrics_log(path / name))
    board = path / TENSORBOARD_DIR
    with contextlib.suppress(OSError):
        events = [e.name for e in board.iterdir()] if not board.is_symlink() else []
        if events and all(name.startswith("events.out.tfevents.") for name in events):
            names.add(TENSORBOARD_DIR)  # a run stopped before its first epoch leaves these
    return names


def _run_manifest(path: Path) -> dict[str, object] | None:  # a run's manifest, if valid
    if not (path / checkpoint.MANIFEST).is_file():
        return None
    try:
        manifest = parse_manifest(path)
    except CheckpointError:
        return None
    return manifest if manifest.get("format") == checkpoint.RUN_FORMAT else None


def _is_metrics_log(file: Path) -> bool:
    """Whether ``file`` starts as parcat's metrics log does (an epoch's record, or a CSV
    header beginning with ``epoch``)."""
    if not file.is_file() or file.is_symlink():
        return False
    try:
        with file.open("rb") as handle:
            first = handle.readline(1 << 16).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return False
    if file.suffix == ".csv":
        return first.startswith("epoch,")
    try:
        record = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(record, dict) and type(record.get("epoch")) is int


def _is_temporary(name: str) -> bool:
    # what a killed write of a metrics log or a checkpoint leaves (parcat.core.atomic, checkpoint)
    return name.startswith((".metrics.", ".checkpoint.", ".parcat-probe."))
