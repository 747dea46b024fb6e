"""The per-epoch metrics log of a run (JSON lines or CSV), appended as epochs finish."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from parcat.errors import ConfigError


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
        """Drop records past ``epochs`` (written after the checkpoint a run resumes from)."""
        if not self.path.exists():
            return
        if self.fmt == "jsonl":
            kept = [r for r in read_metrics(self.path) if r["epoch"] <= epochs]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
            return
        with self.path.open(newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if int(r["epoch"]) <= epochs]
        self.path.unlink()
        for row in rows:
            self.write(row)

    def write(self, record: dict[str, Any]) -> None:
        """Append one epoch's record."""
        if self.fmt == "jsonl":
            with self.path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
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

    Raises:
        ConfigError: the file is unreadable or a record is not an epoch's mapping.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read metrics log '{path}': {exc.strerror}") from exc
    if path.suffix == ".csv":
        records = [_unflatten(row) for row in csv.DictReader(text.splitlines())]
    else:
        records = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"metrics log '{path}' line {number}: not JSON") from exc
    for number, record in enumerate(records, 1):
        if not isinstance(record, dict) or "epoch" not in record:
            raise ConfigError(f"metrics log '{path}' record {number}: expected an epoch's "
                              "mapping with an 'epoch' key")
    return records


def _unflatten(row: dict[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for key, value in row.items():
        number: Any = _number(value)
        head, dot, tail = key.partition(".")
        if dot:
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


def _flatten(record: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat
