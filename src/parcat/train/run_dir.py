"""Choosing the run directory: a new run never replaces another one unasked.

A directory *holds a run* when it has a checkpoint manifest or a metrics log. Training into
one needs ``--resume`` (continue it) or ``--force`` (replace it). Without ``--run-dir`` the
default name ``runs/<mission>`` is taken by the next free numbered name
(``runs/<mission>-2``, ``-3``, ...) instead, and the caller says so.

``--force`` deletes the old run before the new one starts: its checkpoints, ``best/`` and
metrics log go at once, so the new run's metrics and checkpoints never mix with the old.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from parcat import checkpoint
from parcat.errors import ConfigError
from parcat.train.config import TrainConfig

METRICS_FILES = ("metrics.jsonl", "metrics.csv")
MAX_NUMBERED = 10_000
"""How many numbered names are tried before giving up (``runs/<mission>-10000``)."""


@dataclass(frozen=True)
class RunDirChoice:
    """Where a run goes, and the line to tell the user when it is not where they said."""

    config: TrainConfig
    """The config with ``run_dir`` set to the chosen directory."""
    note: str = ""
    """One line for stderr (empty: nothing to say)."""


def holds_run(path: Path) -> bool:
    """Whether ``path`` holds a run: a checkpoint manifest or a metrics log."""
    checkpoint.recover_swap(path)
    if not path.is_dir():
        return False
    return any((path / name).is_file() for name in (checkpoint.MANIFEST, *METRICS_FILES))


def choose_run_dir(config: TrainConfig, resume: bool = False,
                   force: bool = False) -> RunDirChoice:
    """Pick the run directory for ``config``; with ``force``, delete the run already there.

    Args:
        config: ``run_dir`` empty means the default name ``runs/<mission>``.
        resume: Continue the run in the directory (it is used as it is).
        force: Replace the run in the directory.

    Raises:
        ConfigError: ``resume`` and ``force`` together, or an explicit ``run_dir`` that
            holds a run without either.
    """
    if resume and force:
        raise ConfigError("--resume and --force contradict each other: --resume continues "
                          "the run, --force replaces it; give one")
    path = config.run_path
    if resume or not holds_run(path):
        return RunDirChoice(config)
    if force:
        shutil.rmtree(path)
        return RunDirChoice(config, f"--force: removed the run in '{path}'; starting afresh")
    if config.run_dir:
        raise ConfigError(
            f"run directory '{path}' holds another run; give --resume to continue it, --force "
            "to replace it, or another --run-dir"
        )
    free = next_free(path)
    return RunDirChoice(
        replace(config, run_dir=str(free)),
        f"'{path}' holds another run; this one goes to '{free}' (--resume continues "
        f"'{path}', --force replaces it)",
    )


def next_free(path: Path) -> Path:
    """``path-2``, ``path-3``, ...: the first that does not exist.

    Raises:
        ConfigError: all :data:`MAX_NUMBERED` are taken.
    """
    for number in range(2, MAX_NUMBERED + 1):
        candidate = path.with_name(f"{path.name}-{number}")
        checkpoint.recover_swap(candidate)
        if not candidate.exists():
            return candidate
    raise ConfigError(f"'{path}-2' to '{path}-{MAX_NUMBERED}' all exist; give --run-dir")
