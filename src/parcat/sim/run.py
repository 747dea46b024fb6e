"""``run_sim``: one simulation, in real time with a process each (``parallel``) or in
simulated time in one process (``sequential``), and its output files."""

from __future__ import annotations

import contextlib
import enum
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from parcat.core import jsontext, runlock
from parcat.core.atomic import write_text_atomically
from parcat.core.errors import ConfigError, OutputError
from parcat.core.output_paths import check_output_folder, missing_folders, remove_empty
from parcat.sim.config import SimConfig, load_sim_config
from parcat.sim.metrics import summarize
from parcat.sim.parallel import StalledError, run_parallel
from parcat.sim.progress import SimProgress
from parcat.sim.record import RECORD_FILE, SimRecord
from parcat.sim.sequential import run_sequential
from parcat.sim.svg import is_ours, write_svg

SUMMARY_FILE = "summary.json"
SVG_FILE = "trajectories.svg"
SUMMARY_SCHEMA = "parcat.sim"
RECORD_SCHEMA = "parcat.sim.record"
MAX_SUMMARY_BYTES = 1 << 24  # read of a summary.json to tell whether it is parcat's


class SimMode(str, enum.Enum):
    """Where the environment and the agents run (``--mode``)."""

    PARALLEL = "parallel"
    SEQUENTIAL = "sequential"


def run_sim(config: SimConfig | str | Path, mode: SimMode | str = SimMode.PARALLEL, *,
            fast: bool = False, on_progress: Callable[[SimProgress], None] | None = None,
            start_method: str | None = None, write: bool = True) -> SimRecord:
    """Run a simulation (``config``: a config or the path of a sim YAML file) and, with
    ``write`` and an ``output`` folder, write its files, listed in ``record.files``. ``fast``
    and ``start_method`` are those of :func:`~parcat.sim.parallel.run_parallel`.

    Raises:
        ConfigError: a bad config file or mode.
        OutputError: the output folder cannot be written, or another run writes it.
        RunError: the environment or an agent failed (the agent is named).
    """
    if not isinstance(config, SimConfig):
        config = load_sim_config(config)
    try:
        mode = SimMode(mode)
    except ValueError:
        raise ConfigError(f"mode must be parallel or sequential, got {mode!r}") from None
    with _held_output(config.output if write else None):
        if mode is SimMode.PARALLEL:
            try:
                record = run_parallel(config, fast=fast, on_progress=on_progress,
                                      start_method=start_method)
            except StalledError as stall:  # the steps so far are written, as on Ctrl-C
                if not (write and config.output and stall.record is not None):
                    raise
                record = write_outputs(stall.record, config)
                raise StalledError(f"{stall}; the {record.steps} steps before are in "
                                   f"{config.output}", record) from stall
        else:
            record = run_sequential(config, on_progress=on_progress)
        if write and config.output:
            record = write_outputs(record, config)
    return record


@contextlib.contextmanager
def _held_output(output: str | None) -> Iterator[None]:
    """Check the output folder, create it and hold its lock for the run; a run that writes
    nothing there leaves no folder it made."""
    if not output:
        yield
        return
    folder = Path(output)
    made = missing_folders(folder)
    check_output_folder(folder, "--output")
    try:
        with runlock.acquire(folder / runlock.LOCK_FILE, f"--output '{folder}'",
                             "give another -o DIR"):
            _refuse_foreign_files(folder)
            yield
    finally:
        remove_empty(made)


def _refuse_foreign_files(folder: Path) -> None:
    """Refuse a file the run would replace that is not parcat's own earlier output."""
    for name, ours in ((RECORD_FILE, _is_record), (SUMMARY_FILE, _is_summary),
                       (SVG_FILE, _is_svg)):
        path = folder / name
        if os.path.lexists(path) and not ours(path):
            raise OutputError(f"--output '{folder}': '{name}' there is not parcat's and the "
                              "run would replace it; move it away or give another -o DIR")


def _head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of a regular file (``b""`` for anything else)."""
    with contextlib.suppress(OSError):
        if stat.S_ISREG(path.lstat().st_mode):
            with path.open("rb") as file:
                return file.read(size)
    return b""


def _is_summary(path: Path) -> bool:
    with contextlib.suppress(ValueError, RecursionError):
        summary = json.loads(_head(path, MAX_SUMMARY_BYTES) or b"null")
        return isinstance(summary, dict) and summary.get("schema") == SUMMARY_SCHEMA
    return False


def _is_record(path: Path) -> bool:
    with contextlib.suppress(Exception):  # whatever a foreign file makes zipfile/numpy raise
        if _head(path, 4) == b"PK\x03\x04":
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"][()]))
            return isinstance(meta, dict) and meta.get("schema") == RECORD_SCHEMA
    return False


def _is_svg(path: Path) -> bool:
    return is_ours(_head(path, 1024))


def write_outputs(record: SimRecord, config: SimConfig) -> SimRecord:
    """Write the record, its summary and (when asked for) the SVG; each file atomically."""
    assert config.output is not None
    folder = Path(config.output)
    files = [str(record.save(folder))]
    if (config.render or config.debug.render_traj) and write_svg(record, folder / SVG_FILE):
        files.append(str(folder / SVG_FILE))
    files.append(str(folder / SUMMARY_FILE))
    record = replace(record, files=tuple(files))
    write_text_atomically(folder / SUMMARY_FILE, jsontext.dumps(summarize(record), indent=2) + "\n")
    return record
