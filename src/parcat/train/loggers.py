"""Where a run's epoch metrics go: the metrics file, TensorBoard event files, W&B.

The metrics file (``metrics.jsonl`` or ``metrics.csv``) is always written: ``parcat plot``
and ``--resume`` read it. TensorBoard and W&B are optional packages; a run that asks for
one that is missing stops before it starts, naming the ``pip`` command.
"""

from __future__ import annotations

import importlib
import math
import os
import socket
import time
from pathlib import Path
from typing import Any, Protocol

from parcat.core.errors import ConfigError, OutputError, WriteError
from parcat.train.config import LoggerKind, TrainConfig
from parcat.train.metrics import MetricsLog, read_metrics

TENSORBOARD_DIR = "tensorboard"
"""The folder of event files in the run directory."""
STEP_KEY = "total_env_steps"
"""The x axis of TensorBoard and W&B curves: environment steps since the run began."""


class EpochLogger(Protocol):
    """Something that takes one record per epoch."""

    def write(self, record: dict[str, Any]) -> None:
        """Log one epoch's record (:meth:`EpochStats.to_dict`)."""

    def close(self) -> None:
        """Flush and let go."""


class RunLoggers:
    """Every logger a run asked for (``config.loggers``), written to together.

    Args:
        config: The run's configuration.
        resume_epoch: The epoch a resumed run continues after (``None``: a new run); the
            metrics files lose later records, TensorBoard is told to drop them.
        num_envs: Environments (for the step a resumed TensorBoard log continues from).
    """

    def __init__(self, config: TrainConfig, resume_epoch: int | None, num_envs: int) -> None:
        kinds = config.loggers
        formats = [k.value for k in kinds if k in (LoggerKind.JSONL, LoggerKind.CSV)]
        fresh = resume_epoch is None
        self.files = [MetricsLog(config.run_path, fmt, fresh=fresh)
                      for fmt in formats or [config.metrics_format.value]]
        self.time_offset = 0.0
        """Wall time the run had spent before this process took over (resume)."""
        if resume_epoch is not None:
            for log in self.files:
                log.truncate(resume_epoch)
            self.time_offset = _last_time(self.files)
        self.others: list[EpochLogger] = []
        if LoggerKind.TENSORBOARD in kinds:
            resume_step = None if resume_epoch is None else (
                resume_epoch * config.steps_per_epoch * num_envs + 1)
            self.others.append(TensorBoardLogger(config.run_path / TENSORBOARD_DIR, resume_step))
        if LoggerKind.WANDB in kinds:
            self.others.append(WandbLogger(config, resumed=not fresh))

    def write(self, record: dict[str, Any]) -> None:
        """Log one epoch everywhere.

        Raises:
            WriteError: a file could not be written (a full disk); the last checkpoint
                stays as it was.
        """
        for log in self.files:
            try:
                log.write(record)
            except OSError as exc:
                raise write_error(log.path, exc) from None
        for other in self.others:
            other.write(record)

    def close(self) -> None:
        """Close the optional loggers."""
        for other in self.others:
            other.close()
        self.others = []


def write_error(path: Path, exc: OSError) -> WriteError:
    """The one line for a run's file that could not be written mid-run."""
    return WriteError(f"could not write '{path}' ({exc.strerror or exc}); the last "
                      "checkpoint is intact: free the space (or fix the path) and --resume")


def _last_time(files: list[MetricsLog]) -> float:
    for log in files:
        if log.path.exists():
            records = read_metrics(log.path)
            value = records[-1].get("time_s") if records else None
            if isinstance(value, int | float) and math.isfinite(value):
                return float(value)
    return 0.0


def scalars(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The record's numbers as ``name``, ``group/agent`` or ``group/learner/metric`` tags
    (no nulls, no lists)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        tag = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, f"{tag}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[tag] = float(value)
    return out


OPTIONAL = {LoggerKind.TENSORBOARD: "tensorboard", LoggerKind.WANDB: "wandb"}
"""The package each optional logger needs (and the name of its ``parcat[...]`` extra)."""


def check_installed(kinds: tuple[LoggerKind, ...]) -> None:
    """Refuse, before a run starts, a logger whose package is not installed.

    Raises:
        ConfigError: one line naming the ``pip`` command.
    """
    for kind in kinds:
        package = OPTIONAL.get(kind)
        if package is None:
            continue
        try:
            importlib.import_module(package)
        except ImportError as exc:
            raise missing_package(kind.value, package, package) from exc


def missing_package(logger: str, package: str, extra: str) -> ConfigError:
    """The one-line error for an optional logger whose package is not installed."""
    return ConfigError(f"--logger {logger} needs the '{package}' package, which is not "
                       f"installed: pip install 'parcat[{extra}]' (or pip install {package})")


class TensorBoardLogger:
    """Scalars in a TensorBoard event file, written with TensorBoard's own record writer.

    Each epoch is appended to the file and the file closed again: nothing is held open.

    Args:
        folder: Where the event file goes.
        resume_step: A resumed run's first step: TensorBoard drops what an interrupted
            run logged from there on (a ``SessionLog.START`` event).
    """

    def __init__(self, folder: Path, resume_step: int | None) -> None:
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.record_writer import RecordWriter
        except ImportError as exc:
            raise missing_package("tensorboard", "tensorboard", "tensorboard") from exc
        self._event, self._summary = event_pb2, summary_pb2
        self._writer = RecordWriter
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise OutputError(f"--logger tensorboard: '{folder}' is not a folder; parcat "
                              "writes its event files there: move that file away")
        folder.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        self.path = folder / name
        self._append(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        if resume_step is not None:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._append(event_pb2.Event(wall_time=time.time(), step=resume_step,
                                         session_log=start))

    def write(self, record: dict[str, Any]) -> None:
        """One event with every number of the record, at its total environment steps."""
        values = [self._summary.Summary.Value(tag=tag, simple_value=value)
                  for tag, value in scalars(record).items() if tag != STEP_KEY]
        self._append(self._event.Event(wall_time=time.time(), step=int(record[STEP_KEY]),
                                       summary=self._summary.Summary(value=values)))

    def _append(self, event: Any) -> None:
        try:
            with self.path.open("ab") as handle:
                writer = self._writer(handle)
                writer.write(event.SerializeToString())
                writer.flush()
        except OSError as exc:
            raise write_error(self.path, exc) from None

    def close(self) -> None:
        """Nothing is held open."""


class WandbLogger:
    """Every number of each epoch to Weights & Biases (``WANDB_MODE=offline`` works).

    Args:
        config: The run's configuration (logged as the W&B run's config).
        resumed: Whether this continues an earlier process's run.
    """

    def __init__(self, config: TrainConfig, resumed: bool) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise missing_package("wandb", "wandb", "wandb") from exc
        self.run = wandb.init(project="parcat", name=config.run_path.name,
                              config=config.to_dict(), resume="allow" if resumed else None)

    def write(self, record: dict[str, Any]) -> None:
        """Log the record's numbers at its total environment steps."""
        self.run.log(scalars(record), step=int(record[STEP_KEY]))

    def close(self) -> None:
        """Finish the W&B run."""
        self.run.finish()
