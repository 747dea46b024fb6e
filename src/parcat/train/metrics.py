"""Where a run's epoch records go: the metrics log (JSON lines or CSV, always written:
``parcat plot`` and ``--resume`` read it), TensorBoard event files and W&B (optional
packages: a run that asks for a missing one stops before it starts, naming ``pip``).
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import json
import math
import os
import socket
import time
import warnings
from pathlib import Path
from typing import Any

from parcat.core import jsontext
from parcat.core.atomic import write_text_atomically
from parcat.core.errors import ConfigError, OutputError, WriteError
from parcat.core.readfile import read_regular
from parcat.train.config import LoggerKind, TrainConfig

TENSORBOARD_DIR = "tensorboard"
"""The folder of event files in the run directory."""
STEP_KEY = "total_env_steps"
"""The x axis of TensorBoard and W&B curves: environment steps since the run began."""
OPTIONAL = {LoggerKind.TENSORBOARD: "tensorboard", LoggerKind.WANDB: "wandb"}
"""The package each optional logger needs (and the name of its ``parcat[...]`` extra)."""
NESTED_TWICE = ("learner_metrics", "best")
"""Record keys whose values are mappings of mappings (CSV columns ``key.name.metric``)."""


class MetricsLog:
    """Appends one record per epoch to ``RUN/metrics.jsonl`` (or ``.csv``); ``fresh``
    starts a new log (a resumed run appends to the one in its checkpoint)."""

    def __init__(self, run_path: Path, fmt: str, fresh: bool) -> None:
        self.path = run_path / f"metrics.{fmt}"
        self.fmt = fmt
        self.header: list[str] | None = None
        """The CSV columns every row is written with (the file's, once it has one)."""
        self.warned = False
        run_path.mkdir(parents=True, exist_ok=True)
        if fresh and self.path.exists():
            self.path.unlink()

    def truncate(self, epochs: int) -> None:
        """Drop records past ``epochs`` (written after the checkpoint a run resumes from)
        and a last line a killed write cut short, replacing the file atomically;
        :class:`ConfigError` for a damaged line or epochs out of order (two runs wrote it)."""
        if not self.path.exists():
            return
        if self.fmt == "jsonl":
            lines = _jsonl_lines(self.path)
            _check_order(self.path, [(number, record["epoch"]) for number, _, record in lines])
            write_text_atomically(self.path, "".join(
                line + "\n" for _, line, record in lines if record["epoch"] <= epochs))
            return
        header, rows = _csv_rows(self.path)
        if not header:  # even the header was cut: write() starts the file again
            self.path.unlink()
            return
        _check_order(self.path, [(number + 2, int(row["epoch"]))
                                 for number, row in enumerate(rows)])
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=header)
        writer.writeheader()
        writer.writerows(row for row in rows if int(row["epoch"]) <= epochs)
        write_text_atomically(self.path, buffer.getvalue())

    def write(self, record: dict[str, Any]) -> None:
        """Append one epoch's record."""
        if self.fmt == "jsonl":
            with self.path.open("a") as handle:
                handle.write(jsontext.dumps(record) + "\n")
            return
        flat = _flatten(record)
        new = not self.path.exists()
        if self.header is None:  # a resumed log keeps its header: every row has its columns
            self.header = list(flat) if new else _csv_header(self.path)
        dropped = [key for key in flat if key not in self.header]
        if dropped and not self.warned:  # an older run's log, or a key a later epoch adds
            self.warned = True
            warnings.warn(f"metrics log '{self.path}' has no columns {', '.join(dropped)}; "
                          "its rows leave them out (--metrics-format jsonl keeps every key)",
                          stacklevel=2)
        with self.path.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.header, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(flat)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics log (``.jsonl``, or ``.csv`` with ``reward.agent_0``
    columns), without a last line cut short; :class:`ConfigError` naming the line for an
    unreadable file, a line before the last that is no record, or a float too large."""
    if path.suffix == ".csv":  # row n is line n + 2, after the header
        numbered = [(n + 2, _unflatten(row)) for n, row in enumerate(_csv_rows(path)[1])]
    else:
        numbered = [(n, record) for n, _, record in _jsonl_lines(path)]
    for line, record in numbered:
        _check_floats(path, line, record)
    return [record for _, record in numbered]


def _check_floats(path: Path, line: int, value: Any) -> None:
    """Refuse an integer no float can hold (charts and loggers turn values into floats)."""
    if isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            _check_floats(path, line, item)
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            raise ConfigError(f"metrics log '{path}' line {line}: an integer of "
                              f"{len(str(abs(value))):,} digits, too large for a float; fix or "
                              "delete that line") from None


def _read_bytes(path: Path) -> bytes:
    try:
        return read_regular(path)
    except OSError as exc:
        raise ConfigError(f"cannot read metrics log '{path}': {exc.strerror}") from exc


def _check_order(path: Path, epochs: list[tuple[int, int]]) -> None:
    """Refuse a log whose epochs (by line number) are not 1, 2, 3, ... in order."""
    for expected, (line, epoch) in enumerate(epochs, start=epochs[0][1] if epochs else 1):
        if epoch != expected:
            raise ConfigError(
                f"metrics log '{path}' line {line}: epoch {epoch} where epoch {expected} "
                "should follow; two runs wrote this log at once, so its records are mixed: "
                "train again into another --run-dir")


def _jsonl_lines(path: Path) -> list[tuple[int, str, dict[str, Any]]]:
    """Each record of a JSON-lines log with its line's number and text."""
    lines = _read_bytes(path).split(b"\n")
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    out = []
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, too deep
            if index == last:
                break  # a write killed halfway; the epoch it recorded is trained again
            raise ConfigError(
                f"metrics log '{path}' line {index + 1} is not a JSON record; fix or delete "
                "that line"
            ) from exc
        if not isinstance(record, dict) or type(record.get("epoch")) is not int:
            raise ConfigError(
                f"metrics log '{path}' line {index + 1}: expected an epoch's mapping with an "
                "integer 'epoch' key; fix or delete that line")
        out.append((index + 1, text, record))
    return out


