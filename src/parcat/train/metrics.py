"""The per-epoch metrics log of a run (JSON lines or CSV), appended as epochs finish."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any


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
    """The records of a JSON-lines metrics log."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _flatten(record: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat
