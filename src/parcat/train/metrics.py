"""The per-epoch metrics log of a run (JSON lines or CSV), appended as epochs finish."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from parcat.core import jsontext
from parcat.core.atomic import write_text_atomically
from parcat.core.errors import ConfigError
from parcat.core.readfile import read_regular


class MetricsLog:
    """Appends one record per epoch to ``RUN/metrics.jsonl`` (or ``metrics.csv``).

    Args:
        run_path: The run directory.
        fmt: ``jsonl`` or ``csv``.
        fresh: Start a new log (a resumed run appends to the one in its checkpoint).
    """

    def __init__(self, run_path: Path, fmt: str, fresh: bool) -> None:
        self.path = run_path / f"metrics.{fmt}"
        self.fmt = fmt
        run_path.mkdir(parents=True, exist_ok=True)
        if fresh and self.path.exists():
            self.path.unlink()

    def truncate(self, epochs: int) -> None:
        """Drop records past ``epochs`` (written after the checkpoint a run resumes from),
        and a last line that a killed write cut short; the file is replaced atomically.

        Raises:
            ConfigError: a line before the last is not a record (see :func:`read_metrics`),
                or its epoch does not follow the one before (two runs wrote the log at
                once, as parcat before its run lock let them).
        """
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
        with self.path.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(flat))
            if new:
                writer.writeheader()
            writer.writerow(flat)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics log (``.jsonl``, or ``.csv`` with ``reward.agent_0`` columns).

    A last line cut short (parcat killed while it appended a record) is left out.

    Raises:
        ConfigError: the file is unreadable, a line before the last is not an epoch's
            record, or a value is an integer too large for a float; the message names the line.
    """
    if path.suffix == ".csv":  # row n is line n + 2, after the header
        numbered = [(n + 2, _unflatten(row)) for n, row in enumerate(_csv_rows(path)[1])]
    else:
        numbered = [(n, record) for n, _, record in _jsonl_lines(path)]
    for line, record in numbered:
        _check_floats(path, line, record)
    return [record for _, record in numbered]


def _check_floats(path: Path, line: int, value: Any) -> None:
    """Refuse an integer no float can hold (charts and loggers turn values into floats)."""
    if isinstance(value, dict):
        for item in value.values():
            _check_floats(path, line, item)
    elif isinstance(value, list):
        for item in value:
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
        if not isinstance(record, dict) or not _is_int(record.get("epoch")):
            raise ConfigError(
                f"metrics log '{path}' line {index + 1}: expected an epoch's mapping with an "
                "integer 'epoch' key; fix or delete that line"
            )
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
                    "header's columns with an integer 'epoch'; fix or delete that line"
                )
            rows.append(row)
    except csv.Error as exc:  # a NUL byte, a quote left open
        raise ConfigError(f"metrics log '{path}' line {reader.line_num} is not CSV; fix or "
                          "delete that line") from exc
    return list(reader.fieldnames or []), rows


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    if text in ("", "None", "nan"):
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


NESTED_TWICE = ("learner_metrics",)
"""Record keys whose values are mappings of mappings (CSV columns ``key.name.metric``)."""


def _flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