def _csv_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of a CSV log, without a last row a killed write cut short."""
    try:
        text = _read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"metrics log '{path}' is not UTF-8 text") from exc
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # the csv module ends every row with a newline
    reader = csv.DictReader(io.StringIO(text))
    rows = []
    try:
        for row in reader:
            epoch = row.get("epoch")
            if None in row or epoch is None or not epoch.isdigit():
                raise ConfigError(
                    f"metrics log '{path}' line {reader.line_num}: expected a row of the "
                    "header's columns with an integer 'epoch'; fix or delete that line")
            rows.append(row)
    except csv.Error as exc:  # a NUL byte, a quote left open
        raise ConfigError(f"metrics log '{path}' line {reader.line_num} is not CSV; fix or "
                          "delete that line") from exc
    return list(reader.fieldnames or []), rows


def _csv_header(path: Path) -> list[str]:
    """The column names on a CSV log's first line."""
    with path.open(newline="") as handle:
        return next(csv.reader(handle), [])


def _unflatten(row: dict[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for key, value in row.items():
        number: Any = _number(value)
        head, dot, tail = key.partition(".")
        if dot and head in NESTED_TWICE:  # learner_metrics.<learner>.<metric>
            name, _, metric = tail.rpartition(".")
            record.setdefault(head, {}).setdefault(name, {})[metric] = number
        elif dot:
            record.setdefault(head, {})[tail] = number
        else:
            record[key] = number
    return record


def _number(text: str) -> float | int | None:
    if text not in ("", "None", "nan"):
        for kind in (int, float):
            with contextlib.suppress(ValueError):
                return kind(text)
    return None


def _flatten(record: dict[str, Any], sep: str = ".", prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, sep, f"{prefix}{key}{sep}"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class RunLoggers:
    """Every logger a run asked for (``config.loggers``), written to together.

    ``resume_epoch``: the epoch a resumed run continues after (``None``: a new run); the
    metrics files lose later records, TensorBoard is told to drop them (from the step
    ``num_envs`` gives).
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
        self.others: list[TensorBoardLogger | WandbLogger] = []
        if LoggerKind.TENSORBOARD in kinds:
            resume_step = None if resume_epoch is None else (
                resume_epoch * config.steps_per_epoch * num_envs + 1)
            self.others.append(TensorBoardLogger(config.run_path / TENSORBOARD_DIR, resume_step))
        if LoggerKind.WANDB in kinds:
            self.others.append(WandbLogger(config, resumed=not fresh))

    def write(self, record: dict[str, Any]) -> None:
        """Log one epoch everywhere (:class:`WriteError`: a file could not be written)."""
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


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The record's numbers as ``name``, ``group/agent`` or ``group/learner/metric`` tags
    (no nulls, no lists)."""
    return {tag: float(value) for tag, value in _flatten(record, "/").items()
            if isinstance(value, int | float) and not isinstance(value, bool)}


def check_installed(kinds: tuple[LoggerKind, ...]) -> None:
    """Refuse, before a run starts, a logger whose package is not installed (one
    :class:`ConfigError` naming the ``pip`` command)."""
    for kind in kinds:
        try:
            if kind in OPTIONAL:
                importlib.import_module(OPTIONAL[kind])
        except ImportError as exc:
            package = OPTIONAL[kind]
            raise ConfigError(f"--logger {kind.value} needs the '{package}' package, which is "
                              f"not installed: pip install 'parcat[{package}]' (or pip install "
                              f"{package})") from exc


class TensorBoardLogger:
    """Scalars in a TensorBoard event file, written with TensorBoard's own record writer;
    each epoch is appended and the file closed again. From a resumed run's ``resume_step``
    on, TensorBoard drops what an interrupted run logged (a ``SessionLog.START`` event).
    """

    def __init__(self, folder: Path, resume_step: int | None) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2  # checked by check_installed
        from tensorboard.summary.writer.record_writer import RecordWriter

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
    """Every number of each epoch to Weights & Biases (``WANDB_MODE=offline`` works)."""

    def __init__(self, config: TrainConfig, resumed: bool) -> None:
        import wandb  # checked by check_installed

        self.run = wandb.init(project="parcat", name=config.run_path.name,
                              config=config.to_dict(), resume="allow" if resumed else None)

    def write(self, record: dict[str, Any]) -> None:
        """Log the record's numbers at its total environment steps."""
        self.run.log(scalars(record), step=int(record[STEP_KEY]))

    def close(self) -> None:
        """Finish the W&B run."""
        self.run.finish()
